"""The active GPU probe's section: ``[agent.collectors.gpu_probe]``."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from ranksight.agent.collector_settings import CollectorSettings


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
