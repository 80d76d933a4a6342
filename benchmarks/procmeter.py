"""CPU share and resident memory of a running process, read from ``/proc`` (shared by the benchmarks that measure a
child process: ``agent_footprint.py``, ``scale.py``)."""

from __future__ import annotations

import asyncio
import os
import statistics
from dataclasses import dataclass
from pathlib import Path

MiB = 1 << 20
_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time the process has used so far."""
    # the command name (field 2) may hold spaces: the fields after it are counted from its closing parenthesis
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def memory(pid: int, field: str = "VmRSS") -> int:
    """``VmRSS`` (resident now) or ``VmHWM`` (peak resident) of the process, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} for pid {pid}")


@dataclass
class Usage:
    cpu_share: float  # of one core, over the window
    rss_median: int
    rss_max: int
    peak_rss: int  # VmHWM at the end of the window (since the process started)


async def measure(pid: int, seconds: float, every_s: float = 0.5) -> Usage:
    """Sample the process over ``seconds``: its CPU share and its resident memory (median and max of the samples)."""
    loop = asyncio.get_running_loop()
    started, cpu0 = loop.time(), cpu_seconds(pid)
    samples = [memory(pid)]
    while loop.time() - started < seconds:
        await asyncio.sleep(every_s)
        samples.append(memory(pid))
    share = (cpu_seconds(pid) - cpu0) / (loop.time() - started)
    return Usage(share, int(statistics.median(samples)), max(samples), memory(pid, "VmHWM"))
