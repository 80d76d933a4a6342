"""CPU share and resident memory of a running process and its children (the aggregator's straggler engine process),
read from ``/proc`` (shared by the benchmarks that measure a child process: ``agent_footprint.py``, ``scale.py``)."""

from __future__ import annotations

import asyncio
import contextlib
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


def process_tree(pid: int) -> list[int]:
    """The process and its descendants, alive now."""
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{current}/task").iterdir():
                todo += map(int, (task / "children").read_text().split())
    return out


@dataclass
class Usage:
    """Of the process and its children, summed."""

    cpu_share: float  # of one core, over the window
    rss_median: int
    rss_max: int
    peak_rss: int  # each process's VmHWM (peak since it started), summed: at most what they held at once


async def measure(pid: int, seconds: float, every_s: float = 0.5) -> Usage:
    """Sample the process and its children over ``seconds``: their CPU share and their resident memory (median and
    max of the samples of their sum). A child started within the window counts from zero; one that ended within it
    is not counted."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    cpu0: dict[int, float] = {}
    peaks: dict[int, int] = {}
    samples: list[int] = []

    def sample() -> None:
        total = 0
        for proc in process_tree(pid):
            with contextlib.suppress(OSError, RuntimeError):  # a child that just ended
                total += memory(proc)
                peaks[proc] = memory(proc, "VmHWM")
                if proc not in cpu0:
                    cpu0[proc] = cpu_seconds(proc) if not samples else 0.0
        samples.append(total)

    sample()
    while loop.time() - started < seconds:
        await asyncio.sleep(every_s)
        sample()
    spent = 0.0
    for proc, before in cpu0.items():
        with contextlib.suppress(OSError):
            spent += cpu_seconds(proc) - before
    share = spent / (loop.time() - started)
    return Usage(share, int(statistics.median(samples)), max(samples), sum(peaks.values()))
