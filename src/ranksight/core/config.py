"""Typed configuration: a TOML file, ``RANKSIGHT_`` environment variables and command-line flags, unknown keys rejected.

Precedence (:func:`load_settings`): flags (its overrides) win over the environment, which wins over the file.
``Settings(**values)`` is those values alone, on the defaults.

Nested keys use ``__`` in the environment: ``RANKSIGHT_NATS__URL``, ``RANKSIGHT_AGENT__COLLECTORS__GPU__INTERVAL_S``;
the value of a list, a table or a section is JSON (``RANKSIGHT_DEPLOY__PIP_OPTIONS='["--no-index"]'``). The file comes
from ``--config``, else ``$RANKSIGHT_CONFIG``; with neither, the defaults below work on one machine.
"""

from __future__ import annotations

import json
import os
import socket
import tomllib
import types
import typing
from pathlib import Path
from typing import Any, Literal

import msgspec
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from ranksight.client import DEFAULT_SOCKET as DEFAULT_APP_SOCKET
from ranksight.client import SOCKET_ENV as APP_SOCKET_ENV
from ranksight.errors import UsageError
from ranksight.schemas.subjects import sanitize_token
from ranksight.schemas.wire import WireFormat

CONFIG_ENV = "RANKSIGHT_CONFIG"
ENV_PREFIX = "RANKSIGHT_"
# RANKSIGHT_* variables that are read elsewhere and are not settings.
NON_SETTING_ENV = frozenset({CONFIG_ENV})
NON_SETTING_ENV |= {APP_SOCKET_ENV}  # read by training processes (ranksight.client), not a setting


class ConfigError(UsageError, ValueError):
    """The configuration file or environment is invalid; the message names the offending key."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NatsSettings(Section):
    url: str = Field("nats://127.0.0.1:4222", description="comma-separated server URLs")
    user: str | None = None
    password: SecretStr | None = None
    token: SecretStr | None = None
    nkey_seed_file: Path | None = None
    creds_file: Path | None = None
    tls_ca_file: Path | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    connect_timeout_s: float = 5.0
    jetstream_ready_timeout_s: float = Field(
        60.0,
        gt=0,
        description="how long the aggregator retries creating its stream, buckets and consumers while JetStream does "
        "not answer yet (a cluster still electing leaders)",
    )
    jetstream_replicas: int = Field(
        1,
        ge=1,
        le=5,
        description="copies of the event stream and KV buckets kept by a JetStream cluster (3 on a 3-server "
        "cluster survives the loss of any one server); 1 on a single server",
    )
    inbox_prefix: str = Field(
        "_INBOX",
        pattern=r"^[A-Za-z0-9_$-]+(\.[A-Za-z0-9_$-]+)*$",
        description="prefix of this client's reply subjects; one per NATS user (e.g. _INBOX.gpu-node-001) lets "
        "the server's permissions confine each user to its own replies",
    )


class CollectorSettings(Section):
    """What every collector's section has, and its facts' lifetime."""

    enabled: bool = True
    interval_s: float = Field(5.0, gt=0)
    ttl_s: float | None = Field(None, gt=0, description="fact lifetime; default 3 x interval")

    def ttl(self) -> float:
        return self.ttl_s if self.ttl_s is not None else 3 * self.interval_s


class HeartbeatSettings(CollectorSettings):
    interval_s: float = Field(5.0, gt=0)
    jobs_dir: Path = Field(
        Path("/run/ranksight/jobs"),
        description="where the Slurm prolog (deploy/slurm/prolog.sh) writes <jobid>.env; the heartbeat reports them",
    )
    max_jobs: int = Field(64, ge=0, description="job files read per heartbeat at most (newest first)")


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


class InspectorSettings(CollectorSettings):
    interval_s: float = Field(1.0, gt=0, description="how often the dump directory is re-scanned when idle")
    dump_dir: Path | None = Field(
        None, description="the plugin's NCCL_INSPECTOR_DUMP_DIR; unset or missing: the collector is absent"
    )
    read_chunk_bytes: int = Field(1 << 20, ge=4096, description="most bytes read from one file per pass")
    # raw records on request (the ``inspector_raw`` command): bounds of one answer page
    raw_max_records: int = Field(2000, ge=1, description="inspector_raw: records per answer page at most")
    raw_max_bytes: int = Field(
        512 * 1024,
        ge=4096,
        description="inspector_raw: JSON bytes per answer page at most (and half max_payload)",
    )
    raw_scan_bytes: int = Field(
        32 << 20,
        ge=4096,
        description="inspector_raw: dump file bytes read per request at most (then a next page)",
    )
    raw_max_window_s: float = Field(
        3600.0, gt=0, description="inspector_raw: the widest [from, to] dump-time window a request may ask"
    )
    summary_window_s: float = Field(
        5.0,
        gt=0,
        description="inspector_summary window, aligned to wall-clock multiples (every node's line up)",
    )
    summary_slice_s: float = Field(
        0.5,
        gt=0,
        description="resolution of a summary's per-slice aggregates (match aggregator.stragglers.slice_s)",
    )
    summary_publish_s: float = Field(
        2.5,
        gt=0,
        description="how often the records read since the last time are published, one inspector_summary part per "
        "window and key (the parts of a window add up); shorter: alerts a little sooner, more rows for the aggregator "
        "(1 s: about 2 x the summary rows of 2.5 s)",
    )
    summary_max_keys: int = Field(
        100_000,
        ge=1,
        description="open (window, comm, collective, size, process) summaries at most; beyond: counted",
    )
    raw_rate_per_s: float = Field(
        10.0,
        ge=0,
        description="raw inspector records published per second at most, sampled fairly across comms (0: none); "
        "dump files keep every record on the node",
    )
    # the plugin's other outputs (inspector_metrics records): its Prometheus textfiles and its OTLP/HTTP export
    prom_files: bool = Field(
        True, description="read the plugin's Prometheus textfiles (nccl_inspector_metrics_*.prom) in dump_dir"
    )
    otlp_port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description="loopback port of the OTLP/HTTP JSON receiver for the plugin's export (NCCL_INSPECTOR_OTEL_EXPORT"
        "=1 posts to http://localhost:4318/v1/metrics); unset: no receiver",
    )
    otlp_max_body_bytes: int = Field(
        8 << 20, ge=1024, description="OTLP receiver: bytes of one request body at most (beyond: 413)"
    )
    otlp_max_requests_per_s: float = Field(
        20.0,
        gt=0,
        description="OTLP receiver: requests per second at most, bursts of one second (beyond: 429)",
    )
    otlp_max_connections: int = Field(16, ge=1, description="OTLP receiver: open connections at most")
    otlp_read_timeout_s: float = Field(
        10.0, gt=0, description="OTLP receiver: time to read one request (headers and body)"
    )

    def summary_ttl(self) -> float:
        """A summary stays valid until the next window's should have come."""
        return 2 * self.summary_window_s + self.summary_publish_s


class GpuSettings(CollectorSettings):
    interval_s: float = Field(5.0, gt=0)
    sources: list[
        Literal[
            "amdsmi",
            "amd-smi",
            "amd-smi-monitor",
            "rocm-smi",
            "sysfs",
            "nvml",
            "nvidia-smi-xml",
            "nvidia-smi",
        ]
    ] = Field(
        ["amdsmi", "amd-smi", "rocm-smi", "sysfs", "nvml", "nvidia-smi-xml", "nvidia-smi"],
        description="GPU sources tried in this order; the first that returns GPUs wins, a later one takes over "
        "when it starts failing (amd-smi-monitor: opt-in text fallback for a broken amd-smi metric --json)",
    )
    links: bool = Field(True, description="add XGMI/PCIe link state (amd-smi topology) to amd-smi records")
    command_timeout_s: float = Field(10.0, gt=0, description="limit for one amd-smi/rocm-smi/nvidia-smi run")
    sysfs_root: Path = Field(Path("/sys"), description="sysfs root of the sysfs source")


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


