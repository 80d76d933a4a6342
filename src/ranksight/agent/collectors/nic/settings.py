"""The NIC collector's section: ``[agent.collectors.nic]``."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from ranksight.agent.collector_settings import CollectorSettings


class NicSettings(CollectorSettings):
    interval_s: float = Field(2.0, gt=0)
    sysfs_root: Path = Field(Path("/sys"), description="sysfs root: RDMA ports and netdevs are read under it")
    netdevs: list[str] | None = Field(
        None, description="netdev names to watch; default: every netdev with a device (physical), no loopback"
    )
    tool_counters: bool = Field(
        True,
        description="read `rdma statistic -j` / `ethtool -S` for ports and netdevs whose sysfs has no counters",
    )
    command_timeout_s: float = Field(5.0, gt=0, description="limit for one rdma/ethtool run")
    counters_full_every_s: float = Field(
        60.0,
        ge=0,
        description="a port's record carries every counter at most this often, in between only those that changed "
        "(0: every record carries every counter)",
    )
    traffic_counters_every_s: float = Field(
        10.0,
        ge=0,
        description="between full records, the changed counters of traffic (bytes, packets, frames by size or queue) "
        "go with a port's record at most this often, those that count trouble (errors, drops, discards, congestion, "
        "pauses, link transitions, retries, timeouts) with every record; rates come from every sample either way "
        "(0: every record carries every changed counter)",
    )
