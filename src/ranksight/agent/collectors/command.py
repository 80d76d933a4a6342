"""Running a node tool (``amd-smi``, ``rdma``, ``ethtool``...) for a collector: off the event loop, bounded in time, its
whole process group killed when it outlives the bound."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Sequence

from ranksight.errors import RanksightError


class CommandFailed(RanksightError):
    """A tool exited non-zero, timed out, or could not start."""


async def run_command(argv: Sequence[str], timeout_s: float) -> bytes:
    """stdout of ``argv``; the process group is killed if it outlives ``timeout_s``."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True
        )
    except OSError as exc:
        raise CommandFailed(f"{argv[0]}: {exc}") from None
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):  # it may have exited meanwhile
            os.killpg(proc.pid, signal.SIGKILL)  # a shell wrapper's children too
        await proc.wait()
        raise CommandFailed(f"{argv[0]} timed out after {timeout_s:g}s") from None
    if proc.returncode != 0:
        raise CommandFailed(
            f"{argv[0]} exited {proc.returncode}: {err.decode(errors='replace').strip()[:200]}"
        )
    return out