class ProbeSettings(CollectorSettings):
    interval_s: float = Field(30.0, gt=0, description="how often the node announces its probe endpoint")
    ttl_s: float | None = Field(
        300.0, gt=0, description="a link measurement's lifetime; the planner re-probes after"
    )
    port: int = Field(28100, ge=0, le=65535, description="probe server TCP port (0: any free port)")
    listen_host: str | None = Field(None, description="address the probe server listens on; default: all")
    advertise: list[str] = Field(
        default_factory=list,
        description="addresses peers probe this node on; default: what the hostname resolves to",
    )
    rail: str | None = Field(
        None, description="rail or network group of this node (the planner pairs same-rail nodes)"
    )
    allow: list[str] = Field(
        default_factory=lambda: [
            "10.0.0.0/8",
            "172.16.0.0/12",
            "192.168.0.0/16",
            "127.0.0.0/8",
            "fc00::/7",
            "::1/128",
        ],
        description="the cluster's probe networks (CIDRs): the probe server accepts clients from these, and the "
        "agent probes only endpoints its peers announce inside them",
    )
    max_concurrent: int = Field(2, ge=1, description="probes served at once; more are answered busy")
    max_per_peer: int = Field(
        1, ge=1, description="probes served at once to one address; more are answered busy"
    )
    max_bytes: int = Field(
        256 * 1024**2, ge=1, description="bytes per probe direction the server grants at most"
    )
    max_seconds: float = Field(5.0, gt=0, description="seconds per probe direction the server grants at most")
    max_bytes_per_minute: int = Field(
        4 * 1024**3,
        ge=1,
        description="bytes all probes served together move per minute (charged as they move)",
    )
    max_bytes_per_peer_per_minute: int = Field(
        1024**3,
        ge=1,
        description="bytes the probes of one address move per minute: those this server serves it, and those this "
        "agent's own probes send it",
    )
    max_peers: int = Field(
        100_000,
        ge=1,
        description="registered probe endpoints remembered (probe commands may aim only at these)",
    )
    handshake_timeout_s: float = Field(2.0, gt=0, description="a client must send its request within this")
    idle_timeout_s: float = Field(
        5.0, gt=0, description="a read or write that makes no progress this long ends the probe"
    )


class GpuProbeSettings(CollectorSettings):
    """Active GPU probe (agent/gpuprobe): measured in a subprocess, only while no job uses the node."""

    interval_s: float = Field(default=60.0, gt=0, description="how often to check whether a probe is due")
    ttl_s: float | None = Field(
        default=3600.0, gt=0, description="a result's lifetime; re-probed at 90% of it"
    )
    stagger_s: float = Field(
        default=600.0, ge=0, description="first probe waits a per-node offset in [0, stagger_s)"
    )
    timeout_s: float = Field(default=300.0, gt=0, description="the probe subprocess is killed after this")
    host_memory_limit_bytes: int = Field(
        default=8 << 30, gt=0, description="probe subprocess killed above this RSS"
    )
    matmul_n: int = Field(default=8192, ge=16, description="square matmul size (large enough to reach peak)")
    matmul_iters: int = Field(default=10, ge=1, description="multiplies per timed run")
    warmup: int = Field(default=3, ge=0, description="untimed runs first")
    repeats: int = Field(default=5, ge=1, description="timed runs; the best counts")
    mem_bytes: int = Field(default=4 << 30, ge=4, description="bandwidth buffer, far larger than GPU caches")
    max_mem_fraction: float = Field(
        default=0.5, gt=0, le=0.9, description="cap of the buffer, of free device memory"
    )
    allow_cpu: bool = Field(
        default=False, description="measure the CPU when no GPU is visible (testing only)"
    )
    worker_command: list[str] | None = Field(
        default=None,
        description="another program speaking the worker protocol; default python -m ranksight.agent.gpuprobe.worker",
    )
    ras_port: int = Field(
        default=28028, ge=1, le=65535, description="a listening RAS port means a job runs here"
    )
    inspector_dump_dir: Path | None = Field(
        default=None, description="Inspector dump dir; fresh files mean a job"
    )
    inspector_fresh_s: float = Field(default=120.0, gt=0)
    busy_util_pct: float = Field(
        default=10.0, ge=0, le=100, description="GPU utilization at or above this means busy"
    )
    ignore_processes: list[str] = Field(
        default=["nvidia-persistenced", "nv-hostengine", "dcgm-exporter", "gpuagent", "amd-metrics-exporter"],
        description="GPU device users that are daemons, not jobs",
    )
    proc_root: Path = Field(default=Path("/proc"))
    sys_root: Path = Field(default=Path("/sys"))


class AppSettings(CollectorSettings):
    """The socket training processes send heartbeats, sections and markers to (``ranksight.client``)."""

    socket_path: Path | None = Field(
        None,
        description=f"Unix seqpacket socket; default <state_dir>/app.sock (this instance's own); jobs find it at "
        f"${APP_SOCKET_ENV}, else at {DEFAULT_APP_SOCKET} (the systemd unit's)",
    )
    socket_mode: int = Field(
        0o666, description="file mode of the socket: training processes may run as any user"
    )
    heartbeat_timeout_s: float = Field(
        60.0, gt=0, description="a rank is overdue after this without a heartbeat"
    )
    heartbeat_initial_timeout_s: float = Field(
        600.0, gt=0, description="allowed from client.start() to the first heartbeat (model loading)"
    )
    section_timeout_s: float = Field(
        1800.0, gt=0, description="default limit on how long a section stays open"
    )
    section_timeouts: dict[str, float] = Field(
        {}, description="per section name, e.g. {checkpoint_save = 3600}"
    )
    dump_max_bytes: int = Field(
        64 * 1024 * 1024,
        ge=64 * 1024,
        description="hang dumps: the most one process's dump may hold (its Flight Recorder is left out beyond); also "
        "the largest file `ranksight analyze hang` reads",
    )
    dump_timeout_s: float = Field(
        10.0,
        gt=0,
        description="hang dumps: how long the agent waits for one process to answer a dump request",
    )
    dump_concurrency: int = Field(
        4, ge=1, description="hang dumps: processes asked at once (each answer is built in its own process)"
    )
    dump_max_processes: int = Field(
        4096, ge=1, description="hang dumps: processes of this node that may hold a dump connection at once"
    )
    dump_collective_frames: bool = Field(
        False,
        description="hang dumps: ask torch for each recorded collective's Python call site too (torch symbolizes "
        "them: seconds of the process's CPU the first time; every thread's stack is always included)",
    )
    torch_dump_dir: Path | None = Field(
        None,
        description="hang dumps: also read the Flight Recorder files torch writes on a watchdog timeout here (the "
        "directory of the jobs' TORCH_NCCL_DEBUG_INFO_TEMP_FILE; the rank is the trailing number of each name)",
    )
    torch_dump_max_age_s: float = Field(
        900.0,
        gt=0,
        description="hang dumps: torch's files older than this belong to an earlier hang: not read",
    )
    torch_worker_sockets: str | None = Field(
        None,
        description="hang dumps: also ask torch's worker servers whose Unix sockets match this glob (the jobs' "
        "TORCH_WORKER_SERVER_SOCKET, e.g. /run/torch/worker_*.sock) for their Flight Recorder (fr_trace_json); the rank "
        "is the trailing number of the socket's name, else the server process's RANK",
    )
    torch_debug_pipe_prefix: str | None = Field(
        None,
        description="hang dumps, NCCL jobs: also write a byte into torch's debug-info pipes <prefix><rank>.pipe (the "
        "jobs' TORCH_NCCL_DEBUG_INFO_PIPE_FILE) so each process writes its Flight Recorder into torch_dump_dir (its "
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE's directory), read torch_pipe_wait_s later",
    )
    torch_pipe_wait_s: float = Field(
        3.0,
        gt=0,
        le=60,
        description="hang dumps: how long after writing into torch's debug-info pipes its files are read (torch looks "
        "at the pipe about once a second)",
    )
    dump_entries_per_group: int = Field(
        64,
        ge=1,
        le=100_000,
        description="hang dumps: the last entries of each process group an agent's reply keeps",
    )
    dump_max_files: int = Field(
        100_000,
        ge=1,
        description="the most dump files read from one directory (`ranksight analyze hang`, torch_dump_dir)",
    )

    max_markers_per_minute: int = Field(
        600,
        ge=1,
        description="markers one training process may post per minute; more are dropped and counted",
    )

    @model_validator(mode="after")
    def _pipe_needs_dump_dir(self) -> AppSettings:
        if self.torch_debug_pipe_prefix is not None and self.torch_dump_dir is None:
            raise ValueError(
                "torch_debug_pipe_prefix needs torch_dump_dir: torch answers its pipe with a file there"
            )
        return self


