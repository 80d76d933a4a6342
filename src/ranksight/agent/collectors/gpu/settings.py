"""The GPU collector's section: ``[agent.collectors.gpu]``."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from ranksight.agent.collector_settings import CollectorSettings


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
