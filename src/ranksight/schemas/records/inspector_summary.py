"""``inspector_summary``: one agent's Inspector records of one window, per (communicator, collective, message-size
bucket, process).

Windows are ``window_us`` long and aligned to multiples of it in dump time (wall clock), so every node's windows line
up. Besides the window's totals (count, bytes, exec time sum/min/max and quantiles, bandwidth, ``coll_sn`` range), a
summary carries what the straggler engine folds raw records into (:mod:`aggregator.models.straggler`): per
``slice_us`` slice of the window that holds timed operations, the count, sum and minimum of their exec times and the
``coll_sn`` span with the dump times that bound it. The engine fed summaries sees the same aggregates as fed the raw
records, so it judges ranks of a communicator with the same accuracy without them.

Agents publish a window in parts (``part_us``, their publication period): each part holds the records of the
window the agent read since its last part (a window's first part waits until the window is one period old), so the
engine and the hang finder get them within a period or two of raw records; the
parts of a window add up (counts, sums, minima, maxima, ``coll_sn`` spans, per-slice lists; the quantiles are each
part's own). Agents before schema version 2 published each window once, ``summary_grace_s`` after its end, counting
records read later than that in ``late`` (``part_us`` 0); the aggregator reads both.

Versioned like every record (``ranksight.ev.v1.inspector_summary``, ``schema_version``); fields are only ever added.
The per-slice lists are parallel: entry ``i`` of each describes slice ``slice_index[i]`` of the window.
"""

from __future__ import annotations

from typing import ClassVar

from ranksight.schemas.records.base import RecordKind
from ranksight.schemas.records.inspector import CaptureModel, InspectorOperation
from ranksight.schemas.records.quantities import (
    Bytes,
    Count,
    Gauge,
    Micros,
    MicrosLength,
    MicrosSpan,
    TimestampUs,
)


class InspectorSummaryRecord(InspectorOperation, kw_only=True, frozen=True):
    schema_version: ClassVar[int] = 2  # 2: `part_us`
    window_start_us: (
        TimestampUs  # dump time (µs since the epoch) where the window starts: a multiple of window_us
    )
    window_us: MicrosSpan
    slice_us: MicrosSpan  # the per-slice lists' resolution
    size_bucket: Bytes  # see schemas.wire.size_bucket(); the exact sizes add up in `bytes`
    capture_model: CaptureModel = "sampled"
    count: Count  # records of the window (timed or not)
    bytes: Bytes  # sum of their message sizes
    timed: Count = 0  # records with an exec time
    exec_sum_us: Micros = 0.0
    exec_min_us: Micros | None = None
    exec_max_us: Micros | None = None
    exec_p50_us: Micros | None = None
    exec_p90_us: Micros | None = None
    exec_p99_us: Micros | None = None
    algobw_gbs: Gauge | None = None  # the timed records' traffic over their exec time, recomputed (design §4)
    busbw_gbs: Gauge | None = None
    bw_mismatches: Count = 0  # records whose reported busbw disagrees with the recomputed one
    sn_first: Count
    sn_last: Count
    last_dump_ts_us: TimestampUs  # the latest dump time among the window's records
    late: Count = 0  # whole windows: records of this key that came after their window had closed, since its last summary
    slice_index: list[Count] = []  # slice of the window (0 .. window_us / slice_us - 1)
    slice_count: list[Count] = []
    slice_exec_sum_us: list[Micros] = []
    slice_exec_min_us: list[Micros] = []
    slice_sn_lo: list[Count] = []
    slice_sn_lo_ts_us: list[TimestampUs] = []
    slice_sn_hi: list[Count] = []
    slice_sn_hi_ts_us: list[TimestampUs] = []
    # one part of the window: the records its agent read within one publication period, this long (µs); 0: the whole
    # window, published once it closed, as agents before schema version 2 did
    part_us: MicrosLength = 0


KINDS = [
    RecordKind("inspector_summary", InspectorSummaryRecord, collector="inspector", tracker="stragglers"),
]