class XidSettings(CollectorSettings):
    """GPU Xid / NVSwitch SXid events from the kernel log (``gpu_xid`` records, the ``gpu_xid`` rule)."""

    interval_s: float = Field(1.0, gt=0, description="how often new kernel log records are read")
    ttl_s: float | None = Field(
        1800.0, gt=0, description="how long an Xid event keeps its gpu_xid alert firing"
    )
    kmsg_path: Path = Field(
        Path("/dev/kmsg"),
        description="the kernel log (or a FIFO/file of its lines); unreadable: the collector is absent",
    )


class CollectorsSettings(Section):
    heartbeat: HeartbeatSettings = HeartbeatSettings()
    ras: RasSettings = RasSettings()
    inspector: InspectorSettings = InspectorSettings()
    gpu: GpuSettings = GpuSettings()
    nic: NicSettings = NicSettings()
    probe: ProbeSettings = ProbeSettings()
    gpu_probe: GpuProbeSettings = GpuProbeSettings()
    app: AppSettings = AppSettings()
    xid: XidSettings = XidSettings()


class AgentSettings(Section):
    node: str = Field(
        default_factory=lambda: sanitize_token(socket.gethostname()),
        description="node name, a subject token ([A-Za-z0-9_-]); default: the hostname, dots as '_'",
    )
    batch_max_records: int = Field(2000, ge=1)
    batch_max_bytes: int = Field(512 * 1024, ge=1024, description="keep below the server's max_payload")
    batch_max_delay_s: float = Field(0.25, gt=0)
    wire_format: WireFormat = Field(
        "compact",
        description="record batches as columns (compact), or one map per record (map), which aggregators older than "
        "the compact wire read",
    )
    queue_max_messages: int = Field(10_000, ge=1, description="publisher queue bound; gauges drop beyond it")
    max_inflight: int = Field(512, ge=1, description="unacknowledged JetStream publishes at once")
    publish_timeout_s: float = Field(5.0, gt=0)
    redetect_s: float = Field(
        30.0, gt=0, description="how often an absent collector checks again whether its source has appeared"
    )
    collectors: CollectorsSettings = CollectorsSettings()


class IngestSettings(Section):
    """Bounds on what one peer can make ingest hold or keep (``[aggregator.ingest]``)."""

    fetch_max_bytes: int = Field(
        32 << 20,
        ge=1 << 20,
        description="bytes per fetched batch (raised to the server's max_payload if below)",
    )
    fetch_max_records: int = Field(
        200_000,
        ge=1,
        description="decoded records per commit: the rest of a fetched batch waits for the next commit, "
        "unacknowledged (a message is never split: one alone may bring up to its 100,000 records)",
    )
    max_ttl_s: float = Field(7 * 86400, gt=0, description="an envelope's ttl above this is dead-lettered")
    max_clock_ahead_s: float = Field(86400, gt=0, description="envelope ts at most this far after receipt")
    max_clock_behind_s: float = Field(
        30 * 86400,
        gt=0,
        description="envelope ts at most this far before receipt (keep above stream_max_age_s)",
    )
    max_seq_jump: int = Field(
        1_000_000,
        ge=1,
        description="a larger jump in an incarnation's seq opens no gap (counted as a seq jump)",
    )
    max_incarnations_per_node: int = Field(
        8, ge=1, description="sequence state kept per node; the least recently seen incarnation is forgotten"
    )
    conflict_window: int = Field(
        64,
        ge=0,
        description="recent messages per incarnation remembered to tell a re-send from a conflicting one",
    )
    max_nodes: int = Field(
        20_000, ge=1, description="nodes tracked at once; events of further nodes are dead-lettered"
    )
    max_sub_records: int = Field(
        65_536,
        ge=1024,
        description="entries of a record's lists and maps together (a GPU's links, a port's counters, a job's "
        "communicators) at most; a record with more is dead-lettered (too_many_sub_records)",
    )
    node_forget_after_s: float = Field(
        86400,
        gt=0,
        description="nodes silent this long leave live state and sequence state (history keeps them)",
    )
    checkpoint_wal_mib: int = Field(
        64,
        ge=1,
        le=4096,
        description="write-ahead log size that makes a commit checkpoint into the database file (DuckDB's own "
        "default, 16, rewrote each table's newest row group about every second at 1024 nodes)",
    )
    row_group_rows: int = Field(
        32_768,
        ge=2048,
        le=1_048_576,
        multiple_of=2048,
        description="rows per row group of the history's tables (DuckDB's ROW_GROUP_SIZE, 122,880 by default): "
        "a checkpoint rewrites each table's newest row group, and at 1024 nodes DuckDB's own size lifted the "
        "aggregator's RSS by about 400 MiB at each one, this one by about 200",
    )
    commit_every_s: float = Field(
        0.5,
        ge=0,
        le=5,
        description="while ingest is caught up (nothing waits in the stream behind a fetch), it commits at most this "
        "often: much of a commit's cost does not grow with its size (at 256 nodes, committing each fetch as it "
        "came took 1.3 x the writer's CPU); a message waits up to this long more before it is live (0: at once)",
    )
    nic_history_counters: Literal["full", "all"] = Field(
        "full",
        description="which `nic` history rows keep their `counters` map: `full`, the records that carry every counter "
        "of their port (its first, then at most every agent `counters_full_every_s`); `all`, also the records of "
        "the counters changed in between. Every row keeps its typed columns (bytes, packets, rates, error and "
        "congestion rates, flaps) and live state follows every change either way; `all` at 1024 nodes of ionic NICs "
        "(607 counters a port): about 0.07 of a core more and most of the history's bytes",
    )
    dead_letter_payload_bytes: int = Field(4096, ge=0, description="payload bytes kept per dead letter")
    dead_letter_retention_days: float = Field(7, gt=0, description="dead letters older than this are deleted")


