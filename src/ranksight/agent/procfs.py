"""What the agent reads of ``/proc`` about other processes: TCP sockets, which process holds one, a process's initial
environment. Every reader tolerates a vanished process or a permission error (an empty answer, or None)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

LISTEN, ESTABLISHED = "0A", "01"


def tcp_sockets(proc: Path) -> Iterator[tuple[int, int, str, str]]:
    """(local port, remote port, state, inode) of every IPv4 and IPv6 TCP socket the kernel lists."""
    for name in ("net/tcp", "net/tcp6"):
        try:
            lines = (proc / name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9:
                local, remote = (int(f.rsplit(":", 1)[1], 16) for f in fields[1:3])
                yield local, remote, fields[3], fields[9]


def holds_socket(process: Path, inodes: set[str]) -> bool:
    """Whether one of the process's descriptors is one of the sockets (``socket:[inode]``); False once it is gone or
    unreadable."""
    try:
        return any(os.readlink(fd) in inodes for fd in (process / "fd").iterdir())
    except OSError:
        return False


def socket_owner(
    proc: Path, inodes: set[str], hints: tuple[int, ...] = (), search: bool = True
) -> int | None:
    """The process holding one of the sockets; the ``hints`` (processes found before) are looked at first, so a
    known process costs the reading of its own descriptors only, then (``search``) every process on the node."""
    if not inodes:
        return None
    for pid in hints:
        if holds_socket(proc / str(pid), inodes):
            return pid
    if not search:
        return None
    for entry in proc.iterdir():
        if entry.name.isdigit() and holds_socket(entry, inodes):
            return int(entry.name)
    return None


def process_environ(proc: Path, pid: int) -> dict[bytes, bytes] | None:
    """The environment the process started with (later changes are not visible)."""
    try:
        raw = (proc / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    return dict(item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
