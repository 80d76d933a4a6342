"""Helpers for the RAS tests: a minimal /proc tree naming the process that listens on the RAS port, and envelopes."""

from __future__ import annotations

import os
from pathlib import Path

from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import Record
from ranksight.schemas.wire import event_type


def fake_proc(root: Path, port: int, environ: dict[str, str], pid: int = 4242, inode: int = 987654) -> Path:
    """The three things jobid.py reads, laid out as Linux does: net/tcp (LISTEN row), <pid>/fd link, <pid>/environ."""
    (root / "net").mkdir(parents=True)
    header = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    )
    row = f"   0: 0100007F:{port:04X} 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 {inode}\n"
    (root / "net/tcp").write_text(header + row)
    (root / "net/tcp6").write_text(header)
    (root / str(pid) / "fd").mkdir(parents=True)
    os.symlink(f"socket:[{inode}]", root / str(pid) / "fd" / "3")
    (root / str(pid) / "environ").write_bytes(
        b"\0".join(f"{k}={v}".encode() for k, v in environ.items()) + b"\0"
    )
    return root


def envelope(
    kind: str, records: list[Record], node: str = "node-a", seq: int = 1, ttl: float = 30.0, ts: int = 0
) -> Envelope:
    return Envelope(type=event_type(kind), cluster="test", node=node, agent="agent-1", seq=seq, ts=ts, ttl=ttl,
                    records=records)  # fmt: skip
