"""The RAS collector's section: ``[agent.collectors.ras]``."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from ranksight.agent.collector_settings import CollectorSettings


class RasSettings(CollectorSettings):
    interval_s: float = Field(10.0, gt=0, description="status poll period of the job's lease holder")
    addr: str | None = Field(
        None, description="RAS endpoint, NCCL_RAS_ADDR syntax; default $NCCL_RAS_ADDR or localhost:28028"
    )
    timeout_s: float = Field(
        30.0, gt=0, description="cap on one RAS exchange; each read may wait 2 x collective_timeout_s + 1 s"
    )
    collective_timeout_s: int = Field(
        5,
        ge=0,
        description="sent as TIMEOUT <s>: the server's gathering timeout, whole seconds; 0 disables it",
    )
    detail_every: int = Field(
        3,
        ge=1,
        description="every Nth poll adds a JSON status (op counts for hang detection) to the text status",
    )
    max_reply_bytes: int = Field(64 << 20, ge=1024, description="larger status replies are refused")
    verbose: bool = Field(False, description="VERBOSE STATUS instead of STATUS")
    monitor: bool = Field(True, description="hold a MONITOR connection where the endpoint supports it")
    lease_ttl_s: float | None = Field(None, gt=0, description="poll lease lifetime; default 3 x interval")
    lease_bucket_max_bytes: int = Field(
        1 << 20,
        ge=64 << 10,
        description="size limit of the RAS lease bucket (JetStream KV ranksight_ras_leases) the aggregator creates "
        "at startup with this and the lease lifetime of its own config (agents may not create it)",
    )
    proc_root: Path = Field(
        Path("/proc"), description="where to find the RAS port's process and its scheduler env"
    )
    diagnostics: bool = Field(
        True,
        description="the job's lease holder runs RAS DIAGNOSTICS once per new job (NCCL 2.31+; older releases "
        "answer Unknown command and are not asked again) and publishes a ras_diagnostics record",
    )
    profile_control: bool = Field(
        False,
        description="accept the ras_profile agent command (ranksight ras profile --job): CONTROL PROFILER_MASK "
        "sent to this node's RAS endpoint, NCCL 2.31+; off: the command is refused",
    )
