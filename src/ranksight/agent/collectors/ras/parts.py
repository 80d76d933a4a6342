"""A RAS status of any size as records that each fit a message: the JSON detail of a 1,024-node job is megabytes,
over the NATS server's ``max_payload``, and a record is never split across messages.

Pure: :func:`split_status` measures each list entry's msgpack size and packs the communicators, then the missing and
dead processes and the mismatches, greedily into parts of at most ``max_bytes``, each part a record with every
job-level field, the same ``poll_id`` and its ``part`` of ``parts``. A status that fits is one record (``parts`` 1).
The aggregator puts the parts of a poll back together (:mod:`aggregator.state.jobs`).
"""

from __future__ import annotations

import msgspec
from msgspec.structs import replace

from ranksight.schemas.records import RasRecord
from ranksight.schemas.wire import RAS_SPLIT_LISTS

_ENCODER = msgspec.msgpack.Encoder()


def split_status(record: RasRecord, max_bytes: int, poll_id: int) -> list[RasRecord]:
    """``record`` as parts of at most about ``max_bytes`` encoded bytes each (an entry bigger than that alone is a
    part of its own)."""
    empty: dict[str, list[object]] = {name: [] for name in RAS_SPLIT_LISTS}
    base = replace(record, **{**empty, "poll_id": poll_id})
    if len(_ENCODER.encode(record)) <= max_bytes:
        return [replace(record, **{"poll_id": poll_id})]
    room = max(1, max_bytes - len(_ENCODER.encode(base)) - 64)  # 64: the part numbers and list headers
    shares: list[dict[str, list[object]]] = []
    current: dict[str, list[object]] = {name: [] for name in RAS_SPLIT_LISTS}
    used = 0
    for name in RAS_SPLIT_LISTS:
        for entry in getattr(record, name):
            size = len(_ENCODER.encode(entry))
            if used and used + size > room:
                shares.append(current)
                current, used = {n: [] for n in RAS_SPLIT_LISTS}, 0
            current[name].append(entry)
            used += size
    shares.append(current)
    return [replace(base, **{**share, "part": i, "parts": len(shares)}) for i, share in enumerate(shares)]
