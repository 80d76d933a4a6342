"""The compute model: each process's share of the time outside collectives against its peers' (ring: tick to
tick; sampled: each key's op rate times its mean exec time), pooled to tell a steady straggler from an intermittent one,
per job and pipeline stage; node-wide slowness folded into one finding per node.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import compress
from typing import Any, ClassVar, cast

import numpy as np

from ranksight.aggregator.models.robust import MAD_TO_SIGMA, median_mad
from ranksight.aggregator.models.straggler.findings import Finding, Pattern, Proc, StragglerParams
from ranksight.aggregator.models.straggler.ledger import F64, I64, Rows, run_starts
from ranksight.aggregator.models.straggler.slices import Comm, Slices

IQR_TO_SIGMA = 1.349  # a normal distribution's interquartile range in standard deviations
# the dump interval is read from the dump times of this many processes (every process's thread ticks at it)
_INTERVAL_PROCS = 64
# sampled: samples of a (comm, coll, rank) in a horizon before its median exec time is compared with its peers'
_LATE_SAMPLES = 2
# sampled: a flagged process is a pipeline neighbour's victim where one sharing a comm with it costs this many times more
_VICTIM_RATIO = 3.0
# sampled: a process waiting in one of its comms (two-rank ones included: a pipeline neighbour, late after an unrecorded
# Recv from a straggler, waits for it in the EP/DP comm they share) by this share of its lateness in another is not
# judged by lateness: its lateness is the straggler's delay passed on, and a straggler waits in none of its comms
_VICTIM_WAIT = 0.25
# sampled: standard errors (from its samples' spread) a process's lateness must exceed to count
_LATE_Z = 4.0
# ring: the share of its numbered ops a process's plugin wrote, under which some of its waits may be unrecorded
_ALL_WRITTEN = 0.99
# slow pools a suspect needs: a one-step hiccup is not a straggler
_HOT_POOLS = 3


def _robust(values: list[float], floor: float) -> tuple[float, float]:
    med, mad = median_mad(values)
    return med, max(MAD_TO_SIGMA * mad, floor)


def _pooled(busy: list[float], covered: list[float], pool: int) -> list[float]:
    """Compute shares of consecutive pools of ``pool`` slices, pooled from the end: each pool's busy time against the
    time it covers (NaN: a pool that covers none, no tick of the process in it)."""
    out = []
    for end in range(len(busy), 0, -pool):
        start = max(0, end - pool)
        time = math.fsum(covered[start:end])
        out.append(1 - math.fsum(busy[start:end]) / time if time > 0 else math.nan)
    return out[::-1]


def _dump_interval(rows: Rows, proc: np.ndarray[Any, Any], known: float) -> float:
    """The plugins' dump interval (µs): the typical gap between a process's successive dump ticks (a tick's lines
    are written within a few ms of each other), as far as the rows' dump times show it (``known`` otherwise)."""
    sample = proc < _INTERVAL_PROCS
    if not sample.any():
        return known
    rows, proc = rows.take(sample), proc[sample]
    ts = np.concatenate([rows.lo_ts, rows.hi_ts])
    who = np.concatenate([proc, proc])
    order = np.lexsort((ts, who))
    ts, who = ts[order], who[order]
    same = who[1:] == who[:-1]
    gaps = np.diff(ts)
    if same.sum() < 3:
        return known
    # the lines of one tick are written one after the other (over tens of ms where the dump thread is starved or its
    # clock sped up): a tick starts at a gap well above that spread; the interval is a low quantile of the gaps from
    # tick to tick (a slice shows only the first and last tick of each key, and a tick without ops writes nothing)
    apart = max(2000.0, 0.1 * float(np.percentile(gaps[same], 99)))
    starts = np.flatnonzero(np.concatenate(([True], ~same | (gaps > apart))))
    steps = np.diff(ts[starts])[who[starts][1:] == who[starts][:-1]]
    return float(np.percentile(steps, 20)) if len(steps) >= 3 else known


def chance_slow(factors: list[float], background: list[float], floor: float, pools: int = 0) -> float:
    """The chance that ``factors`` (of ``pools`` pools, those missing quiet) hold as many pools as slow as they do,
    were each pool as likely to be that slow as a healthy peer's (``background``): at each of their own factors above
    ``floor`` as the bar, the binomial tail at the peers' rate of pools that slow (counted with one such pool more
    than they show: a rate never seen is rare, not impossible); the least, times the bars tried."""
    bars = sorted({x for x in factors if x >= floor})
    n = max(len(factors), pools)
    least = 1.0
    for bar in bars:
        slow = sum(x >= bar for x in factors)
        rate = (sum(x >= bar for x in background) + 1) / (len(background) + 2)
        least = min(least, _binomial_tail(n, slow, rate))
    return min(1.0, least * len(bars))


def _binomial_tail(n: int, k: int, rate: float) -> float:
    """P(X >= k) for X ~ Binomial(n, rate), 0 < rate < 1, its terms in logarithms: the binomial coefficient of a
    thousand pools or more is beyond a float."""
    log_n, log_rate, log_rest = math.lgamma(n + 1), math.log(rate), math.log1p(-rate)
    return math.fsum(
        math.exp(log_n - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_rate + (n - i) * log_rest)
        for i in range(k, n + 1)
    )


def without_victims(findings: list[Finding]) -> list[Finding]:
    """A process whose excess may be waits the plugin did not record, sharing a communicator with a finding costing
    the job ``_VICTIM_RATIO`` times as much, is left out: it waited for that one in an op the plugin does not write
    and so arrives late at its next collectives too. Such waits are possible where the process was judged by lateness
    (sampled: no Send/Recv recorded, a pipeline neighbour's waits) or where the plugin numbered ops it did not write
    (ring: under 8 KiB, without kernel timing, or dropped)."""
    return [f for f in findings if not _unrecorded_waits(f) or not any(
        other is not f and other.cost >= _VICTIM_RATIO * f.cost and set(other.comm_ids) & set(f.comm_ids)
        for other in findings)]  # fmt: skip


def _unrecorded_waits(f: Finding) -> bool:
    written = f.coverage.get("ops_written_share", 1.0)
    return f.coverage.get("compared_by") == "lateness" or (
        isinstance(written, float) and written < _ALL_WRITTEN
    )


def _nan_median(values: Iterable[float]) -> float:
    kept = [x for x in values if x == x]
    return statistics.median(kept) if kept else math.nan


