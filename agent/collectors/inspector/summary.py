"""Agent-side Inspector summaries (pure): records in, one ``inspector_summary`` per closed window and (comm, collective,
size bucket, process) out. The simulator feeds its jobs through this same code.

Windows are aligned to multiples of ``window_s`` in dump time, so every node's windows line up. A window closes once
the clock passes its end plus the grace (the plugin's dump interval and the collector's polling make records arrive a
little after their dump time): ``grace_s``, or longer while records arrive later than that (a starved host, a slow dump
thread), following the largest delay seen on arrival over the last ``DELAY_MEMORY_WINDOWS`` windows, up to
``max_grace_s``; a fixed grace would drop most of a starved host's records as late and leave its processes unjudged.
A record whose window has closed already is counted in ``late`` (per key, reported with the key's next summary, and in
total) and summarized nowhere. What is kept per slice mirrors what the straggler engine
folds raw records into (:mod:`aggregator.analysis.stragglers`), so it sees the same aggregates either way.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from ranksight.agent.collectors.inspector.parse import bandwidths_gbs
from ranksight.schemas.records import InspectorRecord, InspectorSummaryRecord
from ranksight.schemas.records.inspector_summary import size_bucket

DELAY_MEMORY_WINDOWS = 6  # how long a seen arrival delay keeps widening the grace

# (comm_id, op_kind, op, size bucket, rank, hostname, pid)
SummaryKey = tuple[str, str, str, int, int, str, int]


class SnSpan:
    """``coll_sn`` range of one (comm, coll, rank) in one slice, with the dump times that bound it (the straggler
    engine keeps the same per slice)."""

    __slots__ = ("hi", "hi_ts", "lo", "lo_ts")

    def __init__(self, sn: int, ts: int) -> None:
        self.lo = self.hi = sn
        self.lo_ts = self.hi_ts = ts

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
        self.span = SnSpan(sn, ts)

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
    exec_times: list[float] = field(default_factory=list)
    bw_mismatches: int = 0
    sn_first: int = 0
    sn_last: int = 0
    last_dump_ts_us: int = 0
    slices: dict[int, _SliceStats] = field(default_factory=dict)


def _quantile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Summarizer:
    """Feed records with :meth:`add`; :meth:`close` returns the summaries of every window the clock has passed (plus
    grace). Holds no clock and does no I/O. At most ``max_keys`` (window, key) accumulators are open; records beyond
    are counted in ``overflow``."""

    def __init__(self, window_s: float = 5.0, slice_s: float = 0.5, grace_s: float = 2.0,
                 max_keys: int = 100_000, max_grace_s: float | None = None) -> None:  # fmt: skip
        self.window_us = max(1, round(window_s * 1e6))
        self.slice_us = max(1, min(self.window_us, round(slice_s * 1e6)))
        self.grace_us = round(grace_s * 1e6)
        self.max_grace_us = max(self.grace_us, round((grace_s if max_grace_s is None else max_grace_s) * 1e6))
        self.oldest_added_us: int | None = None  # the earliest dump time added since the last close
        self.delays: deque[tuple[int, int]] = deque()  # (close time, the largest arrival delay then), recent
        self.max_keys = max_keys
        self.windows: dict[int, dict[SummaryKey, _Acc]] = {}
        self.open_keys = 0
        self.closed_before = 0  # windows starting before this are closed
        self.late: dict[SummaryKey, int] = {}
        self.late_total = self.overflow = self.records = 0

    def add(self, rec: InspectorRecord) -> None:
        self.records += 1
        if self.oldest_added_us is None or rec.dump_ts_us < self.oldest_added_us:
            self.oldest_added_us = rec.dump_ts_us
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
        if start < self.closed_before:
            self.late[key] = self.late.get(key, 0) + 1
            self.late_total += 1
            return
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

    def grace_at(self, now_us: int) -> int:
        """The grace (µs) windows get now: ``grace_s``, widened to the largest recent arrival delay."""
        if self.oldest_added_us is not None:
            self.delays.append((now_us, now_us - self.oldest_added_us))
            self.oldest_added_us = None
        while self.delays and self.delays[0][0] < now_us - DELAY_MEMORY_WINDOWS * self.window_us:
            self.delays.popleft()
        recent = max((delay for _, delay in self.delays), default=0)
        return min(self.max_grace_us, max(self.grace_us, recent))

    def close(self, now_us: int) -> list[InspectorSummaryRecord]:
        """Summaries of the windows that ended at least the grace before ``now_us``, oldest first."""
        horizon = now_us - self.grace_at(now_us)
        closing = sorted(start for start in self.windows if start + self.window_us <= horizon)
        out: list[InspectorSummaryRecord] = []
        for start in closing:
            window = self.windows.pop(start)
            self.open_keys -= len(window)
            out += [self._summary(start, key, acc) for key, acc in window.items()]
        # a window closes when its end is at or before the horizon: exactly those starting before this multiple
        self.closed_before = max(self.closed_before, horizon - horizon % self.window_us)
        return out

    def flush(self) -> list[InspectorSummaryRecord]:
        """Every open window's summary now (at shutdown: a partial window beats none)."""
        out: list[InspectorSummaryRecord] = []
        for start in sorted(self.windows):
            window = self.windows.pop(start)
            out += [self._summary(start, key, acc) for key, acc in window.items()]
        self.open_keys = 0
        return out

    def _summary(self, start: int, key: SummaryKey, acc: _Acc) -> InspectorSummaryRecord:
        rec = acc.first
        times = sorted(acc.exec_times)
        total = math.fsum(times)
        bandwidths = bandwidths_gbs(rec.op, rec.n_ranks, acc.timed_bytes, total) if times else None
        slices = sorted(acc.slices.items())
        # model_construct: every value is built here from checked records (the agent's hot path; the aggregator
        # validates the wire form again)
        return InspectorSummaryRecord.model_construct(
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
            late=self.late.pop(key, 0),
            slice_index=[i for i, _ in slices],
            slice_count=[s.count for _, s in slices],
            slice_exec_sum_us=[s.total for _, s in slices],
            slice_exec_min_us=[s.low for _, s in slices],
            slice_sn_lo=[s.span.lo for _, s in slices],
            slice_sn_lo_ts_us=[s.span.lo_ts for _, s in slices],
            slice_sn_hi=[s.span.hi for _, s in slices],
            slice_sn_hi_ts_us=[s.span.hi_ts for _, s in slices],
        )
