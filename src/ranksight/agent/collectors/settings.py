"""The sections of the collectors that are one module of this package (``[agent.collectors.heartbeat]``, ``probe``,
``app``, ``xid``), and ``[agent.collectors]``: every collector's section, in the order the collectors start.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from ranksight.agent.collector_settings import CollectorSettings
from ranksight.agent.collectors.gpu.settings import GpuSettings
from ranksight.agent.collectors.inspector.settings import InspectorSettings
from ranksight.agent.collectors.nic.settings import NicSettings
from ranksight.agent.collectors.ras.settings import RasSettings
from ranksight.agent.gpuprobe.settings import GpuProbeSettings
from ranksight.client import DEFAULT_SOCKET as DEFAULT_APP_SOCKET
from ranksight.client import SOCKET_ENV as APP_SOCKET_ENV
from ranksight.core.config import Section


class HeartbeatSettings(CollectorSettings):
    interval_s: float = Field(5.0, gt=0)
    jobs_dir: Path = Field(
        Path("/run/ranksight/jobs"),
        description="where the Slurm prolog (deploy/slurm/prolog.sh) writes <jobid>.env; the heartbeat reports them",
    )
    max_jobs: int = Field(64, ge=0, description="job files read per heartbeat at most (newest first)")


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
