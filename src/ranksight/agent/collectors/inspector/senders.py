"""Who posted an OTLP export to the agent's receiver: the process and, where its launcher says it, its rank.

The plugin's verbose OTLP points name the operation, its communicator (``comm_id``), node and GPU, but not the rank
nor the process (``inspector_otel.cc``), which the per-rank analysis of dump files keys on. Both can be found on the
node: the plugin posts from the NCCL process itself over loopback, so the connection's client port leads to its
socket in ``/proc/net/tcp{,6}`` and the socket to the process holding it (read while the request is open: the
plugin waits for the answer's status line). The rank comes from the launcher's variables in that process's initial
environment (:data:`WORLD_VARS`); it is the process's rank in a communicator only where that communicator spans the
whole world (the one every launcher-started job creates first, numbered as the launcher numbers the processes) or
has one rank. Elsewhere the rank stays unknown (see :func:`Sender.rank_in`).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ranksight.agent.procfs import ESTABLISHED, process_environ, socket_owner, tcp_sockets

# (rank, world size) variables, by launcher: torchrun and torch.distributed launchers, Open MPI, MPICH and Intel MPI,
# Slurm's srun; the first pair present wins
WORLD_VARS = ((b"RANK", b"WORLD_SIZE"), (b"OMPI_COMM_WORLD_RANK", b"OMPI_COMM_WORLD_SIZE"),
              (b"PMI_RANK", b"PMI_SIZE"), (b"SLURM_PROCID", b"SLURM_NTASKS"))  # fmt: skip
HINTS = 64  # processes looked at before a scan of every process


@dataclass(frozen=True)
class Sender:
    pid: int
    world: tuple[int, int] | None  # (rank, size) as the launcher set them

    def rank_in(self, n_ranks: int) -> int | None:
        """The process's rank in a communicator of ``n_ranks``, where it is known without the plugin saying it."""
        if n_ranks == 1:
            return 0
        if self.world is not None and self.world[1] == n_ranks:
            return self.world[0]
        return None


def world_of(env: dict[bytes, bytes]) -> tuple[int, int] | None:
    for rank_var, size_var in WORLD_VARS:
        try:
            rank, size = int(env[rank_var]), int(env[size_var])
        except (KeyError, ValueError):
            continue
        if 0 <= rank < size:
            return rank, size
    return None


class SenderFinder:
    """Finds the process at the other end of a loopback connection; remembers the last processes found (their
    environment is read once) so a known sender costs the reading of its own descriptors only. After a search of
    every process that found no sender (an agent that may not read the job's descriptors, or another namespace),
    the next one waits ``retry_s``: an unknown sender is then left unknown rather than searched for at every post."""

    def __init__(self, proc: Path = Path("/proc"), remember: int = 1024, retry_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.proc = proc
        self.remember = remember
        self.retry_s = retry_s
        self.clock = clock
        self.known: OrderedDict[int, Sender] = OrderedDict()
        self.retry_at = 0.0  # no search of every process before this

    def find(self, client_port: int, server_port: int) -> Sender | None:
        inodes = {f"socket:[{inode}]" for local, remote, state, inode in tcp_sockets(self.proc)
                  if local == client_port and remote == server_port and state == ESTABLISHED}  # fmt: skip
        if not inodes:
            return None  # the connection is gone, or not in this network namespace: nothing to search for
        search = self.clock() >= self.retry_at
        pid = socket_owner(self.proc, inodes, tuple(reversed(self.known))[:HINTS], search=search)
        if pid is None:
            if search:
                self.retry_at = self.clock() + self.retry_s
            return None
        sender = self.known.pop(pid, None)
        if sender is None:
            sender = Sender(pid, world_of(process_environ(self.proc, pid) or {}))
        self.known[pid] = sender
        while len(self.known) > self.remember:
            self.known.popitem(last=False)
        return sender