class QuerySettings(Section):
    """The query API, SQL over history, retention and export (``aggregator.query``)."""

    sql_time_limit_s: float = Field(10.0, gt=0, description="a SQL query is interrupted after this")
    sql_max_rows: int = Field(10_000, ge=1, description="rows returned at most; beyond it truncated=true")
    reader_threads: int = Field(
        4,
        ge=2,
        description="reader cursors: user SQL takes at most sql_max_concurrent, the built-in queries the rest",
    )
    sql_max_concurrent: int = Field(2, ge=1, description="user SQL queries that run at once")
    sql_queue_wait_s: float = Field(
        2.0, ge=0, description="a SQL query waits this long for a free slot, then is answered busy"
    )
    sql_memory_limit_bytes: int = Field(
        128 << 20,
        ge=16 << 20,
        description="DuckDB memory for SQL queries (larger sorts and joins spill to sql_temp_max_bytes); more fails "
        "with out of memory. DuckDB keeps the history it wrote cached in what queries leave free, so the aggregator's "
        "RSS grows by this plus writer_memory_limit_bytes over its first minutes (at 1024 nodes about 1 MiB/s)",
    )
    writer_memory_limit_bytes: int = Field(
        128 << 20,
        ge=16 << 20,
        description="DuckDB memory for ingest and retention, added to DuckDB's memory_limit (at 1024 nodes a commit's "
        "appended rows and their checkpoint take about 100 MiB)",
    )
    sql_threads: int = Field(
        1,
        ge=1,
        description="DuckDB's threads setting, for ingest's inserts and checkpoints as for queries: 1 keeps ingest's "
        "work on its writer thread (at 1024 nodes 3-4 % of a core and 20-40 MiB less than 2); more let large queries "
        "scan in parallel (a 10-million-row per-rank query: 74 ms with 1, 47 with 2, on 2 cores)",
    )
    sql_temp_max_bytes: int = Field(
        4 << 30,
        ge=0,
        description="disk that spilling queries may use in <db file>.tmp (max_temp_directory_size)",
    )
    sql_max_generated: int = Field(
        10_000_000,
        ge=1,
        description="elements that sized scalar functions (range(n), repeat(s, n), lpad...) may build in one query",
    )
    max_requests_in_flight: int = Field(
        1000, ge=1, description="NATS API requests answered at once; more are answered busy"
    )
    page_ttl_s: float = Field(
        60.0, gt=0, description="pages of an answer over the NATS max_payload are kept this long for `next`"
    )
    page_cache_bytes: int = Field(
        256 << 20,
        ge=1 << 20,
        description="pages waiting to be asked for, all answers together (oldest dropped)",
    )
    retention_interval_s: float = Field(
        3600, gt=0, description="how often history older than retention_days goes"
    )
    export_enabled: bool = Field(
        True, description="allow `ranksight export` to write Parquet on the aggregator host"
    )
    export_root: Path | None = Field(
        None, description="export writes only under this folder; default <state_dir>/exports"
    )
    series_max_points: int = Field(
        1000, ge=2, description="time buckets per series answer at most (web page charts)"
    )
    series_max_lines: int = Field(
        512, ge=1, description="lines (GPUs, ports, ranks...) per series answer at most"
    )
    series_max_range_s: float = Field(
        7 * 86400, gt=0, description="the longest time range one series answer may cover"
    )

    @model_validator(mode="after")
    def _lane_for_builtin_queries(self) -> QuerySettings:
        if self.sql_max_concurrent >= self.reader_threads:
            raise ValueError(
                "sql_max_concurrent must be below reader_threads: the built-in queries need a cursor too"
            )
        return self


class ProbePlannerSettings(Section):
    enabled: bool = True
    round_pause_s: float = Field(1.0, ge=0, description="pause between probe rounds")
    full_mesh_max_nodes: int = Field(
        16, ge=2, description="above this many nodes, probe a sampled set of pairs"
    )
    random_pairs: int = Field(4, ge=0, description="random pairs added to the sampled set each round")
    echo_count: int = Field(50, ge=1, le=1000, description="small echoes per RTT measurement")
    bytes: int = Field(64 * 1024**2, ge=1, description="byte budget per direction of a full probe")
    seconds: float = Field(1.0, gt=0, le=30, description="time budget per direction of a full probe")
    command_timeout_s: float = Field(30.0, gt=0)
    job_hold_s: float = Field(
        60.0,
        ge=0,
        description="a node with job data (RAS, Inspector) this recently still runs a job: light probes only",
    )
    degraded_ratio: float = Field(
        0.5,
        gt=0,
        lt=1,
        description="link_degraded: bandwidth below this share of its history or of comparable links",
    )
    history: int = Field(20, ge=2, description="measurements kept per link for its own baseline")
    min_history: int = Field(
        3, ge=1, description="earlier measurements needed before comparing a link to itself"
    )
    comparable_window_s: float = Field(
        120.0, gt=0, description="link_degraded: peers count as comparable when measured this close in time"
    )
    degraded_confirm: int = Field(
        2,
        ge=1,
        description="link_degraded: measurements in a row that must all be low (fewer while a link has fewer)",
    )
    max_stall_share: float = Field(
        0.3,
        ge=0,
        le=1,
        description="link_degraded: a measurement with either end's probe loop stalled (busy or starved of CPU) "
        "longer than this share of it measured the host, not the link: not compared",
    )


class StragglerSettings(Section):
    """Online straggler analysis (design §6); the same engine as ``ranksight analyze inspector``."""

    window_s: float = Field(
        6.0, gt=0, description="sliding evaluation horizon over the records' dump timestamps"
    )
    slice_s: float = Field(0.5, gt=0, description="records are summed per slice of dump time")
    judge_every_s: float = Field(
        1.0,
        gt=0,
        description="online, the horizon is judged at every this much dump time (rounded to whole slices; offline "
        "`analyze inspector` judges every slice): the engine's main cost at scale, halved from every 0.5 s slice "
        "with the same findings and alert times in benchmarks/diagnosis.py",
    )
    confirm_windows: int = Field(
        3, ge=1, description="most consecutive flagged evaluations a weak finding needs before it alerts"
    )
    evidence_z: float = Field(
        12.0,
        gt=0,
        description="summed robust z-score that confirms a finding (a strong one confirms at once)",
    )
    hiccup_chance: float = Field(
        1e-3,
        gt=0,
        le=1,
        description="a process whose excess compute comes in slow pools among quiet ones is reported only where that "
        "many slow pools would come by chance at most this often: at the rate its healthy peers' pools are as slow, "
        "times the processes compared (a noisy healthy job's hiccups clustering on one process for a few seconds are "
        "not a straggler; a steady one, or an intermittent one recurring over its remembered windows, is far rarer)",
    )
    catch_up_windows: int = Field(
        4,
        ge=1,
        description="records that arrive late (an agent reading its dumps behind, an aggregator catching up) are "
        "judged up to this many windows back; the engine keeps their slices, so memory grows with it (at 1024 nodes "
        "x 8 GPUs in benchmarks/scale.py about 1.6 MB per 0.5 s slice: a row of NumPy arrays per key)",
    )
    clock_ahead_s: float = Field(
        5.0,
        gt=0,
        description="records dumped further past the aggregator's clock are not judged (a host whose clock runs "
        "ahead: its processes would be the newest and the job's real slices judged stale); counted per cluster in "
        "the status's stragglers.ahead. Keep it under twice window_s",
    )
    sampled_max_window_s: float = Field(
        300.0,
        gt=0,
        description="sampled capture (2.28/2.29 plugins): the horizon holds 48 dump ticks (a weak straggler needs "
        "many single-slot samples) and spans at most this much dump time: 240 s at 5 s dumps; longer intervals get "
        "fewer ticks. The engine keeps rows only for the samples, so memory follows the ticks, not this span",
    )
    retain_windows: int = Field(
        6,
        ge=2,
        description="a cluster silent (by receipt time) this many windows is forgotten: its alerts resolve",
    )
    evaluate_every_s: float = Field(
        2.0, gt=0, description="how often the engine runs (on tick, never per message)"
    )
    max_records: int = Field(
        2_000_000, ge=1000, description="records queued for the engine at most (beyond: dropped and counted)"
    )
    max_ranks: int = Field(
        1_000_000,
        ge=100,
        description="ranks followed at once: distinct (cluster, communicator, collective, host, pid) with records "
        "within hang_retain_s (and retain_windows x window_s); records of further ones are not analyzed, counted in "
        "the status's stragglers.untracked. Bounds what the engine and the hang finder keep against a peer naming new "
        "communicators or processes in every record (benchmarks/scale.py's 1024-node x 8-GPU job: 24,576)",
    )
    process: bool = Field(
        True,
        description="the aggregator runs the engine in a child process, started with the first Inspector records "
        "(its own interpreter lock: at a thousand nodes ingest alone fills a core); false: a thread, sharing it",
    )
    ingest_waits_at_records: int = Field(
        200_000,
        ge=1,
        description="records queued for the engine at which ingest stops fetching until the engine has taken them: "
        "an engine slower than the input makes the stream hold the backlog, not the aggregator's memory",
    )
    hang_quiet_s: float = Field(
        4.0,
        gt=0,
        description="a collective whose coll_sn stopped advancing this long (receipt time), with some ranks' last "
        "coll_sn behind their peers', is a hang (collective_hang)",
    )
    hang_retain_s: float = Field(
        600.0,
        gt=0,
        description="a hang silent this long is taken as a job that ended or was killed: it resolves",
    )

    @model_validator(mode="after")
    def _ingest_waits_before_dropping(self) -> StragglerSettings:
        if self.ingest_waits_at_records >= self.max_records:
            raise ValueError(
                "ingest_waits_at_records must be below max_records: a full queue drops records (processes "
                "then look idle) before ingest would wait for the engine"
            )
        return self


