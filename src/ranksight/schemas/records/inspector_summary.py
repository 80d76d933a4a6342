"""``inspector_summary``: one agent's Inspector records of one window, per (communicator, collective, message-size
bucket, process).

Windows are ``window_us`` long and aligned to multiples of it in dump time (wall clock), so every node's windows line
up. Besides the window's totals (count, bytes, exec time sum/min/max and quantiles, bandwidth, ``coll_sn`` range), a
summary carries what the straggler engine folds raw records into (:mod:`aggregator.analysis.stragglers`): per
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

from ranksight.schemas.records.inspector import CaptureModel, InspectorOperation


class InspectorSummaryRecord(InspectorOperation):
    schema_version: ClassVar[int] = 2  # 2: `part_us`
    window_start_us: int  # dump time (µs since the epoch) where the window starts: a multiple of window_us
    window_us: int
    slice_us: int  # the per-slice lists' resolution
    size_bucket: int  # see schemas.wire.size_bucket(); the exact sizes add up in `bytes`
    capture_model: CaptureModel = "sampled"
    count: int  # records of the window (timed or not)
    bytes: int  # sum of their message sizes
    timed: int = 0  # records with an exec time
    exec_sum_us: float = 0.0
    exec_min_us: float | None = None
    exec_max_us: float | None = None
    exec_p50_us: float | None = None
    exec_p90_us: float | None = None
    exec_p99_us: float | None = None
    algobw_gbs: float | None = None  # the timed records' traffic over their exec time, recomputed (design §4)
    busbw_gbs: float | None = None
    bw_mismatches: int = 0  # records whose reported busbw disagrees with the recomputed one
    sn_first: int
    sn_last: int
    last_dump_ts_us: int  # the latest dump time among the window's records
    late: int = 0  # whole windows: records of this key that came after their window had closed, since its last summary
    slice_index: list[int] = []  # slice of the window (0 .. window_us / slice_us - 1)
    slice_count: list[int] = []
    slice_exec_sum_us: list[float] = []
    slice_exec_min_us: list[float] = []
    slice_sn_lo: list[int] = []
    slice_sn_lo_ts_us: list[int] = []
    slice_sn_hi: list[int] = []
    slice_sn_hi_ts_us: list[int] = []
    # one part of the window: the records its agent read within one publication period, this long (µs); 0: the whole
    # window, published once it closed, as agents before schema version 2 did
    part_us: int = 0
