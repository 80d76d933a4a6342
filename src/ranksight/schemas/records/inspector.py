"""``inspector``: one Inspector profiler record (a collective or a point-to-point operation of one rank).

The kind carries raw per-operation records. Per-window summaries (design §4: per comm, collective, size and rank,
keeping the statistics the straggler model needs) will be a separate, additive kind (``inspector_summary``), so this
model never has to change shape for them; consumers select on the kind.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from ranksight.schemas.records.base import Record, RecordKind
from ranksight.schemas.records.quantities import (
    Bytes,
    Count,
    Gauge,
    Micros,
    Pid,
    Rank,
    RankCount,
    TimestampUs,
)
from ranksight.schemas.wire import INT64_MAX, StoredInt

CaptureModel = Literal["ring", "sampled"]


class InspectorOperation(Record, kw_only=True, frozen=True):
    """Who ran an operation: its communicator, the rank in it, the process; shared by raw records and summaries."""

    comm_id: str
    comm_name: str | None = None
    rank: Rank
    n_ranks: RankCount
    nnodes: RankCount | None = None
    hostname: str
    pid: Pid
    op_kind: Literal["coll", "p2p"]
    op: str


class InspectorRecord(InspectorOperation, kw_only=True, frozen=True):
    sn: Count
    peer: Rank | None = None
    msg_size_bytes: Bytes
    exec_time_us: Micros | None = None
    timing_source: str | None = None
    algobw_gbs: Gauge | None = None
    busbw_gbs: Gauge | None = None
    dump_ts_us: TimestampUs
    capture_model: CaptureModel = "sampled"
    busbw_expected_gbs: Gauge | None = None  # recomputed from size and time (design §4)
    bw_mismatch: bool = False  # reported busbw disagrees with the recomputed one (broken build)


# What makes a record one operation of one rank as dumped: the same dump line read twice (streamed, then fetched on
# request) has the same values; a sampled-model op dumped at two ticks is two lines, two records.


KINDS = [
    RecordKind("inspector", InspectorRecord, collector="inspector", tracker="stragglers"),
]
IDENTITY = ("hostname", "pid", "comm_id", "rank", "op_kind", "op", "sn", "peer", "dump_ts_us")


# -- raw records on request: the agent command ``<prefix>.agent.<cluster>.<node>.inspector_raw`` (JSON) ----------------
class RawCursor(msgspec.Struct, kw_only=True, gc=False, forbid_unknown_fields=True):
    """Where the next page starts: a dump file's name (never a path: the agent only reads the files it lists in its
    own dump directory) and a byte offset in it."""

    file: Annotated[str, msgspec.Meta(min_length=1, max_length=255, pattern=r"^[^/\\\x00]+$")]
    offset: Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)]


class RawRecordsRequest(msgspec.Struct, kw_only=True, frozen=True, gc=False, forbid_unknown_fields=True):
    """Raw Inspector records of some communicators (header ``id`` or ``comm_name``) dumped within ``[from_us, to_us]``
    (the records' ``dump_ts_us``). One page per request; ``cursor`` is the previous page's ``next``."""

    from_us: Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)]
    to_us: Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)]
    comms: Annotated[
        list[Annotated[str, msgspec.Meta(min_length=1, max_length=256)]],
        msgspec.Meta(min_length=1, max_length=1024),
    ]
    cursor: RawCursor | None = None
    max_records: (
        Annotated[int, msgspec.Meta(ge=1, le=INT64_MAX, description="at most this many records in the page")]
        | None
    ) = None

    def __post_init__(self) -> None:
        # msgspec turns the ValueError into the ValidationError of the request, as it does a value out of range
        if self.to_us < self.from_us:
            raise ValueError(f"to_us {self.to_us} is before from_us {self.from_us}")


class RawRecordsPage(msgspec.Struct, kw_only=True, gc=False):
    """One page of the answer; ``next`` is null on the last page."""

    node: str
    incarnation: str
    records: list[InspectorRecord]
    next: RawCursor | None = None
    scanned_bytes: StoredInt = 0
    bad_lines: StoredInt = 0
