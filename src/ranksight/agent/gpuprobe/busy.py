"""Is a job using this node? The probe must never compete with one (it would slow the job and measure nonsense).

Local signals, each a small pure-ish function over a filesystem root the tests can point elsewhere:

- a process holding a GPU compute device open (``/dev/kfd`` for ROCm, ``/dev/nvidia<N>`` for CUDA), found by reading
  ``/proc/<pid>/fd`` links; known daemons (persistenced, DCGM host engine, exporters) are ignored;
- amdgpu utilization (``/sys/class/drm/card*/device/gpu_busy_percent``) at or above a threshold;
- an RCCL/NCCL RAS service listening on its port (every RCCL/NCCL process runs one), read passively from
  ``/proc/net/tcp{,6}`` so the probe never connects to RAS;
- an Inspector dump directory written to recently.

The aggregator adds its own view (fresh RAS/Inspector facts from the node) and discards results taken while a job ran.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from pathlib import Path

from ranksight.agent.gpuprobe.settings import GpuProbeSettings

_GPU_DEVICE = re.compile(r"^/dev/(kfd|nvidia\d+)$")
_TCP_LISTEN = "0A"


def gpu_device_users(proc_root: Path, ignore: frozenset[str], exclude_pids: frozenset[int]) -> list[str]:
    """``"<pid> (<comm>)"`` for each process with a GPU compute device open. Unreadable processes are skipped."""
    users = []
    for entry in proc_root.iterdir() if proc_root.is_dir() else ():
        if not entry.name.isdigit() or int(entry.name) in exclude_pids:
            continue
        try:
            comm = (entry / "comm").read_text().strip()
            if comm in ignore:
                continue
            fds = list((entry / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if _GPU_DEVICE.match(target):
                users.append(f"{entry.name} ({comm})")
                break
    return users


def amdgpu_utilization(sys_root: Path) -> dict[str, float]:
    """card name -> busy percent, from amdgpu's sysfs (absent on other drivers)."""
    out = {}
    for path in sorted((sys_root / "class/drm").glob("card*/device/gpu_busy_percent")):
        try:
            out[path.parent.parent.name] = float(path.read_text().strip())
        except (OSError, ValueError):
            continue
    return out


def listening_ports(proc_net_tcp: str) -> set[int]:
    """Local ports in LISTEN state, from the text of ``/proc/net/tcp`` or ``/proc/net/tcp6``."""
    ports = set()
    for line in proc_net_tcp.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 3 and fields[3] == _TCP_LISTEN:
            ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def newest_mtime(directory: Path) -> float | None:
    newest = None
    for path in directory.iterdir() if directory.is_dir() else ():
        try:
            mtime = path.stat().st_mtime
        except OSError:
            continue
        newest = mtime if newest is None else max(newest, mtime)
    return newest


def busy_reasons(cfg: GpuProbeSettings, now_s: float | None = None) -> list[str]:
    """Why the node is busy now; empty when it is idle. Blocking file reads: call through :func:`check_busy`."""
    now_s = time.time() if now_s is None else now_s
    reasons = []
    users = gpu_device_users(cfg.proc_root, frozenset(cfg.ignore_processes), frozenset({os.getpid()}))
    if users:
        reasons.append(f"processes using GPUs: {', '.join(users[:5])}")
    hot = {card: pct for card, pct in amdgpu_utilization(cfg.sys_root).items() if pct >= cfg.busy_util_pct}
    if hot:
        reasons.append("GPU utilization " + ", ".join(f"{c} {p:g}%" for c, p in hot.items()))
    for name in ("tcp", "tcp6"):
        try:
            text = (cfg.proc_root / "net" / name).read_text()
        except OSError:
            continue
        if cfg.ras_port in listening_ports(text):
            reasons.append(f"RAS port {cfg.ras_port} is listening (an RCCL/NCCL job runs here)")
            break
    if cfg.inspector_dump_dir is not None:
        newest = newest_mtime(cfg.inspector_dump_dir)
        if newest is not None and now_s - newest < cfg.inspector_fresh_s:
            reasons.append(f"Inspector dump dir {cfg.inspector_dump_dir} written {now_s - newest:.0f}s ago")
    return reasons


async def check_busy(cfg: GpuProbeSettings) -> list[str]:
    return await asyncio.to_thread(busy_reasons, cfg)
