"""When is the next probe due? Pure: the last attempt (persisted) and the clock decide, nothing else.

A result lives ``ttl_s``; the next probe is due at 90% of it so a fresh result lands before the old one lapses. A node
with no history waits a stable per-node offset in ``[0, stagger_s)`` after the agent starts, so a cluster brought up at
once does not probe every node in the same minute. A skipped probe (busy node) records nothing and is retried at the
next check. The last attempt is saved only once the stream acknowledged its records, so an agent restart neither
re-runs a delivered probe nor forgets an undelivered one.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

REFRESH_FRACTION = 0.9


@dataclass(frozen=True)
class LastAttempt:
    at_s: float
    status: str


def stagger_offset_s(cluster: str, node: str, stagger_s: float) -> float:
    digest = hashlib.sha256(f"{cluster}/{node}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 * stagger_s


def next_due_s(last: LastAttempt | None, started_s: float, offset_s: float, ttl_s: float) -> float:
    if last is None:
        return started_s + offset_s
    return last.at_s + REFRESH_FRACTION * ttl_s


def load_last(path: Path) -> LastAttempt | None:
    try:
        data = json.loads(path.read_text())
        return LastAttempt(float(data["at_s"]), str(data["status"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # no history (or a damaged file): probe as a new node would


def save_last(path: Path, last: LastAttempt) -> None:
    """Atomic replace, so a crash mid-write leaves the previous attempt."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(last)))
    os.replace(tmp, path)
