"""Job identity (design §5 "Jobs and cycles"): the scheduler's job id from the environment of the process that holds the
RAS port, else a stable id derived from the communicators, else from the endpoint.

Only ``/proc`` is read (``net/tcp``, ``net/tcp6``, ``<pid>/fd``, ``<pid>/environ``); every step tolerates a vanished
process or a permission error, returning ``None``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from ranksight.agent.procfs import LISTEN, process_environ, socket_owner, tcp_sockets

SCHEDULER_VARS = ("SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "FLUX_JOB_ID", "COBALT_JOBID", "JOB_ID",
                  "TORCHELASTIC_RUN_ID")  # fmt: skip


def listening_inodes(proc: Path, port: int) -> set[str]:
    return {inode for local, _, state, inode in tcp_sockets(proc) if state == LISTEN and local == port}


def listener_pid(proc: Path, port: int, hint: int | None = None) -> int | None:
    """The process listening on ``port``. ``hint`` (the one found last time) is looked at first: while a job keeps its
    RAS port, a poll reads that process's descriptors only, not those of every process on the node."""
    inodes = {f"socket:[{i}]" for i in listening_inodes(proc, port)}
    return socket_owner(proc, inodes, (hint,) if hint is not None else ())


def scheduler_job_id(proc: Path, pid: int) -> str | None:
    env = process_environ(proc, pid)
    for name in SCHEDULER_VARS:
        value = env.get(name.encode()) if env is not None else None
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
