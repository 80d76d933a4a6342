"""Job identity (design §5 "Jobs and cycles"): the scheduler's job id from the environment of the process that holds the
RAS port, else a stable id derived from the communicators, else from the endpoint.

Only ``/proc`` is read (``net/tcp``, ``net/tcp6``, ``<pid>/fd``, ``<pid>/environ``); every step tolerates a vanished
process or a permission error, returning ``None``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

SCHEDULER_VARS = ("SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "FLUX_JOB_ID", "COBALT_JOBID", "JOB_ID",
                  "TORCHELASTIC_RUN_ID")  # fmt: skip
_LISTEN = "0A"


def listening_inodes(proc: Path, port: int) -> set[str]:
    inodes: set[str] = set()
    for name in ("net/tcp", "net/tcp6"):
        try:
            lines = (proc / name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == _LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def listener_pid(proc: Path, port: int, hint: int | None = None) -> int | None:
    """The process listening on ``port``. ``hint`` (the one found last time) is looked at first: while a job keeps its
    RAS port, a poll reads that process's descriptors only, not those of every process on the node."""
    inodes = {f"socket:[{i}]" for i in listening_inodes(proc, port)}
    if not inodes:
        return None
    if hint is not None and _holds(proc / str(hint), inodes):
        return hint
    for entry in proc.iterdir():
        if entry.name.isdigit() and _holds(entry, inodes):
            return int(entry.name)
    return None


def _holds(process: Path, inodes: set[str]) -> bool:
    """Whether one of the process's descriptors is one of the sockets (False once it is gone or unreadable)."""
    try:
        return any(os.readlink(fd) in inodes for fd in (process / "fd").iterdir())
    except OSError:
        return False


def scheduler_job_id(proc: Path, pid: int) -> str | None:
    try:
        raw = (proc / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    env = dict(item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    for name in SCHEDULER_VARS:
        value = env.get(name.encode())
        if value:
            return f"{name.lower().split('_')[0]}-{value.decode(errors='replace')}"
    return None


def derived_job_id(comm_hashes: Iterable[str]) -> str | None:
    """Communicator hashes are job-wide, so every node derives the same id from one status."""
    hashes = sorted(set(comm_hashes))
    return "ras-" + hashlib.sha1(",".join(hashes).encode()).hexdigest()[:16] if hashes else None


def endpoint_job_id(node: str, endpoint: str, pid: int | None) -> str:
    """Last resort before any status is known: this node's endpoint and listener (a new process is a new cycle)."""
    return "ras-" + hashlib.sha1(f"{node}|{endpoint}|{pid}".encode()).hexdigest()[:16]
