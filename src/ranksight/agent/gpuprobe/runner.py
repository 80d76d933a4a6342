"""Run the probe worker as a subprocess with asyncio, bounded in time and host memory, and read its protocol lines.

The worker runs in its own session (process group), so a timeout or a memory overrun kills it and anything it spawned.
Host memory is bounded by watching the worker's resident set (``VmRSS``) rather than with ``RLIMIT_AS``: GPU runtimes
reserve terabytes of virtual address space and fail under an address-space limit. Device memory is bounded inside the
worker (``--max-mem-fraction``). Every failure becomes an :class:`ProbeOutcome` with a reason; nothing raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ranksight.agent.gpuprobe.protocol import (
    MAX_LINE,
    Done,
    GpuError,
    GpuProbeProtocolError,
    GpuResult,
    Start,
    Unavailable,
    parse_line,
)
from ranksight.agent.gpuprobe.settings import GpuProbeSettings

OutcomeStatus = Literal["ok", "unavailable", "error"]
RSS_POLL_S = 0.1
STDERR_TAIL = 2000
EXIT_GRACE_S = 5.0


@dataclass
class ProbeOutcome:
    status: OutcomeStatus
    reason: str | None = None
    backend: str | None = None
    gpus: list[GpuResult] = field(default_factory=list)
    errors: list[GpuError] = field(default_factory=list)
    duration_s: float = 0.0


def worker_command(cfg: GpuProbeSettings) -> list[str]:
    """The command line for ``cfg``: the configured program, else this interpreter running the worker module."""
    base = (
        list(cfg.worker_command)
        if cfg.worker_command
        else [sys.executable, "-m", "ranksight.agent.gpuprobe.worker"]
    )
    args = [
        "--matmul-n", str(cfg.matmul_n), "--matmul-iters", str(cfg.matmul_iters), "--warmup", str(cfg.warmup),
        "--repeats", str(cfg.repeats), "--mem-bytes", str(cfg.mem_bytes),
        "--max-mem-fraction", str(cfg.max_mem_fraction),
    ]  # fmt: skip
    return base + args + (["--allow-cpu"] if cfg.allow_cpu else [])


def rss_bytes(status_text: str) -> int | None:
    """``VmRSS`` from a ``/proc/<pid>/status`` text, in bytes (the kernel prints kB)."""
    for line in status_text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return None


async def run_probe(cfg: GpuProbeSettings) -> ProbeOutcome:
    return await run_worker(worker_command(cfg), cfg.timeout_s, cfg.host_memory_limit_bytes, cfg.proc_root)


async def run_worker(
    command: Sequence[str], timeout_s: float, memory_limit_bytes: int, proc_root: Path = Path("/proc")
) -> ProbeOutcome:
    started = time.monotonic()
    outcome = ProbeOutcome(status="error")
    try:
        proc = await asyncio.create_subprocess_exec(
            *command, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, start_new_session=True, limit=MAX_LINE + 1,
        )  # fmt: skip
    except OSError as exc:
        outcome.reason = f"cannot start the probe worker: {exc}"
        return outcome
    assert proc.stdout is not None and proc.stderr is not None
    stderr_tail = bytearray()
    drain = asyncio.create_task(_drain(proc.stderr, stderr_tail))
    reader = asyncio.create_task(_read(proc.stdout, outcome))
    watchdog = asyncio.create_task(_watch_memory(proc.pid, memory_limit_bytes, proc_root))
    failure: str | None = "cancelled"
    try:
        done, _ = await asyncio.wait(
            {reader, watchdog}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
        if reader in done:
            failure = reader.result()
        elif watchdog in done:
            failure = watchdog.result()
        else:
            failure = f"timed out after {timeout_s:g}s"
        if failure is None:  # "done" arrived: let the worker exit on its own
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), EXIT_GRACE_S)
    finally:
        for task in (reader, watchdog):
            task.cancel()
        _kill_group(proc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), EXIT_GRACE_S)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(drain, 1)
    if proc.returncode not in (None, 0, -signal.SIGKILL):
        failure = f"{failure or 'worker finished'} (exit code {proc.returncode})"
    if failure is not None:
        tail = stderr_tail.decode(errors="replace").strip()[-300:]
        outcome.status, outcome.reason = "error", failure + (f": {tail}" if tail else "")
    outcome.duration_s = time.monotonic() - started
    return outcome


async def _read(stdout: asyncio.StreamReader, outcome: ProbeOutcome) -> str | None:
    """Fill ``outcome`` from the protocol lines; return why it failed, or None once ``done`` arrived."""
    while True:
        try:
            line = await stdout.readline()
        except ValueError:  # asyncio's limit overrun
            return f"protocol error: a line longer than {MAX_LINE} bytes"
        if not line:
            return "worker exited before reporting done"
        try:
            message = parse_line(line)
        except GpuProbeProtocolError as exc:
            return f"protocol error: {exc}"
        if isinstance(message, Start):
            outcome.backend = message.backend
        elif isinstance(message, GpuResult):
            outcome.gpus.append(message)
        elif isinstance(message, GpuError):
            outcome.errors.append(message)
        elif isinstance(message, Unavailable):
            outcome.status, outcome.reason = "unavailable", message.reason
        elif isinstance(message, Done):
            if outcome.status != "unavailable":
                outcome.status = "ok"
            return None


async def _watch_memory(pid: int, limit: int, proc_root: Path) -> str:
    status_file = proc_root / str(pid) / "status"
    while True:
        try:
            rss = rss_bytes(status_file.read_text())
        except OSError:
            rss = None  # gone, or no procfs: the time bound still holds
        if rss is not None and rss > limit:
            return f"memory limit exceeded: resident {rss} bytes > {limit}"
        await asyncio.sleep(RSS_POLL_S)


async def _drain(stream: asyncio.StreamReader, tail: bytearray) -> None:
    while chunk := await stream.read(4096):
        tail.extend(chunk)
        del tail[:-STDERR_TAIL]


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