class RawEvidenceSettings(Section):
    """Raw Inspector records on a finding: the aggregator asks the involved agents (``inspector_raw``) for the raw
    records of the affected comms and window and writes them into history (``aggregator.raw_evidence``)."""

    enabled: bool = True
    rules: list[str] = Field(
        default_factory=lambda: ["straggler", "collective_hang", "comm_hang"],
        description="the alerts whose firing asks for raw records",
    )
    lookback_s: float = Field(
        30.0, gt=0, description="window: from this long before the alert fired (dump time)"
    )
    lookahead_s: float = Field(
        5.0, ge=0, description="window: to this long after it fired (clock skew margin)"
    )
    max_records_per_finding: int = Field(20_000, ge=1, description="records fetched per finding at most")
    max_nodes_per_finding: int = Field(
        64, ge=1, description="agents asked per finding at most (its own node first)"
    )
    max_concurrent_requests: int = Field(
        8, ge=1, description="agent requests in flight at once, all findings"
    )
    max_pending_findings: int = Field(
        64, ge=1, description="findings waiting for their records (beyond: not asked)"
    )
    page_records: int = Field(2000, ge=1, description="records asked per page (the agent caps it too)")
    max_pages_per_node: int = Field(
        1000,
        ge=1,
        description="pages asked of one agent per finding at most (a page scans a bounded part of its files)",
    )
    request_timeout_s: float = Field(5.0, gt=0)
    retries: int = Field(2, ge=0, description="retries of a page whose agent did not answer")
    retry_delay_s: float = Field(1.0, ge=0)


class HangForensicsSettings(Section):
    """Hang forensics (``aggregator.hang_forensics``): when a hang alert of ``rules`` fires for a job, the aggregator asks
    the agents of the job's nodes for every process's Flight Recorder and Python stacks (``hang_dump``), matches them
    across ranks and names the rank that never arrived, its op and its frame: in the same hang's ``comm_hang`` /
    ``collective_hang`` alert (``evidence.flight_recorder``) when there is one, else as ``flight_recorder_hang``."""

    enabled: bool = True
    rules: list[str] = Field(
        default_factory=lambda: [
            "collective_hang",
            "comm_hang",
            "rank_heartbeat_overdue",
            "rank_section_overdue",
        ],
        description="the alerts whose firing asks the job's agents for dumps",
    )
    request_timeout_s: float = Field(
        20.0,
        gt=0,
        description="how long one agent's hang_dump answer may take (its processes answer within "
        "agent.collectors.app.dump_timeout_s)",
    )
    max_nodes_per_job: int = Field(256, ge=1, description="agents asked per job at most")
    max_concurrent_requests: int = Field(8, ge=1, description="agent requests in flight at once, all jobs")
    cooldown_s: float = Field(
        60.0, ge=0, description="a job is dumped again on a new alert only this long after its previous dump"
    )
    min_wait_s: float = Field(
        2.0,
        ge=0,
        description="a rank behind its peers is named only once the peers waited this long in the op (dumps of a "
        "healthy job, taken a moment apart, may catch one rank an op ahead)",
    )
    retain_s: float = Field(
        1800.0, gt=0, description="a job's hang report is kept (and its alert firing) at most this long"
    )
    max_named_ranks: int = Field(
        64,
        ge=1,
        description="ranks one hang report names one by one (a flight_recorder_hang alert, a job dump row, an entry "
        "of the RAS / Inspector alert's evidence each), and the most ranks any list in that evidence holds; the rest "
        "are counted (ranks_not_named, totals)",
    )


class HardwareAlertSettings(Section):
    """Thresholds of the GPU and NIC alerts, and the live NIC state's bound (``aggregator.hardware``)."""

    gpu_throttled_for_s: float = Field(30.0, gt=0, description="a GPU must stay throttled this long to alert")
    gpu_edge_c: float = Field(90.0, gt=0, description="edge (NVIDIA: GPU core) temperature that alerts")
    gpu_junction_c: float = Field(105.0, gt=0, description="junction (hotspot) temperature that alerts")
    gpu_memory_c: float = Field(95.0, gt=0, description="memory (HBM) temperature that alerts")
    nic_flaps: int = Field(3, ge=1, description="link transitions within the window that alert")
    nic_flap_window_s: float = Field(300.0, gt=0, description="window the flaps are counted over")
    nic_errors_per_s: float = Field(1.0, gt=0, description="error counter increase rate that alerts")
    nic_errors_window_s: float = Field(
        60.0, gt=0, description="the error rate is averaged over this window (a stable rate, not one sample)"
    )
    nic_congestion_per_s: float = Field(1000.0, gt=0, description="CNP/ECN rate that alerts when sustained")
    nic_congestion_for_s: float = Field(30.0, gt=0, description="how long congestion must last to alert")
    nic_max_counters: int = Field(
        4096,
        ge=1,
        description="counters a live port keeps at most from records of changed counters added up (an ionic port "
        "has about 600); a record that would pass it stands alone, its counters marked incomplete",
    )


class RasAlertSettings(Section):
    """The RAS alerts (``aggregator.ras``)."""

    hang_after_s: float = Field(
        120.0, gt=0, description="comm_hang: no op count of the job advanced for this long while it is alive"
    )
    peer_dead_confirm_polls: int = Field(
        2,
        ge=1,
        description="a MONITOR PEER_DEAD alerts at once; statuses after it that do not list the process "
        "withdraw it after this many",
    )


class RuleTiming(Section):
    """Overrides of one rule's hold-down (Prometheus ``for`` / ``keep_firing_for``); an unset field keeps the default
    the rule declares (its ``for_s``, ``clear_s``)."""

    for_s: float | None = Field(None, ge=0, description="the condition must hold this long before it fires")
    clear_s: float | None = Field(
        None, ge=0, description="a firing alert resolves only after its condition was absent this long"
    )


