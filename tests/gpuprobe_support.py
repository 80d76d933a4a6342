"""Helpers for the GPU probe tests: the fake worker's command line and probe settings that use it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ranksight.agent.gpuprobe.settings import GpuProbeSettings


def fake_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "tests.gpuprobe_fake_worker", *args]


def idle_roots(tmp_path: Path) -> dict[str, Path]:
    """An empty /proc and /sys: nothing uses the GPUs, no RAS port listens."""
    proc, sys_root = tmp_path / "proc", tmp_path / "sys"
    (proc / "net").mkdir(parents=True, exist_ok=True)
    sys_root.mkdir(exist_ok=True)
    return {"proc_root": proc, "sys_root": sys_root}


def probe_settings(tmp_path: Path, *fake_args: str, **overrides: Any) -> GpuProbeSettings:
    values: dict[str, Any] = {
        "worker_command": fake_command(*fake_args),
        "timeout_s": 20,
        **idle_roots(tmp_path),
    }
    values.update(overrides)
    return GpuProbeSettings(**values)
