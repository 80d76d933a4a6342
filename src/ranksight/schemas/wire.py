"""The wire contract's constants: the names and limits the envelope (:mod:`schemas.envelope`) and the records take."""

from __future__ import annotations

import sys
from typing import Annotated, Any, Literal

import msgspec

TYPE_PREFIX = "ranksight.ev.v1."
MAX_RECORDS = 100_000
MAX_FIELDS = 1024  # names in a compact batch: far above any record model's field count
# A compact batch takes at least this many bytes per record, about the smallest map-form record: decoded records cost
# memory per record whatever their bytes, so a few bytes must not become many records.
MIN_COMPACT_RECORD_BYTES = 8

# What the store can hold: every integer column is BIGINT, every float column a finite DOUBLE (the bounds also reject
# inf and NaN). Declared once here; every int and float of the envelope and the records is within them: a number
# without a range of its own (``schemas.records.quantities``) takes these.
INT64_MAX = 2**63 - 1
FLOAT_MAX = sys.float_info.max
STORED_BOUNDS: dict[type, dict[str, Any]] = {
    int: {"ge": -INT64_MAX - 1, "le": INT64_MAX},
    float: {"ge": -FLOAT_MAX, "le": FLOAT_MAX},
}
StoredInt = Annotated[int, msgspec.Meta(**STORED_BOUNDS[int])]

WireFormat = Literal["compact", "map"]

# The lists of a ``ras`` status too big for one message that its parts share out (``RasRecord.part`` of ``parts``);
# every other field is in every part.
RAS_SPLIT_LISTS = ("communicators", "missing_processes", "dead_processes", "mismatches")


def event_type(kind: str) -> str:
    return f"{TYPE_PREFIX}{kind}"


def size_bucket(msg_size_bytes: int) -> int:
    """The message-size bucket of an operation: the smallest power of two at least its size (0 for empty ones)."""
    return 1 << (msg_size_bytes - 1).bit_length() if msg_size_bytes > 0 else 0