class AlertmanagerSettings(Section):
    """Pushing alerts to Prometheus Alertmanager (``aggregator.alerts.alertmanager``)."""

    urls: list[str] = Field(
        default_factory=list, description="Alertmanager base URLs, e.g. http://am:9093; empty: no push"
    )
    resend_s: float = Field(
        60.0, gt=0, description="firing alerts are re-sent this often (Prometheus' resend cadence)"
    )
    timeout_s: float = Field(10.0, gt=0, description="limit for one request to an Alertmanager")
    max_attempts: int = Field(
        20, ge=1, description="tries for one resolution or silence before it is given up (and logged)"
    )
    max_pending: int = Field(
        10_000, ge=1, description="resolutions and silence changes queued per Alertmanager while it is down"
    )
    page_url: str | None = Field(
        None, description="the web page's address for alert links; default: the aggregator's HTTP address"
    )


class AlertSettings(Section):
    """The alert engine (``aggregator.alerts``): hold-down per rule, inhibition, Alertmanager."""

    rules: dict[str, RuleTiming] = Field(
        default_factory=dict,
        description="per rule name, e.g. {nic_errors_rising = {for_s = 60}}; the aggregator refuses to start on a "
        "name it does not know",
    )
    inhibit: bool = Field(True, description="a silent or drained node suppresses the alerts it explains")
    max_ingest_behind_s: float = Field(
        10.0,
        gt=0,
        description="while ingest is further behind its stream, rules that judge silence (node_silent, comm_hang, "
        "collective_hang, rank_*_overdue) raise nothing: the silence would be the aggregator's own lag",
    )
    max_silences: int = Field(1000, ge=1, description="active silences at most")
    alertmanager: AlertmanagerSettings = AlertmanagerSettings()

    def timing(self, rule: str, default: tuple[float, float]) -> tuple[float, float]:
        """(for_s, clear_s) of ``rule``: its override, else ``default`` (what the rule declares). The aggregator
        refuses an override of a rule it does not know (:func:`ranksight.aggregator.rulebook.check_rule_names`)."""
        default_for, default_clear = default
        own = self.rules.get(rule, RuleTiming())
        return (
            default_for if own.for_s is None else own.for_s,
            default_clear if own.clear_s is None else own.clear_s,
        )


class HttpSettings(Section):
    """The aggregator's HTTP face (``aggregator.http``): JSON API, /openapi.json, /metrics, /events and the web page."""

    enabled: bool = True
    host: str = Field("127.0.0.1", description="bind address; anything but localhost exposes the API")
    port: int = Field(
        8080, ge=0, le=65535, description="0: any free port (the aggregator's http.url names it)"
    )
    token: SecretStr | None = Field(
        None, description="if set, every request needs 'Authorization: Bearer <token>'"
    )
    sse_queue_size: int = Field(
        256, ge=1, description="events buffered per /events client; a slower one is dropped"
    )
    max_connections: int = Field(
        512,
        ge=1,
        description="open HTTP connections at most (/events streams included); more are closed at once",
    )
    header_timeout_s: float = Field(
        10.0, gt=0, description="a new connection must send a complete request head within this"
    )
    idle_timeout_s: float = Field(
        60.0, gt=0, description="a connection waiting for its next request is closed after this"
    )
    metrics_max_series: int = Field(
        20_000,
        ge=1,
        description="series per metric family at most (label cardinality bound); the rest are dropped",
    )


class ShardSettings(Section):
    """Sharded aggregators (design §9): the event stream is split into ``partitions`` by NATS (a subject transform
    hashing cluster and node); each aggregator holds some partitions through JetStream KV leases."""

    partitions: int = Field(
        0,
        ge=0,
        le=1024,
        description="partitions of the event stream; 0 = not sharded (one aggregator ingests everything)",
    )
    shard_id: str = Field(
        "",
        pattern=r"^[A-Za-z0-9_-]{0,64}$",
        description="this aggregator's name among the shards (stable across restarts: it names its leases and "
        "its durable state); empty = the host name",
    )
    lease_ttl_s: float = Field(
        15.0,
        gt=0,
        description="a partition or the analysis lead whose holder stops renewing is free after this",
    )
    bucket: str = Field(
        "ranksight_shards",
        pattern=r"^[A-Za-z0-9_-]+$",
        description="JetStream KV bucket of the partition leases, the analysis lead and the shard membership",
    )
    export_dir: Path | None = Field(
        None,
        description="a directory every shard can write and the query hosts can read (shared file system): each "
        "shard exports its history there as Parquet, <dir>/<table>/shard=<id>/day=.../, for SQL across shards "
        "(ranksight sql --shards); unset = no scheduled export",
    )
    export_interval_s: float = Field(
        300.0,
        gt=0,
        description="how often each shard exports (SQL across shards is at most this much behind)",
    )
    query_deadline_s: float = Field(
        2.0,
        gt=0,
        description="the query front waits this long for every shard; later answers make a partial result",
    )
    alerts_bucket: str = Field(
        "ranksight_alerts",
        pattern=r"^[A-Za-z0-9_-]+$",
        description="JetStream KV bucket (no TTL) of the analysis lead's alert state: firing and pending alerts, "
        "silences, drains; a new lead loads it before its first evaluation, so a failover re-fires nothing",
    )
    alerts_bucket_max_bytes: int = Field(
        256 * 1024**2, gt=0, description="size limit of the alert state bucket"
    )

    def name(self) -> str:
        """This shard's id: ``shard_id``, else the host name made a subject token."""
        return self.shard_id or sanitize_token(socket.gethostname())


ActionKind = Literal[
    "slurm_drain", "k8s_cordon", "nvrx_exclusion", "job_signal", "webhook", "command", "none"
]
ActionMode = Literal["dry_run", "approve", "enforce"]
AlertSeverity = Literal["info", "warning", "critical"]
ACTING_SEVERITIES: tuple[AlertSeverity, ...] = ("warning", "critical")
# NVIDIA's Xid catalog resolution classes (docs.nvidia.com/deploy/xid-errors): what the catalog tells an operator to do.
XidResolution = Literal["ignore", "restart_app", "reset_gpu", "reboot", "drain", "investigate"]


class ActionPolicy(Section):
    """One policy: the findings it acts on and the action it takes (``[[aggregator.actions.policies]]``)."""

    name: str = Field(
        pattern=r"^[A-Za-z0-9_.-]{1,64}$", description="names the policy in plans, audit and alerts"
    )
    rules: list[str] = Field(
        min_length=1,
        description="alert rules this policy acts on (the aggregator refuses a name it does not know)",
    )
    severities: list[AlertSeverity] = Field(
        default_factory=lambda: list(ACTING_SEVERITIES), description="only alerts of these severities"
    )
    min_confidence: float = Field(
        0.0,
        ge=0,
        le=1,
        description="the alert's evidence.confidence at least this (rules without one count as 1)",
    )
    min_corroboration: int = Field(
        0,
        ge=0,
        description="other signals that must agree: the alert's evidence.corroboration notes plus other rules "
        "firing on the same node",
    )
    for_s: float = Field(0.0, ge=0, description="the alert must have been firing this long")
    clusters: list[str] = Field(default_factory=lambda: ["*"], description="cluster name patterns (fnmatch)")
    nodes: list[str] = Field(default_factory=lambda: ["*"], description="node name patterns (fnmatch)")
    xid_resolutions: list[XidResolution] = Field(
        default_factory=list,
        description="for gpu_xid alerts: only these resolution classes (after aggregator.actions.xid overrides); "
        "empty = any",
    )
    action: ActionKind
    mode: ActionMode | None = Field(None, description="overrides aggregator.actions.mode for this policy")
    resume_on_resolve: bool = Field(
        False, description="undo the action (resume, uncordon) when the incident resolves"
    )
    signal: Literal["checkpoint", "exit"] = Field(
        "checkpoint",
        description="job_signal: ask the job's processes (ranksight.client.on_action) to checkpoint now, or to exit "
        "for a restart without the node",
    )