@dataclass(frozen=True)
class PoolPattern:
    """Steady or intermittent, as far as pools of ``resolution_s`` tell: a fault that comes and goes faster than that
    averages out within each pool and cannot be told from a steady one; pools too noisy against the excess, or too
    few, tell nothing ("undetermined")."""

    kind: Pattern
    resolution_s: float
    duty: float = 1.0
    burst: float = 1.0

    average: float = 1.0  # the mean factor from its first slow pool to its last
    why: str = ""  # undetermined: why, where other than pools too few or too noisy

    MIN_POOLS: ClassVar[int] = 6

    @classmethod
    def judge(
        cls, factors: list[float], pool_sd: float, min_excess: float, resolution_s: float
    ) -> PoolPattern:
        """``factors``: the process's compute share per pool against its peers', in time order (a longer memory
        than one horizon: bursts longer than a horizon fill some horizons whole); ``pool_sd`` how far a healthy
        process's pool strays by noise alone. Only the pools from its first run of slow ones to its last slow one
        count: quiet pools before an onset or after a fault ended say nothing of bursts (nor does one hiccup before
        the onset), quiet pools between slow ones do. A quiet pool alone between slower ones is a pause shorter than
        the resolution or a noisy measure: up to a few of them do not keep a fault from being steady."""
        above = sorted(x for x in factors if x >= 1 + max(min_excess, 4 * pool_sd))
        if not above:
            return cls("undetermined", resolution_s)
        # slow: at least half the typical excess of its slow pools (a hiccup before an onset is not a burst)
        hot_at = 1 + max(min_excess, 4 * pool_sd, (above[(3 * len(above)) // 4] - 1) / 2)
        slow = [i for i, x in enumerate(factors) if x >= hot_at]
        if len(slow) < 2:
            return cls("undetermined", resolution_s)
        # from the first of two slow pools in a row (one slow pool alone before them is a hiccup)
        slow_set = set(slow)
        first = next((i for i in slow if i + 1 in slow_set), slow[0])
        span = factors[first : slow[-1] + 1]
        average = statistics.fmean(span)
        # a burst's edges fall inside pools, which then read part slow: the slow pools' upper quartile is its size
        slow_factors = sorted(x for x in span if x >= hot_at)
        burst = slow_factors[min(len(slow_factors) - 1, (3 * len(slow_factors)) // 4)]
        if len(span) < cls.MIN_POOLS or burst - 1 < 4 * pool_sd:
            return cls("undetermined", resolution_s, burst=burst, average=average)
        # quiet: as its peers' pools, within their noise (a pool far faster than its peers' is a measure astray,
        # sampled: too few samples in it, not a pause)
        is_quiet = [1 - 4 * pool_sd <= x < 1 + 2 * pool_sd for x in span]
        quiet = sum(is_quiet)
        # quiet pools with a quiet neighbour: a pause the pools resolve
        paused = sum(q and ((i > 0 and is_quiet[i - 1]) or (i + 1 < len(span) and is_quiet[i + 1]))
                     for i, q in enumerate(is_quiet))  # fmt: skip
        if quiet >= max(2, 0.15 * len(span)):
            # whole cycles: from its first slow pool to the start of its last run of slow pools
            last_run = slow[-1]
            while last_run - 1 >= first and factors[last_run - 1] >= hot_at:
                last_run -= 1
            cycles = factors[first:last_run] or span
            average = statistics.fmean(cycles)
            duty = min(1.0, max(0.0, (average - 1) / (burst - 1)))
            return cls("intermittent", resolution_s, duty, burst, average)
        if paused <= 0.05 * len(span):
            return cls("steady", resolution_s, burst=burst, average=average)
        return cls("undetermined", resolution_s, burst=burst, average=average)


@dataclass
class _Lateness:
    """Sampled (:meth:`ComputeModel._lateness`): per process number its lateness and the communicator (number) it is
    latest in (-1: none), and per (comm, coll) number the median of its ranks' median exec times (NaN: unknown)."""

    late: np.ndarray[Any, Any]
    comm: np.ndarray[Any, Any]
    key_median: np.ndarray[Any, Any]
    # per process number: the most it waits, in one of its comms, for that comm's latest rank (share of the time)
    waits: np.ndarray[Any, Any]
    error: np.ndarray[Any, Any]  # per process number: the standard error of its lateness, from its samples
    # per process number: the collective types its lateness was compared on (a type carrying the waits may be
    # missing from a horizon's samples, and the lateness then reads low)
    types: np.ndarray[Any, Any]
    # per process number: its fewest samples of one of those types in the horizon (its lateness changes only where
    # such a sample falls: the time resolution of its lateness)
    samples: np.ndarray[Any, Any]


@dataclass
class _ProcShare:
    share: float
    ops: int
    lived: int  # slices of the horizon from the process's first record
    step_rate: float  # steps per µs: the rate of its most frequent collective
    # share of its numbered ops the plugin wrote (ring: coll_sn gaps are ops dropped or filtered)
    recorded: float
    # compute share per slice of those ``lived`` slices (aligned at the horizon's end): made only for a job where a
    # process stands out overall (most evaluations of a healthy job need none)
    slices: list[float] = field(default_factory=list)
    # sampled: how much later than the other ranks of its communicators it arrives, as a share of the time (NaN: too
    # few samples, or no communicator of three ranks or more); its judged share is its stage's plus this
    late: float = math.nan
    waits: float = (
        math.nan
    )  # sampled: the most it waits for the latest rank of one of its comms (share of the time)
    late_error: float = math.nan  # sampled: the standard error of ``late``
    late_types: int = 0  # sampled: the collective types ``late`` was compared on
    late_samples: int = 0  # sampled: its fewest samples of one of those types in the horizon
    outside: float = (
        math.nan
    )  # sampled: its estimated share of the time outside recorded ops, as first computed
    base: float = math.nan  # sampled: its judged share less its lateness (its stage's)


class ComputeModel(Slices):
    """Compute findings (:meth:`_compute`) from a horizon's rows."""

    def __init__(self, params: StragglerParams | None = None, offline: bool = True) -> None:
        super().__init__(params, offline)
        self._step_rate = 0.0  # steps per µs of the job, from the last evaluation
        self._interval_us = 0.0  # the plugins' dump interval (µs), from the last evaluation's dump times
        self._jobs_of: tuple[tuple[int, tuple[Proc, ...]], list[list[Proc]]] | None = None
        self._stages_of: tuple[tuple[int, tuple[Proc, ...]] | None, list[list[Proc]]] = (None, [])
        self._memberships_of: tuple[int, dict[Proc, list[tuple[Comm, int]]]] = (-1, {})
        self._span_proc: tuple[tuple[int, int, int], np.ndarray[Any, Any]] = ((-1, -1, -1), np.empty(0, I64))

    def _memberships(self) -> dict[Proc, list[tuple[Comm, int]]]:
        """Each process's (comm, rank) memberships, in the comms' order (made again once the comms' members changed:
        a walk over every comm's members, where a finding's process was looked for in each)."""
        if self._memberships_of[0] != self._members_version:
            of: dict[Proc, list[tuple[Comm, int]]] = defaultdict(list)
            for comm in self.comms.values():
                for rank, member in comm.members.items():
                    of[member].append((comm, rank))
            self._memberships_of = (self._members_version, of)
        return self._memberships_of[1]

    def _span_procs(self) -> np.ndarray[Any, Any]:
        """The process of each (comm, coll, rank) number: its comm's member at that rank now."""
        stamp = (self._members_version, self._procs.version, self._numberings)
        made_at, procs = self._span_proc
        if made_at != stamp:
            procs = np.empty(0, I64)
        if len(procs) < len(self._spans.keys):
            comms, number = self._comm_of, self._procs.number
            more = [-1 if (comm := comms[c]) is None else number(comm.members[rank]) for c, rank in
                    zip(self._span_comm.view[len(procs):].tolist(), self._span_rank.view[len(procs):].tolist(),
                        strict=True)]  # fmt: skip
            procs = np.concatenate([procs, np.array(more, I64)])
        self._span_proc = (stamp, procs)
        return procs

    def _pool_slices(self) -> int:
        """Slices per pool, the time resolution of a process's compute share: a pool holds a few steps, and a dump
        interval (ring: an op's completion is known only to its tick) or, sampled, a few samples per key."""
        p = self.params
        steps = math.ceil(p.min_steps / max(self._step_rate * self.slice_us, 1e-9)) if self._step_rate else 1
        ticks = p.pool_samples if self.sampled > self.ring else 1
        return max(1, steps, math.ceil(ticks * self._interval_us / self.slice_us))

    def _shares(
        self, rows: Rows, pos: np.ndarray[Any, Any], width: int, first: int
    ) -> tuple[dict[Proc, _ProcShare], Callable[[Proc, _ProcShare], tuple[list[float], list[float]]]]:
        """Each process's share of the horizon (``width`` slices from slice ``first``: ``rows``, each in slice ``pos``)
        spent outside collectives, overall, and the function giving it per slice, counted from its first record where
        that lies within the horizon."""
        if not len(rows.key):
            return {}, lambda proc, judged: ([], [])
        slice_us = self.params.slice_s * 1e6
        span_proc = self._span_procs()
        procs, spans = self._procs.keys, len(self._spans.keys)
        span = self._agg_span.values[rows.key]  # per row
        start = np.clip(np.fromiter((self.proc_first.get(proc, first) for proc in procs), I64, len(procs)) - first,
                        0, width - 1)  # fmt: skip
        lived_us = (width - start) * slice_us
        sampled = self.sampled > self.ring
        if not sampled:
            # ring: every op is there, but an op's completion is known only to the dump tick that wrote it (the ops of
            # a tick completed since the process's previous one). A process's time is therefore counted from tick to
            # tick: the busy time of the ops of a slice's ticks against the time since its previous tick, so slices
            # shorter than the dump interval (empty, or holding a whole interval's ops) neither lose nor gain time
            lo = np.full(spans, np.iinfo(I64).max, I64)
            hi = np.full(spans, -1, I64)
            np.minimum.at(lo, span, rows.lo)
            np.maximum.at(hi, span, rows.hi)
            seen = np.flatnonzero(hi >= 0)
            most = np.zeros(len(procs), I64)
            np.maximum.at(most, span_proc[seen], hi[seen] - lo[seen] + 1)
            proc = span_proc[span]
            ops = np.bincount(proc, rows.n, len(procs))
            # ops the plugin numbered but did not write (dropped from its ring, or filtered: small or untimed ops)
            numbered = np.zeros(len(procs), I64)
            np.add.at(numbered, span_proc[seen], hi[seen] - lo[seen] + 1)
            recorded = np.where(numbered > 0, np.minimum(1.0, ops / np.maximum(numbered, 1)), 1.0)
            busy_cells, covered_cells = self._tick_cells(rows, pos, proc, width, len(procs))
            busy, covered = busy_cells.sum(axis=0), covered_cells.sum(axis=0)
            step_rate = most / lived_us
            present = (ops > 0) & (covered > 0)
            span_rate = None
            share_of = 1 - busy / np.maximum(covered, 1)
        else:
            # sampled: the rate between each key's first and last sample of the horizon (a rank's coll_sn grows with
            # its dump time: its oldest slice's low end, its newest slice's high end), averaged per (comm, coll): each
            # rank's rate is off by up to one op over the horizon, differently per rank
            ends = []
            for edge, order in ((np.minimum, lambda at: (rows.lo_ts[at], rows.lo[at], span[at])),
                                (np.maximum, lambda at: (rows.hi_ts[at], ~rows.hi[at], span[at]))):  # fmt: skip
                edge_pos = np.full(spans, -1 if edge is np.maximum else width, I64)
                edge.at(edge_pos, span, pos)
                at = np.flatnonzero(pos == edge_pos[span])
                at = at[np.lexsort(order(at))]
                ends.append(at[run_starts(span[at])])  # one row per key seen, in key order
            oldest, newest = ends
            lo, lo_ts, hi, hi_ts = rows.lo[oldest], rows.lo_ts[oldest], rows.hi[newest], rows.hi_ts[newest]
            moving = (hi_ts > lo_ts) & (hi > lo)
            rate_key = self._span_rate.values[span[oldest][moving]]
            keys = len(self._rate_keys.keys)
            rated = np.bincount(rate_key, minlength=keys)
            mean_rate = np.bincount(rate_key, (hi - lo)[moving] / (hi_ts - lo_ts)[moving], keys) / np.maximum(
                rated, 1
            )
            # coll_sn counts a (comm, coll)'s ops of every size, so the time a rank spends in a collective is that op
            # rate times the mean exec time of its samples of all sizes (each size's mean times the rate of all of
            # them would count every size as if it alone ran at that rate)
            span_rate = mean_rate[self._span_rate.view]
            n = np.bincount(span, rows.n, spans)
            total = np.bincount(span, rows.total, spans)
            live = np.flatnonzero(n)
            proc = span_proc[live]
            ops = np.bincount(proc, n[live], len(procs))
            busy = np.bincount(proc, total[live] / n[live] * span_rate[live] * lived_us[proc], len(procs))
            step_rate = np.zeros(len(procs))
            np.maximum.at(step_rate, proc, span_rate[live])
            present = np.bincount(proc, minlength=len(procs)) > 0
            share_of = 1 - busy / lived_us
            recorded = np.ones(len(procs))
        share = share_of.tolist()
        ops_of, lived_of, step_of = ops.astype(I64).tolist(), (width - start).tolist(), step_rate.tolist()
        mask = present.tolist()
        lateness = self._lateness(rows, span, span_rate) if span_rate is not None else None
        unknown = np.full(len(procs), math.nan)
        none = np.zeros(len(procs), I64)
        late, waits, error, types, samples = (
            (lateness.late, lateness.waits, lateness.error, lateness.types, lateness.samples)
            if lateness is not None else (unknown, unknown, unknown, none, none))  # fmt: skip
        made = (_ProcShare(x, n, lived, rate, written, late=ahead, waits=wait, late_error=sd, late_types=kinds,
                           late_samples=fewest, outside=x)
                for x, n, lived, rate, written, ahead, wait, sd, kinds, fewest in zip(*(compress(values, mask)
                    for values in (share, ops_of, lived_of, step_of, recorded.tolist(), late.tolist(),
                                   waits.tolist(), error.tolist(), types.tolist(), samples.tolist())), strict=True))  # fmt: skip
        shares = dict(zip(compress(procs, mask), made, strict=True))
        # per method (by lateness or not): busy and covered cells
        per_slice: dict[bool, tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]] = {}

        def slices_of(proc: Proc, judged: _ProcShare) -> tuple[list[float], list[float]]:
            """Its busy time and the time it covers (µs) per slice, from its first record, as ``judged`` (by
            lateness where its ``base`` is set)."""
            by_lateness = lateness is not None and judged.base == judged.base
            if by_lateness not in per_slice:
                if span_rate is None:
                    per_slice[by_lateness] = (busy_cells, covered_cells)
                elif lateness is not None and by_lateness:
                    per_slice[by_lateness] = self._late_cells(rows, pos, width, span, span_rate, lateness)
                else:
                    per_slice[by_lateness] = self._slice_shares(rows, pos, width, span, span_proc, span_rate)
            i = self._procs.ids[proc]
            busy_of, covered_of = per_slice[by_lateness]
            if by_lateness:
                # the cells hold its lateness: its busy time is what its judged share leaves
                late_of, covered_of = busy_of[start[i] :, i], covered_of[start[i] :, i]
                busy = (1 - judged.base) * covered_of - late_of * self.slice_us
                return busy.tolist(), covered_of.tolist()
            return busy_of[start[i] :, i].tolist(), covered_of[start[i] :, i].tolist()

        return shares, slices_of

    def _lateness(self, rows: Rows, span: np.ndarray[Any, Any], span_rate: np.ndarray[Any, Any]) -> _Lateness:
        """Sampled: per process number, how much later than the other ranks of its communicators it arrives, as a
        share of the time (NaN where unknown). Single-slot samples of a collective are rare and their exec times
        heavy-tailed (a peer's hiccup makes one sample a whole step long), so a process's time in collectives estimated
        from them spreads widely, and its unrecorded Send/Recv waits count as compute. What the samples do tell: a
        rank's exec time is its wait for the last arriver plus the transfer, so within a communicator the late rank's
        exec times are short and its peers' long, whatever the sampled ops were (the ranks of a communicator complete
        each op together, so each is sampled as often on every rank). Per (comm, coll, rank) the median exec time of
        its samples (each slice's row: about one sample), against the median of its communicator's ranks, times the
        op rate; summed over the comm's collective types; per process the most of its communicators of three ranks or
        more (with two, which one is late cannot be told from which one is early, but which one waits can: its waits
        count every comm of two ranks or more)."""
        procs = len(self._procs.keys)
        out = _Lateness(
            np.full(procs, math.nan),
            np.full(procs, -1, I64),
            np.full(len(self._rate_keys.keys), math.nan),
            np.full(procs, math.nan),
            np.full(procs, math.nan),
            np.zeros(procs, I64),
            np.zeros(procs, I64),
        )
        if not len(span):
            return out
        value = rows.total / np.maximum(rows.n, 1)
        order = np.lexsort((value, span))
        spans_sorted, values = span[order], value[order]
        starts = run_starts(spans_sorted)
        counts = np.diff(np.append(starts, len(order)))
        enough = counts >= _LATE_SAMPLES
        starts, counts = starts[enough], counts[enough]
        if not len(starts):
            return out
        keys = spans_sorted[starts]
        medians = (values[starts + (counts - 1) // 2] + values[starts + counts // 2]) / 2
        # the standard error of each median, from the samples' interquartile range
        quartiles = (
            values[starts + np.ceil(0.75 * (counts - 1)).astype(I64)] - values[starts + (counts - 1) // 4]
        )
        errors = quartiles / IQR_TO_SIGMA * math.sqrt(math.pi / 2) / np.sqrt(counts)
        rate_key = self._span_rate.values[keys]
        comm_of = self._span_comm.values[keys]
        sizes = np.array([len(c.members) if c is not None else 0 for c in self._comm_of], I64)
        # two ranks: which one is late cannot be told from which one is early, but the early one waits for the
        # other (its exec times the longer): those comms tell waits, not lateness
        shared = sizes[comm_of] >= 2
        keys, medians, rate_key, comm_of, errors, counts = (
            keys[shared],
            medians[shared],
            rate_key[shared],
            comm_of[shared],
            errors[shared],
            counts[shared],
        )
        if not len(keys):
            return out
        by_rate = np.lexsort((medians, rate_key))
        rk, md = rate_key[by_rate], medians[by_rate]
        rate_starts = run_starts(rk)
        rate_counts = np.diff(np.append(rate_starts, len(rk)))
        key_median = out.key_median
        key_median[rk[rate_starts]] = (
            md[rate_starts + (rate_counts - 1) // 2] + md[rate_starts + rate_counts // 2]
        ) / 2
        compared = rate_counts >= 3
        key_median[rk[rate_starts[~compared]]] = math.nan
        key_least = np.full(len(self._rate_keys.keys), math.nan)
        key_least[rk[rate_starts]] = md[rate_starts]  # the latest rank's (sorted by median: the first)
        # the comparison's error: the rank's own median's and a typical rank's of the same key (the key's median is
        # made of such)
        by_error = np.lexsort((errors, rate_key))
        key_error = np.full(len(self._rate_keys.keys), math.nan)
        key_error[rk[rate_starts]] = errors[by_error][rate_starts + (rate_counts - 1) // 2]
        errors = np.hypot(errors, key_error[rate_key])
        late = span_rate[keys] * (key_median[rate_key] - medians)
        wait = span_rate[keys] * (medians - key_least[rate_key])
        proc = self._span_procs()[keys]
        # per process: the most it waits in one comm (summed over the comm's collective types) for its latest rank
        timed = (wait == wait) & (proc >= 0)
        waiting, waited_in = np.unique(comm_of[timed] * procs + proc[timed], return_inverse=True)
        waited = np.full(procs, -np.inf)
        np.maximum.at(waited, waiting % procs, np.bincount(waited_in, wait[timed], len(waiting)))
        out.waits[:] = np.where(np.isfinite(waited), waited, math.nan)
        known = (late == late) & (proc >= 0)
        # per (comm, process): summed over the comm's collective types; per process: its latest comm, and the comm it
        # waits most in
        pair = comm_of[known] * procs + proc[known]
        pairs, inverse = np.unique(pair, return_inverse=True)
        summed = np.bincount(inverse, late[known], len(pairs))
        # a comm counts only where the process has enough samples of every collective type its peers were compared
        # on: the type carrying the waits is often the rarest sampled, and without it the lateness reads low
        rate_comm = comm_of[by_rate][rate_starts]
        types = np.bincount(rate_comm[compared], minlength=len(self._comm_of))
        complete = np.bincount(inverse, minlength=len(pairs)) == types[pairs // procs]
        most = np.full(procs, -np.inf)
        np.maximum.at(most, pairs[complete] % procs, summed[complete])
        out.late[:] = np.where(np.isfinite(most), most, math.nan)
        error = np.sqrt(np.bincount(inverse, (span_rate[keys] * errors)[known] ** 2, len(pairs)))
        latest = np.flatnonzero(complete & (summed == most[pairs % procs]))
        out.comm[pairs[latest] % procs] = pairs[latest] // procs
        out.error[pairs[latest] % procs] = error[latest]
        out.types[pairs[latest] % procs] = types[pairs[latest] // procs]
        fewest = np.full(len(pairs), np.iinfo(I64).max, I64)
        np.minimum.at(fewest, inverse, counts[known])
        out.samples[pairs[latest] % procs] = fewest[latest]
        return out

    def _late_cells(self, rows: Rows, pos: np.ndarray[Any, Any], width: int, span: np.ndarray[Any, Any],
                    span_rate: np.ndarray[Any, Any],
                    lateness: _Lateness) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:  # fmt: skip
        """Sampled: per slice and process (slice x process number) its lateness in its latest communicator
        (:meth:`_lateness`) from the samples of the slice, and the time that covers (a slice with such a sample).
        Each sample weighs as much as the slices it stands for (a rarely sampled collective type stands for many), so
        the slices' mean is its lateness over the horizon; its difference from the communicator's median is bounded
        by that median (a peer's hiccup makes one sample a whole step long)."""
        procs = len(self._procs.keys)
        proc = self._span_procs()[span]
        median = lateness.key_median[self._span_rate.values[span]]
        mine = (proc >= 0) & (median == median)
        mine &= self._span_comm.values[span] == lateness.comm[np.maximum(proc, 0)]
        at = np.flatnonzero(mine)
        cell = pos[at] * procs + proc[at]
        covered = np.zeros(width * procs)
        covered[cell] = self.slice_us
        covered_slices = (covered.reshape(width, procs) > 0).sum(axis=0)
        samples = np.bincount(span[at], minlength=len(self._spans.keys))
        value = rows.total[at] / np.maximum(rows.n[at], 1)
        late = np.clip(median[at] - value, -median[at], median[at]) * span_rate[span[at]]
        weight = covered_slices[proc[at]] / samples[span[at]]
        cells = np.bincount(cell, late * weight, width * procs)
        return cells.reshape(width, procs), covered.reshape(width, procs)

    def _slice_shares(self, rows: Rows, pos: np.ndarray[Any, Any], width: int, span: np.ndarray[Any, Any],
                      span_proc: np.ndarray[Any, Any],
                      span_rate: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:  # fmt: skip
        """Sampled: every process's busy time in each slice of the horizon (slice x process number), each key's mean
        exec time in the slice times its (comm, coll, rank)'s op rate over the horizon (``span_rate``), and the time
        that covers (a slice where it has samples)."""
        slice_us = self.params.slice_s * 1e6
        procs, spans = len(self._procs.keys), len(self._spans.keys)
        spent = np.zeros((width, procs))
        bounds = np.searchsorted(pos, np.arange(width + 1))
        for i in range(width):
            at = slice(bounds[i], bounds[i + 1])
            n = np.bincount(span[at], rows.n[at], spans)
            total = np.bincount(span[at], rows.total[at], spans)
            seen = np.flatnonzero(n)
            spent[i] = np.bincount(span_proc[seen], total[seen] / n[seen] * span_rate[seen] * slice_us, procs)
        covered = np.where(spent > 0, slice_us, 0.0)
        return spent, covered

    @staticmethod
    def _tick_cells(rows: Rows, pos: np.ndarray[Any, Any], proc: np.ndarray[Any, Any], width: int,
                    procs: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:  # fmt: skip
        """Ring: per slice and process (slice x process number) the busy time of the ops its ticks in the slice wrote,
        and the time from its previous tick to its last one in the slice; a process's first slice in the horizon only
        sets where its time starts (its ops completed after a tick before the horizon)."""
        cell = pos * procs + proc
        busy = np.bincount(cell, rows.total, width * procs).reshape(width, procs)
        flat = np.full(width * procs, -1, I64)
        np.maximum.at(flat, cell, rows.hi_ts)
        last = flat.reshape(width, procs)
        filled = np.where(last >= 0, np.arange(width)[:, None], -1)
        latest = np.maximum.accumulate(filled, axis=0)  # per slice the last slice at or before it with a tick
        before = np.vstack([np.full((1, procs), -1, I64), latest[:-1]])
        columns = np.broadcast_to(np.arange(procs), (width, procs))
        counted = (last >= 0) & (before >= 0)
        covered = np.where(counted, last - last[np.maximum(before, 0), columns], 0).astype(F64)
        counted &= covered > 0
        return np.where(counted, busy, 0.0), np.where(counted, covered, 0.0)

    def _jobs(self, procs: Iterable[Proc]) -> list[list[Proc]]:
        """Processes grouped into jobs: connected through shared communicators (made again once the processes or
        the comms' members changed: a walk over every comm's members, each slice at a thousand nodes)."""
        key = (self._members_version, tuple(procs))
        if self._jobs_of is None or self._jobs_of[0] != key:
            self._jobs_of = (key, self._group(key[1]))
        return self._jobs_of[1]

    def _group(self, procs: Iterable[Proc]) -> list[list[Proc]]:
        return connected(list(procs), [list(comm.members.values()) for comm in self.comms.values()])

    def _stages(self, job: list[Proc]) -> list[list[Proc]]:
        """A job's processes that are comparable: connected by collectives other than point-to-point ones and those
        spanning the whole job. Pipeline stages run different layers (and their Send/Recv waits go unrecorded where
        the plugin records no P2P): each is judged apart when every one is large enough to judge; else the job."""
        if len(job) < 2 * self.params.min_group:
            return [job]
        key = (self._members_version, tuple(job))
        if self._stages_of[0] == key:
            return self._stages_of[1]
        in_job = set(job)
        links = [members for comm in self.comms.values() if not comm.p2p
                 and len(members := [m for m in comm.members.values() if m in in_job]) < len(job)]  # fmt: skip
        stages = connected(job, links)
        if len(stages) < 2 or min(map(len, stages)) < self.params.min_group:
            stages = [job]
        self._stages_of = (key, stages)
        return stages

    def _compute(
        self, rows: Rows, pos: np.ndarray[Any, Any], width: int, first: int, unjudged: set[Proc]
    ) -> list[Finding]:
        p = self.params
        shares, slices_of = self._shares(rows, pos, width, first)
        self._interval_us = _dump_interval(
            rows, self._span_procs()[self._agg_span.values[rows.key]], self._interval_us
        )
        out: list[Finding] = []
        rates = [ps.step_rate for ps in shares.values() if ps.step_rate > 0]
        self._step_rate = statistics.median(rates) if rates else 0.0
        if width * self.slice_us * self._step_rate < p.min_window_steps:
            return out  # too few steps yet for a stable share (start of a job, or a horizon still stretching)
        pool = self._pool_slices()
        for everyone, staged in ((stage, len(whole) - len(stage)) for whole in self._jobs(shares)
                                 for stage in self._stages(whole)):  # fmt: skip
            # a process missing records is neither judged nor part of its peers' yardstick
            job = [proc for proc in everyone if proc not in unjudged]
            skipped = sorted(set(everyone) - set(job))
            if len(job) < p.min_group:
                continue
            found = self._judge_stage(job, shares, slices_of, width, first, pool)
            if self.sampled > self.ring and (by_lateness := self._by_lateness(job, shares)):
                # sampled: what the estimated time in collectives misses, how late a process arrives tells
                named = {f.hostname for f in found if f.pid is None} | {f.key for f in found}
                found += [f for f in self._judge_stage(job, by_lateness, slices_of, width, first, pool, late=True)
                          if f.key not in named and f.hostname not in named]  # fmt: skip
            found = without_victims(found)
            if staged:
                for f in found:
                    f.evidence += (f"; compared only with its pipeline stage ({len(everyone)} processes connected by "
                                   "collectives other than Send/Recv and job-wide ones)")  # fmt: skip
                    cast(list[str], f.coverage["left_out"]).append(
                        f"{staged} processes of other pipeline stages (not comparable)"
                    )
            if skipped:
                note = (f"; {len(skipped)} process(es) not judged, their records incomplete (arrived at their agent "
                        f"after the window closed, or not in yet): " + ", ".join(f"{h} pid {pid}" for h, pid in skipped[:4])
                        + (" ..." if len(skipped) > 4 else ""))  # fmt: skip
                for f in found:
                    f.evidence += note
            out += found
        return out

    def _judge_stage(self, job: list[Proc], shares: dict[Proc, _ProcShare],
                     slices_of: Callable[[Proc, _ProcShare], tuple[list[float], list[float]]], width: int, first: int,
                     pool: int, late: bool = False) -> list[Finding]:  # fmt: skip
        """The findings of one stage's processes, judged by their ``shares`` (``late``: sampled, by lateness)."""
        p = self.params
        # the slices since the job's last process began (all of them, for a job older than the horizon), pooled
        # from the end so every process's pools cover the same time
        lived = min(shares[proc].lived for proc in job)
        if lived * self.slice_us * self._step_rate < p.min_window_steps:
            return []  # a job that began within the horizon: too few steps of it yet
        med, spread = _robust([shares[proc].share for proc in job], p.spread_floor * max(
            statistics.median(shares[proc].share for proc in job), 0.05))  # fmt: skip
        if med <= 0.05:
            return []  # collectives fill the whole time (overlapped or mis-timed): no compute to compare
        suspects = [proc for proc in job if not (
            shares[proc].ops < p.min_ops or shares[proc].share / med < 1 + p.min_excess
            or (shares[proc].share - med) / spread < p.z_threshold / 2)]  # fmt: skip
        if not suspects:
            return []
        for proc in job:
            busy_of, covered_of = slices_of(proc, shares[proc])
            busy_of, covered_of = busy_of[-lived:], covered_of[-lived:]
            # pooled from the end (so every process's pools cover the same time), each pool's share from the
            # time it covers: a pool without a tick of the process holds no measure (NaN)
            shares[proc].slices = _pooled(busy_of, covered_of, pool)
        # each pool against the same pool of the peers: their waits during a burst lower their share then
        pools = len(shares[job[0]].slices)
        slice_meds = [_nan_median([shares[proc].slices[i] for proc in job]) for i in range(pools)]
        resolution_s = pool * self.slice_us / 1e6
        suspected = set(suspects)
        # the peers' pool factors: how far one pool strays by noise alone (their spread), and how often a hiccup
        # makes one slow
        calm_of = [[x / m for x, m in zip(shares[proc].slices, slice_meds, strict=True) if x == x and m > 0]
                   for proc in job if proc not in suspected]  # fmt: skip
        calm = [x for of in calm_of for x in of]
        pool_sd = _robust(calm, 0.01)[1] if len(calm) >= 8 else math.inf
        # each peer's typical pool (a healthy GPU a few % slower than another), and its pools against that one
        typicals = [statistics.median(of) for of in calm_of if of]
        hiccups = [
            x / typical for of, typical in zip(filter(None, calm_of), typicals, strict=True) for x in of
        ]
        # strict: flagged on its own; leaning: as slow but with half the evidence, enough to join a node-wide
        # finding on its host (its processes cross the bar one by one while the node slows down)
        strict: dict[str, list[Finding]] = defaultdict(list)
        leaning: dict[str, list[Finding]] = defaultdict(list)
        for proc in suspects:
            ps = shares[proc]
            # by lateness, the evidence is as strong as its samples make it: its excess in their standard errors
            error = max(spread, ps.late_error) if late and ps.late_error == ps.late_error else spread
            factor, z, cost = ps.share / med, (ps.share - med) / error, ps.share - med
            factors = [
                x / m if x == x and m > 0 else math.nan for x, m in zip(ps.slices, slice_meds, strict=True)
            ]
            per_slice = [x for x in factors if x == x]
            # a one-step hiccup is not a straggler: the excess must span several pools and several steps
            hot = sum(x >= 1 + p.min_excess for x in per_slice)
            # by lateness, only a pool with a sample of the collective carrying its waits can read slow: where fewer
            # samples fell than the evidence asks for, each must (two at least)
            enough = max(2, min(_HOT_POOLS, ps.late_samples)) if late else _HOT_POOLS
            if hot < enough or hot * pool * self.slice_us * ps.step_rate < p.min_steps:
                continue
            remembered = self._remember(proc, factors, first + width, pool, late)
            chance = 0.0
            if late and ps.late_samples < p.pool_samples * pools:
                # by lateness, a pool without a sample of the collective carrying its waits reads on time: its
                # lateness is known only at the pace of those samples
                horizon_s = width * self.slice_us / 1e6
                pattern = PoolPattern(
                    "undetermined",
                    horizon_s * p.pool_samples / max(1, ps.late_samples),
                    why=f"its lateness is known only where a sample of the collective carrying its waits falls: "
                    f"{ps.late_samples} in {horizon_s:g} s",
                )
            else:
                memory = self._memory_pools(proc, first + width, pool, late)
                chance = self._chance(remembered, factors, typicals, hiccups, pool_sd, len(job), memory)
                pattern = PoolPattern.judge(remembered, pool_sd, p.min_excess, resolution_s)
            if pattern.kind != "intermittent":
                pattern = dataclasses.replace(pattern, burst=factor)
            f = self._proc_finding(proc, factor, z, cost, pattern, len(job), med, ps)
            f.chance = chance
            leaning[proc[0]].append(f)
            if z >= p.z_threshold and cost >= p.min_cost:
                strict[proc[0]].append(f)
        per_host: dict[str, int] = defaultdict(int)
        for proc in job:
            per_host[proc[0]] += 1
        found: list[Finding] = []
        for host, parts in strict.items():
            node = leaning[host]
            # node-wide slowness slows its processes alike; one far slower than the rest is a straggler itself
            alike = min(f.slowdown for f in node) - 1 >= 0.5 * (max(f.slowdown for f in node) - 1)
            if len(node) >= 2 and len(node) >= p.node_share * per_host[host] and alike:
                found.append(self._node_finding(host, node, per_host[host]))
            else:
                found += parts
        return found

    @staticmethod
    def _by_lateness(job: list[Proc], shares: dict[Proc, _ProcShare]) -> dict[Proc, _ProcShare]:
        """Sampled: the stage's processes judged by lateness (:meth:`_lateness`): each one's share outside
        collectives as its stage's median plus its lateness above the typical one (none where unknown), the excess
        being what its peers wait for it (its own estimate misses its peers' unrecorded waits, and spreads widely
        where rare collectives carry the waits); empty where no lateness is known."""
        lates = [x for proc in job if (x := shares[proc].late) == x]
        if not lates:
            return {}
        typical = statistics.median(lates)
        base = statistics.median(shares[proc].share for proc in job) - typical
        judged = {}
        for proc in job:
            ps = shares[proc]
            # a late rank waits for nobody: in none of its comms does it wait for the latest rank half as long as it
            # is late (a victim, late at its next collectives, waits in the comm of the rank it waited for); and it is
            # late beyond what its samples' spread explains
            late = ps.late if (ps.late == ps.late and ps.waits <= _VICTIM_WAIT * ps.late
                               and ps.late - typical >= _LATE_Z * ps.late_error) else typical  # fmt: skip
            judged[proc] = dataclasses.replace(ps, share=base + late, base=base, late=late)
        return judged

    def _remember(
        self, proc: Proc, factors: list[float], end: int, pool: int, late: bool = False
    ) -> list[float]:
        """Add a suspect's pool factors (ending at slice ``end``, exclusive) to its memory of the last
        ``pattern_memory_windows`` horizons, where the pools lie on the grid of ``pool`` slices; its memory's factors
        in time order, pools that overlap an earlier one left out (the pool length follows the step rate). ``late``:
        its factors by lateness (sampled), remembered apart."""
        memory = (self._late_pools if late else self._pools).setdefault(proc, {})
        if end % pool == 0:
            for i, x in enumerate(reversed(factors)):
                if x == x:
                    memory[end - i * pool] = (x, pool)
        oldest = end - self.params.pattern_memory_windows * self._horizon_now
        for at in [at for at in memory if at <= oldest]:
            del memory[at]
        kept, reached = [], -(2**62)
        for at in sorted(memory):
            x, length = memory[at]
            if at - length >= reached:
                kept.append(x)
                reached = at
        return kept or [x for x in factors if x == x]

    def _chance(self, factors: list[float], recent: list[float], typicals: list[float], hiccups: list[float],
                pool_sd: float, procs: int, pools: int) -> float:  # fmt: skip
        """How likely a suspect's excess comes by chance on one of the stage's ``procs`` processes (0: not weighed): a
        healthy GPU a few % slower than the rest with a noisy healthy job's hiccups clustering on it for a few seconds.
        Its pools are taken against its typical one (its ``factors``' median), or where that is slower than its peers'
        ``typicals`` by ``z_threshold`` of their spread (steady), against its peers' (a typical pool of a few is a
        hiccup where most of them are). Bursts: its pools that slow no rarer than the peers' pools against theirs
        (``hiccups``) make them; counted over its memory's time (``pools``), the pools between its spells as a
        suspect (not remembered) quiet: bursts must recur. Or an onset: the horizon's pools (``recent``, in time order)
        slow from one on, as rarely, at any of those ``pools`` places (a straggler that just began has its memory's
        quiet pools from before it, and no bursts to recur yet)."""
        p = self.params
        if len(hiccups) < 8 or pool_sd == math.inf:
            return 0.0  # too few peers' pools to know their hiccups
        typical = statistics.median(factors)
        med, spread = _robust(typicals, p.spread_floor)
        floor = 1 + max(p.min_excess, 4 * pool_sd)
        steady = typical >= 1 + p.min_excess and (typical - med) / spread >= p.z_threshold
        scale = 1.0 if steady else typical
        bursts = chance_slow([x / scale for x in factors], hiccups, floor, pools)
        own = [x / scale for x in recent if x == x]
        onset = next((i for i, x in enumerate(own) if x >= floor), len(own))
        since = chance_slow(own[onset:], hiccups, floor) * max(1, pools) if onset < len(own) else 1.0
        return min(1.0, procs * min(bursts, since))

    def _memory_pools(self, proc: Proc, end: int, pool: int, late: bool = False) -> int:
        """Pools of ``pool`` slices from the start of its memory's oldest pool to slice ``end``."""
        memory = (self._late_pools if late else self._pools).get(proc, {})
        start = min((at - length for at, (_, length) in memory.items()), default=end)
        return (end - start) // pool

    def _proc_finding(self, proc: Proc, factor: float, z: float, cost: float, pattern: PoolPattern, peers: int,
                      med: float, ps: _ProcShare) -> Finding:  # fmt: skip
        memberships = self._memberships().get(proc, [])
        comm_ids = list(dict.fromkeys(comm.comm_id for comm, _ in memberships))
        # named after its node's comm (where it is the one late rank among its neighbours), the largest if several
        comm, rank = min(memberships, key=lambda cr: (-sum(h == proc[0] for h, _ in cr[0].members.values()),
                                                      -len(cr[0].members), cr[0].label))  # fmt: skip
        if pattern.kind == "intermittent":
            shape = (
                f"; intermittent at {pattern.resolution_s:g} s resolution: slow in {pattern.duty:.0%} of the "
                f"time, {pattern.burst:.2f}x when slow (bursts shorter than that are averaged over it)"
            )
        elif pattern.kind == "steady":
            shape = f"; steady at {pattern.resolution_s:g} s resolution"
        else:
            why = (
                pattern.why or f"pools of {pattern.resolution_s:g} s too few or too noisy against the excess"
            )
            shape = f"; steady or intermittent undetermined ({why})"
        evidence = (
            f"computes {factor:.2f}x longer between collectives than the median of its {peers - 1} peers "
            f"({med * factor:.0%} of the time outside recorded collectives vs {med:.0%}; lateness {z:.1f} robust "
            f"sd); costs the job {cost:.1%} of its time{shape}; arrives last in its {len(memberships)} comm(s), "
            f"e.g. rank {rank}/{len(comm.members)} of {self.describe(comm)}"
        )
        if ps.base == ps.base:
            evidence += (f"; sampled capture: judged by how much later than the other ranks of its communicators it "
                         f"arrives (their exec times longer than its own by {ps.late:.1%} of the time, median of each "
                         "rank's samples against its communicator's, times the op rate), not by its estimated time "
                         "in collectives")  # fmt: skip
        outside = ps.outside if ps.outside == ps.outside else ps.share
        coverage = self._coverage(1 - med, 1 - outside, ps.recorded)
        coverage["compared_by"] = "lateness" if ps.base == ps.base else "time outside collectives"
        if ps.base == ps.base:
            coverage["compared_collectives"] = ps.late_types
        return Finding(proc[0], proc[1], "compute", comm.label, rank, factor, 1.0, evidence, cost=cost,
                       duty_cycle=pattern.duty, burst_slowdown=pattern.burst, z=z, comm_ids=comm_ids,
                       pattern=pattern.kind, pattern_resolution_s=pattern.resolution_s, pattern_note=shape,
                       coverage=coverage)  # fmt: skip

    def _coverage(self, job_recorded: float, proc_recorded: float, ops_written: float) -> dict[str, object]:
        """What a compute finding's data covered: the share of time in recorded ops (the process's, its peers'
        median), the dump interval, the capture model, the share of numbered ops the plugin wrote, and what the
        plugin leaves out (counted as compute by this method)."""
        left_out = []
        if self.sampled > self.ring:
            left_out.append("Send/Recv: sampled plugins (2.28/2.29) record no point-to-point ops, so pipeline waits "
                            "count as compute")  # fmt: skip
            left_out.append(
                "all but the last op per communicator at each dump tick (time in collectives estimated)"
            )
        elif ops_written < 0.99:
            left_out.append(f"{1 - ops_written:.0%} of its numbered ops not written (dropped from the plugin's ring, "
                            "or filtered: under 8 KiB or without kernel timing); their time counts as compute")  # fmt: skip
        return {
            "capture_model": self.capture_model,
            "dump_interval_s": round(self._interval_us / 1e6, 3),
            "recorded_share": round(proc_recorded, 3),
            "peers_recorded_share": round(job_recorded, 3),
            "ops_written_share": round(ops_written, 3),
            "left_out": left_out,
        }

    @staticmethod
    def _node_finding(host: str, parts: list[Finding], total: int) -> Finding:
        slowdown = statistics.median(f.slowdown for f in parts)
        evidence = (
            f"{len(parts)} of {total} processes on {host} compute {slowdown:.2f}x longer between collectives than "
            f"their peers (node-wide compute slowness: CPU, power or thermal); e.g. pid {parts[0].pid}: "
            f"{parts[0].evidence}"
        )
        kinds = [f.pattern for f in parts]
        return Finding(host, None, "compute", None, None, slowdown, 1.0, evidence,
                       cost=max(f.cost for f in parts), duty_cycle=statistics.median(f.duty_cycle for f in parts),
                       burst_slowdown=statistics.median(f.burst_slowdown for f in parts),
                       z=statistics.median(f.z for f in parts),
                       comm_ids=sorted({cid for f in parts for cid in f.comm_ids}),
                       pattern=max(set(kinds), key=kinds.count), pattern_resolution_s=parts[0].pattern_resolution_s,
                       coverage=parts[0].coverage, chance=statistics.median(f.chance for f in parts))  # fmt: skip


def connected(procs: list[Proc], links: Iterable[list[Proc]]) -> list[list[Proc]]:
    """``procs`` grouped by the ``links`` (lists of processes that belong together; others in them are ignored), each
    group in the order of ``procs``: union-find with path halving."""
    parent = {proc: proc for proc in procs}

    def find(x: Proc) -> Proc:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for link in links:
        members = [m for m in link if m in parent]
        for other in members[1:]:
            parent[find(other)] = find(members[0])
    groups: dict[Proc, list[Proc]] = defaultdict(list)
    for proc in procs:
        groups[find(proc)].append(proc)
    return list(groups.values())
