"""The wire contract's constants and plain behaviour, without pydantic: what the agent process needs of the envelope.

:mod:`schemas.envelope` declares the envelope (pydantic); its msgspec twin (:mod:`schemas.twins`) is what the agent
builds. Both take their names and limits from here.
"""

from __future__ import annotations

import sys
from typing import Any, Literal

TYPE_PREFIX = "ranksight.ev.v1."
MAX_RECORDS = 100_000
MAX_FIELDS = 1024  # names in a compact batch: far above any record model's field count
# A compact batch takes at least this many bytes per record, about the smallest map-form record: decoded records cost
# memory per record whatever their bytes, so a few bytes must not become many records.
MIN_COMPACT_RECORD_BYTES = 8

# What the store can hold: every integer column is BIGINT, every float column a finite DOUBLE (the bounds also reject
# inf and NaN). Declared once here; every int and float of the envelope and the records takes them.
STORED_BOUNDS: dict[type, dict[str, Any]] = {
    int: {"ge": -(2**63), "le": 2**63 - 1},
    float: {"ge": -sys.float_info.max, "le": sys.float_info.max},
}

WireFormat = Literal["compact", "map"]

# The lists of a ``ras`` status too big for one message that its parts share out (``RasRecord.part`` of ``parts``);
# every other field is in every part.
RAS_SPLIT_LISTS = ("communicators", "missing_processes", "dead_processes", "mismatches")


def event_type(kind: str) -> str:
    return f"{TYPE_PREFIX}{kind}"


def size_bucket(msg_size_bytes: int) -> int:
    """The message-size bucket of an operation: the smallest power of two at least its size (0 for empty ones)."""
    return 1 << (msg_size_bytes - 1).bit_length() if msg_size_bytes > 0 else 0


class RawWindow:
    """An ``inspector_raw`` request's window must not end before it starts (the model and its twin alike)."""

    __slots__ = ()
    from_us: int
    to_us: int

    def __post_init__(self) -> None:
        if self.to_us < self.from_us:
            raise ValueError(f"to_us {self.to_us} is before from_us {self.from_us}")


class EnvelopeNames:
    """What an envelope's fields name: its kind and its de-duplication id (the model and its twin alike)."""

    __slots__ = ()
    type: str
    agent: str
    seq: int

    @property
    def kind(self) -> str:
        return self.type.removeprefix(TYPE_PREFIX)

    @property
    def msg_id(self) -> str:
        """The JetStream de-duplication id: ``<agent>:<seq>``."""
        return f"{self.agent}:{self.seq}"