class SlurmActionSettings(Section):
    scontrol: str = Field("scontrol", description="the scontrol binary (a path, or a name found on PATH)")
    reason_prefix: str = Field(
        "ranksight:",
        min_length=1,
        max_length=40,
        description="starts every drain reason ranksight sets; only nodes drained with it are resumed",
    )


class KubernetesActionSettings(Section):
    api_url: str = Field("https://kubernetes.default.svc", description="the API server")
    token_file: Path | None = Field(
        Path("/var/run/secrets/kubernetes.io/serviceaccount/token"),
        description="bearer token file (the service account's); unset: no Authorization header",
    )
    ca_file: Path | None = Field(
        None, description="CA bundle for the API server's certificate; unset: system CAs"
    )
    taint_key: str = Field(
        "ranksight.io/finding", description="the taint set on a cordoned node (NoSchedule)"
    )


class ExclusionActionSettings(Section):
    directory: Path | None = Field(
        None,
        description="shared directory nvidia-resiliency-ext reads (ft_launcher --ft-scheduler-exclusion-dir): "
        "ranksight writes scheduler_exclusion.<job>.jsonl there",
    )
    valid_s: float = Field(1800.0, gt=0, description="an exclusion is valid this long after it was written")


class WebhookActionSettings(Section):
    url: str | None = Field(None, description="POSTed the finding as JSON")
    secret: SecretStr | None = Field(
        None,
        description="HMAC-SHA256 key: the X-Ranksight-Signature header is sha256=<hex of the body's HMAC>",
    )


class CommandActionSettings(Section):
    argv: list[str] = Field(
        default_factory=list, description="the command and its arguments; gets the finding as JSON on stdin"
    )


class ActionSettings(Section):
    """Acting on findings (``aggregator.actions``, docs/actions.md): policies and their guard rails."""

    mode: ActionMode = Field(
        "dry_run",
        description="dry_run: plan only; approve: wait for 'ranksight action approve'; enforce: act",
    )
    policies: list[ActionPolicy] = Field(default_factory=list)
    max_nodes_per_window: int = Field(
        3, ge=0, description="circuit breaker: nodes acted on per window at most, then it opens"
    )
    max_cluster_fraction: float = Field(
        0.1, ge=0, le=1, description="circuit breaker: share of a cluster's nodes acted on per window at most"
    )
    window_s: float = Field(3600.0, gt=0, description="the circuit breaker's window")
    cooldown_s: float = Field(3600.0, ge=0, description="a node acted on is not acted on again for this long")
    approval_timeout_s: float = Field(
        86400.0, gt=0, description="an action awaiting approval this long expires (is never taken)"
    )
    queue_size: int = Field(
        1000, ge=1, description="actions waiting to run at most; more are refused, counted and logged"
    )
    max_attempts: int = Field(5, ge=1, description="tries of one action before it is reported failed")
    retry_base_s: float = Field(1.0, gt=0, description="first retry delay; doubled each try")
    retry_max_s: float = Field(60.0, gt=0, description="longest retry delay")
    timeout_s: float = Field(30.0, gt=0, description="limit for one try (a command, a request)")
    max_audit_rows: int = Field(1000, ge=1, description="audit rows an action listing returns at most")
    xid: dict[str, XidResolution] = Field(
        default_factory=dict,
        description="per Xid code, a resolution class overriding the catalog's, e.g. {'79' = 'drain'}",
    )
    slurm: SlurmActionSettings = SlurmActionSettings()
    kubernetes: KubernetesActionSettings = KubernetesActionSettings()
    exclusion: ExclusionActionSettings = ExclusionActionSettings()
    webhook: WebhookActionSettings = WebhookActionSettings()
    command: CommandActionSettings = CommandActionSettings()

    @field_validator("xid")
    @classmethod
    def _xid_codes(cls, xid: dict[str, XidResolution]) -> dict[str, XidResolution]:
        bad = sorted(code for code in xid if not code.isdigit())
        if bad:
            raise ValueError(f"Xid codes are numbers: {', '.join(bad)}")
        return xid

    @model_validator(mode="after")
    def _policies_complete(self) -> ActionSettings:
        names = [p.name for p in self.policies]
        if len(names) != len(set(names)):
            raise ValueError("policy names must be unique")
        needs = {"webhook": ("webhook.url", self.webhook.url), "command": ("command.argv", self.command.argv),
                 "nvrx_exclusion": ("exclusion.directory", self.exclusion.directory)}  # fmt: skip
        for policy in self.policies:
            setting, value = needs.get(policy.action, ("", True))
            if not value:
                raise ValueError(
                    f"policy {policy.name!r}: action {policy.action} needs aggregator.actions.{setting}"
                )
        return self


class ProfileOnDemandSettings(Section):
    """Profiling on demand (``aggregator.profile_on_demand``): when an alert of ``rules`` fires for a job whose NCCL
    has RAS CONTROL (2.31+), ask the agent polling the job to turn the profiler events on (``ras_profile``, which the
    agent accepts only with ``agent.collectors.ras.profile_control``), and off again ``on_s`` later. Off by default."""

    enabled: bool = False
    rules: list[str] = Field(
        default_factory=lambda: [
            "comm_mismatch",
            "comm_hang",
            "ras_diag_nvlink",
            "ras_diag_xid",
            "ras_diag_ecc",
        ],
        description="the alerts (with a job) whose firing turns profiling on for their job",
    )
    value: str = Field("on", description="what is sent: on (Inspector's events), or a profiler mask")
    on_s: float = Field(300.0, gt=0, le=86400, description="profiling is turned off again this long after")
    max_jobs: int = Field(
        4, ge=1, description="jobs profiled at once at most (beyond: not turned on, counted)"
    )
    timeout_s: float = Field(30.0, gt=0, description="limit of one agent request")


class ReportSettings(Section):
    """Per-job reports (``ranksight report JOB``, ``/reports/<job>.html``, written at each job's end): one
    self-contained HTML file, bounded whatever the job's size."""

    on_job_end: bool = Field(True, description="write <state_dir>/reports/<job>.html when a job ends")
    max_ranks: int = Field(
        16_384, ge=1, description="ranks in the compute-share heatmap; beyond, the report says so"
    )
    max_points: int = Field(120, ge=10, description="time buckets of the step-time chart")
    max_comms: int = Field(
        64, ge=1, description="communicators in the bus-bandwidth chart (the slowest first)"
    )
    max_findings: int = Field(500, ge=1, description="alerts and straggler runs on the findings timeline")
    max_links: int = Field(200, ge=1, description="links listed in the link map (the slowest first)")
    max_reports: int = Field(
        200, ge=1, description="report files kept in <state_dir>/reports (the oldest go)"
    )


