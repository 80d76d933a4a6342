"""``inspector``: one Inspector profiler record (a collective or a point-to-point operation of one rank).

The kind carries raw per-operation records. Per-window summaries (design §4: per comm, collective, size and rank,
keeping the statistics the straggler model needs) will be a separate, additive kind (``inspector_summary``), so this
model never has to change shape for them; consumers select on the kind.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ranksight.schemas.records.base import Record
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
from ranksight.schemas.wire import RawWindow

CaptureModel = Literal["ring", "sampled"]


class InspectorOperation(Record):
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


class InspectorRecord(InspectorOperation):
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
IDENTITY = ("hostname", "pid", "comm_id", "rank", "op_kind", "op", "sn", "peer", "dump_ts_us")


# -- raw records on request: the agent command ``<prefix>.agent.<cluster>.<node>.inspector_raw`` (JSON) ----------------
class RawCursor(BaseModel):
    """Where the next page starts: a dump file's name (never a path: the agent only reads the files it lists in its
    own dump directory) and a byte offset in it."""

    model_config = ConfigDict(extra="forbid")

    file: str = Field(min_length=1, max_length=255, pattern=r"^[^/\\\x00]+$")
    offset: int = Field(ge=0, le=2**63 - 1)


class RawRecordsRequest(RawWindow, BaseModel):
    """Raw Inspector records of some communicators (header ``id`` or ``comm_name``) dumped within ``[from_us, to_us]``
    (the records' ``dump_ts_us``). One page per request; ``cursor`` is the previous page's ``next``."""

    model_config = ConfigDict(extra="forbid")

    comms: list[Annotated[str, Field(min_length=1, max_length=256)]] = Field(min_length=1, max_length=1024)
    from_us: int = Field(ge=0, le=2**63 - 1)
    to_us: int = Field(ge=0, le=2**63 - 1)
    cursor: RawCursor | None = None
    max_records: int | None = Field(None, ge=1, description="at most this many records in the page")

    @model_validator(mode="after")
    def _window(self) -> RawRecordsRequest:
        self.__post_init__()
        return self


class RawRecordsPage(BaseModel):
    """One page of the answer; ``next`` is null on the last page."""

    node: str
    incarnation: str
    records: list[InspectorRecord]
    next: RawCursor | None = None
    scanned_bytes: int = 0
    bad_lines: int = 0
