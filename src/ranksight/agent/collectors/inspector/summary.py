"""Agent-side Inspector summaries (pure): records in, ``inspector_summary`` records per window and (comm, collective,
size bucket, process) out, published in parts as the records are read. The simulator feeds its jobs through this same
code.

Windows are aligned to multiples of ``window_s`` in dump time, so every node's windows line up. Each :meth:`take`
(the collector calls it every ``summary_publish_s``) returns one part per (window, key) holding the records added since
the previous take, but for a window begun less than a period ago, which waits for the next; the parts of a window add
up (the engine sums them). Waiting for a window to close would hold every record back by the window plus a grace for
records read after their dump time; parts carry each record within a period or two of its reading, and none is ever
late. What is kept per slice mirrors what the straggler engine folds raw records into
(:mod:`aggregator.models.straggler`), so it sees the same aggregates either way.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field

import msgspec

from ranksight.formats.inspector import bandwidths_gbs
from ranksight.schemas.records import InspectorRecord, InspectorSummaryRecord
from ranksight.schemas.wire import size_bucket

# (comm_id, op_kind, op, size bucket, rank, hostname, pid)
SummaryKey = tuple[str, str, str, int, int, str, int]


class SnSpan(msgspec.Struct, gc=False, array_like=True):
    """``coll_sn`` range of one (comm, coll, rank) in one slice, with the dump times that bound it (the straggler
    engine keeps the same per slice, millions of them at a thousand nodes: a struct the cyclic GC never scans, as it
    holds only numbers; it packs the older ones as msgpack arrays)."""

    lo: int
    lo_ts: int
    hi: int
    hi_ts: int

    @classmethod
    def at(cls, sn: int, ts: int) -> SnSpan:
        return cls(sn, ts, sn, ts)

    def add(self, sn: int, ts: int) -> None:
        if sn < self.lo or (sn == self.lo and ts < self.lo_ts):
            self.lo, self.lo_ts = sn, ts
        if sn > self.hi or (sn == self.hi and ts < self.hi_ts):
            self.hi, self.hi_ts = sn, ts


class _SliceStats:
    """Timed operations of one slice: count, sum and minimum of exec times, and their ``coll_sn`` span."""

    __slots__ = ("count", "low", "span", "total")

    def __init__(self, sn: int, ts: int) -> None:
        self.count, self.total, self.low = 0, 0.0, math.inf
        self.span = SnSpan.at(sn, ts)

    def add(self, exec_us: float, sn: int, ts: int) -> None:
        self.count += 1
        self.total += exec_us
        self.low = min(self.low, exec_us)
        self.span.add(sn, ts)


@dataclass
class _Acc:
    first: InspectorRecord  # comm name, sizes of the comm, capture model
    count: int = 0
    bytes: int = 0
    timed_bytes: int = 0
    # plain doubles, 8 bytes each (a list holds a 24-byte float object per value)
    exec_times: array[float] = field(default_factory=lambda: array("d"))
    bw_mismatches: int = 0
    sn_first: int = 0
    sn_last: int = 0
    last_dump_ts_us: int = 0
    slices: dict[int, _SliceStats] = field(default_factory=dict)


def _quantile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Summarizer:
    """Feed records with :meth:`add`; :meth:`take` (every ``publish_s``) returns the parts of what was added since the
    last take. Holds no clock and does no I/O. At most ``max_keys`` (window, key) accumulators are open between two
    takes; records beyond are counted in ``overflow``."""

    def __init__(self, window_s: float = 5.0, slice_s: float = 0.5, publish_s: float = 1.0, *,
                 max_keys: int = 100_000) -> None:  # fmt: skip
        self.window_us = max(1, round(window_s * 1e6))
        self.part_us = max(1, round(publish_s * 1e6))  # told in every part: how long the next may take
        self.slice_us = max(1, min(self.window_us, round(slice_s * 1e6)))
        self.max_keys = max_keys
        self.windows: dict[int, dict[SummaryKey, _Acc]] = {}
        self.open_keys = 0
        self.overflow = self.records = self.parts = 0

    def add(self, rec: InspectorRecord) -> None:
        """Fold one operation."""
        self.records += 1
        start = rec.dump_ts_us - rec.dump_ts_us % self.window_us
        key = (
            rec.comm_id,
            rec.op_kind,
            rec.op,
            size_bucket(rec.msg_size_bytes),
            rec.rank,
            rec.hostname,
            rec.pid,
        )
        window = self.windows.get(start)
        if window is None:
            window = self.windows[start] = {}
        acc = window.get(key)
        if acc is None:
            if self.open_keys >= self.max_keys:
                self.overflow += 1
                return
            self.open_keys += 1
            acc = window[key] = _Acc(rec, sn_first=rec.sn, sn_last=rec.sn)
        acc.count += 1
        acc.bytes += rec.msg_size_bytes
        acc.bw_mismatches += rec.bw_mismatch
        acc.sn_first, acc.sn_last = min(acc.sn_first, rec.sn), max(acc.sn_last, rec.sn)
        acc.last_dump_ts_us = max(acc.last_dump_ts_us, rec.dump_ts_us)
        exec_us = rec.exec_time_us
        if exec_us is None or exec_us <= 0:
            return  # untimed: counted, but nothing for the engine (it skips them too)
        acc.exec_times.append(exec_us)
        acc.timed_bytes += rec.msg_size_bytes
        index = (rec.dump_ts_us - start) // self.slice_us
        stats = acc.slices.get(index)
        if stats is None:
            stats = acc.slices[index] = _SliceStats(rec.sn, rec.dump_ts_us)
        stats.add(exec_us, rec.sn, rec.dump_ts_us)

    def take(self, now_us: int | None = None) -> list[InspectorSummaryRecord]:
        """One part per (window, key) of the records added since the last take, oldest window first. Given the clock
        (``now_us``: the dump times' wall clock), a window younger than one publication period (or than itself, for
        periods longer than windows) is held for the next take: the agent takes at its own phase of the window grid,
        and a take soon after a window began would make its first part a sliver of the records dumped since, one part
        more per window and key (at the defaults 3 instead of 2: half as many rows again for the aggregator to decode,
        store and fold). A window dumped ahead of the clock is never held (a clock behind its dumps' cannot keep them
        back)."""
        hold_us = min(self.part_us, self.window_us)
        out: list[InspectorSummaryRecord] = []
        for start in sorted(self.windows):
            if now_us is not None and 0 <= now_us - start < hold_us:
                continue
            window = self.windows.pop(start)
            self.open_keys -= len(window)
            out += [self._summary(start, key, acc) for key, acc in window.items()]
        self.parts += len(out)
        return out

    def _summary(self, start: int, key: SummaryKey, acc: _Acc) -> InspectorSummaryRecord:
        rec = acc.first
        times = sorted(acc.exec_times)
        total = math.fsum(times)
        bandwidths = bandwidths_gbs(rec.op, rec.n_ranks, acc.timed_bytes, total) if times else None
        slices = sorted(acc.slices.items())
        # a record is built without validation: every value comes from checked records (the aggregator validates the
        # wire form again)
        return InspectorSummaryRecord(
            window_start_us=start,
            window_us=self.window_us,
            slice_us=self.slice_us,
            comm_id=rec.comm_id,
            comm_name=rec.comm_name,
            rank=rec.rank,
            n_ranks=rec.n_ranks,
            nnodes=rec.nnodes,
            hostname=rec.hostname,
            pid=rec.pid,
            op_kind=rec.op_kind,
            op=rec.op,
            size_bucket=key[3],
            capture_model=rec.capture_model,
            count=acc.count,
            bytes=acc.bytes,
            timed=len(times),
            exec_sum_us=total,
            exec_min_us=times[0] if times else None,
            exec_max_us=times[-1] if times else None,
            exec_p50_us=_quantile(times, 0.5) if times else None,
            exec_p90_us=_quantile(times, 0.9) if times else None,
            exec_p99_us=_quantile(times, 0.99) if times else None,
            algobw_gbs=bandwidths[0] if bandwidths else None,
            busbw_gbs=bandwidths[1] if bandwidths else None,
            bw_mismatches=acc.bw_mismatches,
            sn_first=acc.sn_first,
            sn_last=acc.sn_last,
            last_dump_ts_us=acc.last_dump_ts_us,
            part_us=self.part_us,
            slice_index=[i for i, _ in slices],
            slice_count=[s.count for _, s in slices],
            slice_exec_sum_us=[s.total for _, s in slices],
            slice_exec_min_us=[s.low for _, s in slices],
            slice_sn_lo=[s.span.lo for _, s in slices],
            slice_sn_lo_ts_us=[s.span.lo_ts for _, s in slices],
            slice_sn_hi=[s.span.hi for _, s in slices],
            slice_sn_hi_ts_us=[s.span.hi_ts for _, s in slices],
        )