class AggregatorSettings(Section):
    db_path: Path | None = Field(None, description="DuckDB file; default <state_dir>/ranksight.duckdb")
    stream: str = "RANKSIGHT_EVENTS"
    durable: str = "ranksight-aggregator"
    stream_max_age_s: float = Field(7 * 24 * 3600, gt=0)
    stream_max_bytes: int = Field(10 * 1024**3, gt=0)
    duplicate_window_s: float = Field(300, gt=0)
    fetch_batch: int = Field(1000, ge=1)
    ack_wait_s: float = Field(
        15, gt=0, description="redelivery delay of unacknowledged batches (e.g. after a crash)"
    )
    tick_s: float = Field(1.0, gt=0)
    node_gone_after_s: float = Field(
        300, gt=0, description="a silent node turns from stale to gone after this"
    )
    replay_window_s: float = Field(3600, gt=0, description="history replayed into live state at start")
    retention_days: float = Field(30, gt=0)
    query: QuerySettings = Field(default_factory=QuerySettings)
    ingest: IngestSettings = IngestSettings()
    probes: ProbePlannerSettings = ProbePlannerSettings()
    stragglers: StragglerSettings = StragglerSettings()
    raw_evidence: RawEvidenceSettings = RawEvidenceSettings()
    profile_on_demand: ProfileOnDemandSettings = ProfileOnDemandSettings()
    hang_forensics: HangForensicsSettings = HangForensicsSettings()
    hardware: HardwareAlertSettings = HardwareAlertSettings()
    ras: RasAlertSettings = RasAlertSettings()
    alerts: AlertSettings = AlertSettings()
    http: HttpSettings = HttpSettings()
    shards: ShardSettings = ShardSettings()
    actions: ActionSettings = ActionSettings()
    report: ReportSettings = ReportSettings()


class DeploySettings(Section):
    """``ranksight deploy``: how agents are rolled out over SSH (flags override these)."""

    parallel: int = Field(32, ge=1, description="hosts worked on at once")
    remote_dir: str = Field(
        ".local/share/ranksight",
        description="install folder on each node; relative paths are under the login home",
    )
    python: str = Field("python3", description="interpreter on the node that creates the venv")
    system_site_packages: bool = Field(False, description="create the node venv with --system-site-packages")
    pip_options: list[str] = Field(
        default_factory=list, description="extra pip options on the node, e.g. --no-index"
    )
    known_hosts: Path | None = Field(None, description="known_hosts file; default ~/.ssh/known_hosts")
    identity_file: Path | None = Field(None, description="private key; default: ssh-agent and ~/.ssh/id_*")
    connect_timeout_s: float = Field(15, gt=0)
    command_timeout_s: float = Field(600, gt=0, description="limit for one remote command (venv, pip)")
    verify_timeout_s: float = Field(20, gt=0, description="time the new agent has to answer on NATS")


class Settings(Section):
    """Every setting; :func:`load_settings` reads them from the file, the environment and the flags."""

    cluster: str = "default"
    subject_prefix: str = "ranksight.v1"
    state_dir: Path = Field(Path.home() / ".local/state/ranksight", description="all local state lives here")
    log_level: str = "INFO"
    shutdown_timeout_s: float = Field(
        10.0,
        gt=0,
        description="after SIGINT/SIGTERM, how long a long-running command may take to stop in order",
    )
    nats: NatsSettings = NatsSettings()
    api_url: str | None = Field(
        None,
        pattern=r"^https?://",
        description="the aggregator's HTTP API (e.g. http://aggregator:8080), asked by the read-only query commands "
        "instead of NATS, with aggregator.http.token as the bearer token; unset: every command asks over NATS",
    )
    agent: AgentSettings = AgentSettings()
    aggregator: AggregatorSettings = AggregatorSettings()
    deploy: DeploySettings = DeploySettings()

    def db_path(self) -> Path:
        return self.aggregator.db_path or self.state_dir / "ranksight.duckdb"

    def app_socket_path(self) -> Path:
        """Scoped to this instance: another agent's training processes (another state dir) never reach it."""
        return self.agent.collectors.app.socket_path or self.state_dir / "app.sock"

    def export_root(self) -> Path:
        return self.aggregator.query.export_root or self.state_dir / "exports"


def _encode_value(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, Path):
        return str(value)
    raise NotImplementedError(f"cannot encode {type(value).__name__}")


def encode_settings(settings: Settings) -> bytes:
    """Validated settings as JSON, secrets included, for another process (:func:`decode_settings`)."""
    return msgspec.json.encode(settings.model_dump(), enc_hook=_encode_value)


def decode_settings(data: bytes) -> Settings:
    """Settings from :func:`encode_settings`: validated again, from these values only (no file, no environment)."""
    return Settings.model_validate_json(data)


def _explain(exc: ValidationError, origin: str) -> str:
    lines = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            lines.append(f"unknown setting {key!r} in {origin}")
        else:
            lines.append(f"setting {key!r}: {err['msg']}")
    return "; ".join(lines)


def load_settings(path: str | os.PathLike[str] | None = None, **overrides: Any) -> Settings:
    """Load the file (if any), apply the environment on top, then explicit ``overrides`` (command-line flags)."""
    path = path or os.environ.get(CONFIG_ENV)
    data: dict[str, Any] = {}
    origin = "the environment"
    if path:
        origin = f"{path} or the environment"
        try:
            data = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except (OSError, UnicodeDecodeError) as exc:  # a directory, no permission, not text
            raise ConfigError(
                f"cannot read config file {path}: {getattr(exc, 'strerror', None) or exc}"
            ) from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    try:
        return Settings.model_validate(_merged(_merged(data, _environment()), overrides))
    except ValidationError as exc:
        raise ConfigError(_explain(exc, origin)) from None


def _environment() -> dict[str, Any]:
    """The ``RANKSIGHT_`` variables as nested values (names are not case-sensitive; ``__`` descends a section). An
    unknown name is an error, not ignored: a mistyped variable must fail loudly."""
    values: dict[str, Any] = {}
    for name, text in os.environ.items():
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper in NON_SETTING_ENV:
            continue
        *parents, leaf = keys = upper.removeprefix(ENV_PREFIX).lower().split("__")
        model: type[BaseModel] | None = Settings
        annotation: Any = None
        for depth, key in enumerate(keys):
            if model is None:  # below a table (a dict field): its keys are free
                annotation = None
                break
            field = model.model_fields.get(key)
            if field is None:
                raise ConfigError(f"unknown setting {key!r} in environment variable {name}")
            annotation = field.annotation
            model = _section(annotation) if depth < len(keys) - 1 else None
        target = values
        for key in parents:
            target = target.setdefault(key, {})
        target[leaf] = _env_value(name, text, annotation)
    return values


def _arms(annotation: Any) -> tuple[Any, ...]:
    """``X | None`` -> ``(X,)``; ``X`` -> ``(X,)``."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return tuple(a for a in typing.get_args(annotation) if a is not type(None))
    return (annotation,)


def _section(annotation: Any) -> type[BaseModel] | None:
    """The section model a field holds, or None (a value, or a table of them)."""
    found = [a for a in _arms(annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
    return found[0] if found else None


def _env_value(name: str, text: str, annotation: Any) -> Any:
    """A variable's text as the setting takes it: JSON for a list, a table or a section, else the text itself (the
    model parses numbers, booleans and paths from text)."""
    structured = any(_section(a) or typing.get_origin(a) in (list, dict, tuple, set) or a in (list, dict)
                     for a in _arms(annotation))  # fmt: skip
    if not structured:
        return text
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ConfigError(
            f"environment variable {name} is not JSON (a list, table or section is): {exc}"
        ) from None


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``, table by table (a value in ``over`` replaces the one in ``base``)."""
    out = dict(base)
    for key, value in over.items():
        below = out.get(key)
        out[key] = _merged(below, value) if isinstance(below, dict) and isinstance(value, dict) else value
    return out
