"""Base class of every record carried in an envelope."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import msgspec


class Record(msgspec.Struct, kw_only=True, frozen=True, gc=False):
    """One fact in an envelope's ``records`` batch.

    Unknown fields are ignored so that a newer agent (which may only *add* fields, design §2) never breaks an older
    aggregator; wrong types are rejected. Records are frozen (live state shares them) and not tracked by the cyclic GC
    (decoded data cannot form cycles, and millions of live records would slow every collection). Every subclass says
    ``kw_only=True`` (msgspec does not inherit it: a required field may then follow a defaulted one, and the fields
    stay in declaration order, a base's first) and ``frozen=True`` (inherited, but type checkers want it said).
    """

    # Envelopes of a kind whose latest record is the fact (a heartbeat, an endpoint) must carry at least one.
    min_records: ClassVar[int] = 0
    # Bumped when the record (or a sub-record) gains a field; compact batches carry it (``record_version``) and an
    # aggregator refuses a version newer than its own (``unsupported_version``).
    schema_version: ClassVar[int] = 1


class SubRecord(msgspec.Struct, kw_only=True, gc=False):
    """A part of a record (a collector's health, a RAS communicator): not frozen, as parsers build them field by
    field; unknown fields are ignored as in records."""


@dataclass(frozen=True)
class RecordKind:
    """The registration of an event kind, declared in the module of its struct (that module's ``KINDS``)."""

    name: str  # the envelope's kind, a subject token, and the aggregator's table
    model: type[Record]
    collector: str  # the agent collector that publishes it; its settings' ttl_s is the kind's TTL
    tracker: str | None  # the LiveState tracker that keeps its live state; None: history only
    parse: str | None = None  # module with ``register_parse(sources)`` for ``ranksight parse``
