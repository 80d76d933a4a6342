"""The one straggler engine (design §6): pure, incremental, used online by the aggregator and offline by
``ranksight analyze``.

Why not "the rank with the lowest bandwidth": a rank's ``exec_time`` includes its wait for the last rank to arrive, so a
late rank (compute straggler) shows the *shortest* time of its group while its peers look slow.

Inputs are per-slice aggregates (``slice_s`` of dump time): per (comm, coll, size, rank) the count, sum and minimum of
exec times, and the span of ``coll_sn`` seen. Records are folded into them once (:meth:`add`), so the engine never
re-reads a record; the agents' per-window summaries (``inspector_summary``) carry the same aggregates per slice and feed
them in with :meth:`StragglerEngine.add_summary`.

1. Compute. Every process runs the same steps, so over a stretch of time its time *outside* collectives (its compute
   share, ``1 - sum(exec time x op rate)``) is its own compute: a victim's waits and a slow link's transfers show up
   inside its collectives, not outside them. A process whose compute share is well above the job's median is a compute
   straggler; the ratio is its slowdown (its compute between collectives against its peers'), the difference the share
   of the job's time it costs. Propagation cannot create one: a late rank's victims have *less* time outside collectives.
   Ring records give exact op counts; sampled records give the mean exec time of each (comm, coll, rank) and the op rate
   from the ``coll_sn`` span, in both cases per process and time window.
2. Communication. The transfer time of a comm is its shortest exec time (the last arriver waits for nobody), turned
   into bus bandwidth. A cross-node comm whose bandwidth is well below comms of the same shape, or its own best in the
   retained past, is slow; the nodes common to the slow comms and absent from the fast ones are the culprits.
3. Sliding evaluation. Every completed slice, the last ``window_s`` of slices is judged. A candidate is confirmed by
   the strength of its evidence: the robust z-scores of consecutive flagged evaluations add up to ``evidence_z`` (a
   strong straggler confirms at once, a weak one within ``confirm_windows`` evaluations); it resolves when it is no
   longer flagged. A rank slow in bursts shows as slices with and without excess: its duty cycle, burst slowdown and
   average cost are reported.

How it is held (a thousand nodes x 8 GPUs is some 25,000 (comm, coll, size, rank) keys in every slice): keys are
numbered, and a slice is a few NumPy arrays, one row per key number (its count, sum and minimum of exec times, and its
``coll_sn`` span with the dump times that bound it), about 1.5 MB at that size. Folding a record or a summary appends
its rows to a ledger (Python arrays, a few appends per summary); each evaluation first merges the ledger into its slices
(sorted and reduced per key in C), then judges horizons by concatenating their slices and grouping the rows by process,
communicator or key number (``bincount`` and ``ufunc.at``), never by a Python loop over keys.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import operator
import statistics
from array import array
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import chain, compress
from typing import Any, ClassVar, Generic, Literal, NamedTuple, TypeVar, cast

import numpy as np

from ranksight.agent.collectors.inspector.parse import bandwidths_gbs
from ranksight.aggregator.analysis.robust import MAD_TO_SIGMA, median_mad
from ranksight.schemas.records import InspectorRecord, InspectorSummaryRecord

Kind = Literal["compute", "communication"]
Proc = tuple[str, int]  # (hostname, pid): rank numbers are per communicator, a process is not
AggKey = tuple[str, str, int, int]  # (comm, coll, size, rank)
SpanKey = tuple[str, str, int]  # (comm, coll, rank): coll_sn counts per collective type (p2p_sn per process)
# (comm, coll, size): a comm's transfer time is its shortest exec time of any rank
LowKey = tuple[str, str, int]
K = TypeVar("K", bound=Hashable)
# numbered keys nobody holds any more (ended jobs, sizes that came and went) beyond this many, and more than the live
# ones: everything is numbered again
MAX_DEAD_KEYS = 4096
# a summary's per-slice lists, in the order of the rows they make (:class:`_Ledger`)
_SUMMARY_LISTS = tuple(
    operator.attrgetter(name)
    for name in ("slice_index", "slice_count", "slice_exec_sum_us", "slice_exec_min_us", "slice_sn_lo",
                 "slice_sn_lo_ts_us", "slice_sn_hi", "slice_sn_hi_ts_us")
)  # fmt: skip
# the dump interval is read from the dump times of this many processes (every process's thread ticks at it)
_INTERVAL_PROCS = 64
# a slice index computed from a window beyond this is refused (64-bit arithmetic)
_MAX_SLICE = 2.0**62


@dataclass(frozen=True)
class StragglerParams:
    window_s: float = 6.0  # sliding evaluation horizon
    slice_s: float = 0.5  # records are summed per slice
    judge_every: int = 1  # online, the horizon is judged at every this many slices (offline at every slice)
    confirm_windows: int = 3  # most consecutive flagged evaluations a weak finding needs
    catch_up_windows: int = 4  # online, late records and gaps are judged again this many horizons back
    clock_ahead_s: float = 5.0  # online, records dumped further past clock_us are not judged
    evidence_z: float = 12.0  # summed robust z that confirms a finding
    z_threshold: float = 4.0
    min_excess: float = 0.05  # compute share above the job's median (as a ratio) to flag a process
    min_cost: float = 0.02  # share of the job's time a compute finding must cost
    spread_floor: float = 0.01  # fraction of the median compute share
    min_ops: int = (
        20  # ops of a process in the horizon before it is judged (a one-step hiccup is not a trend)
    )
    min_group: int = 4  # processes of a job needed to judge one against the others
    min_steps: float = 3.0  # steps the excess must span (with long steps, one hiccup fills several slices)
    min_window_steps: float = 60.0  # steps the horizon must hold (long steps stretch it beyond window_s)
    comm_slow_ratio: float = 1.3
    pool_samples: int = 3  # sampled: dump ticks per pool of the compute-share series
    sampled_window_samples: int = 24  # sampled: dump ticks the horizon holds (one sample per comm each)
    confirm_share: float = 0.5  # share of the horizon a weak finding must stay flagged before it is confirmed
    pattern_memory_windows: int = 8  # horizons of a suspect's pools kept to tell steady from intermittent
    max_stretch: int = (
        20  # the horizon is stretched (long steps, long dump intervals) to at most this many windows
    )
    node_share: float = 0.5  # share of a host's processes flagged before the host itself is reported


@dataclass
class Finding:
    hostname: str
    pid: int | None
    kind: Kind
    comm: str | None
    rank: int | None
    slowdown: float
    confidence: float
    evidence: str
    first_ts_us: int = 0
    last_ts_us: int = 0
    cost: float = 0.0  # share of the job's time lost to this finding
    duty_cycle: float = 1.0  # share of the time the fault is active (intermittent < 1)
    burst_slowdown: float = 1.0
    z: float = 0.0
    comms: list[dict[str, object]] = field(default_factory=list)  # communication: slow comms with their times
    nodes: list[str] = field(default_factory=list)
    comm_ids: list[str] = field(default_factory=list)  # its communicators (RAS knows a job's by these hashes)
    # steady / intermittent / undetermined, judged on pools of pattern_resolution_s (faster alternation averages out)
    pattern: Pattern = "undetermined"  # (communication findings are not judged for it)
    pattern_resolution_s: float = 0.0
    coverage: dict[str, object] = field(
        default_factory=dict
    )  # what the data covered (Finding.as_dict documents it)

    @property
    def key(self) -> tuple[str, int | None, Kind]:
        return self.hostname, self.pid, self.kind

    def as_dict(self) -> dict[str, object]:
        return {
            "hostname": self.hostname,
            "pid": self.pid,
            "kind": self.kind,
            "comm": self.comm,
            "rank": self.rank,
            "slowdown": round(self.slowdown, 3),
            "confidence": round(self.confidence, 3),
            "evidence": self.evidence,
            "cost": round(self.cost, 4),
            "duty_cycle": round(self.duty_cycle, 3),
            "burst_slowdown": round(self.burst_slowdown, 3),
            "lateness_z": round(self.z, 1),
            "slow_comms": self.comms,
            "pattern": self.pattern,
            "pattern_resolution_s": round(self.pattern_resolution_s, 3),
            "coverage": self.coverage,
        }


@dataclass
class Analysis:
    records: int
    operations: int
    capture_model: Literal["ring", "sampled", "mixed"]
    stragglers: list[Finding]
    bad_lines: int = 0
    bw_mismatches: int = 0

    def as_dict(self) -> dict[str, object]:
        return {
            "records": self.records,
            "operations": self.operations,
            "capture_model": self.capture_model,
            "stragglers": [f.as_dict() for f in self.stragglers],
            "bad_lines": self.bad_lines,
        }


@dataclass
class _Comm:
    comm_id: str
    label: str  # comm_name when the plugin gives one, else the hash id
    number: int  # in the engine's numbering of comms
    members: dict[int, Proc] = field(default_factory=dict)
    p2p: bool = False  # Send/Recv records seen on it
    _hosts: set[str] | None = None  # made again once its members changed

    @property
    def hosts(self) -> set[str]:
        if self._hosts is None:
            self._hosts = {host for host, _ in self.members.values()}
        return self._hosts

    def join(self, rank: int, proc: Proc) -> None:
        self.members[rank] = proc
        self._hosts = None


class _Index(Generic[K]):
    """Keys numbered in order of first use; ``reset`` numbers them again from nothing (``version`` says which
    numbering an array made from them belongs to)."""

    def __init__(self) -> None:
        self.ids: dict[K, int] = {}
        self.keys: list[K] = []
        self.version = 0

    def number(self, key: K) -> int:
        got = self.ids.get(key)
        if got is None:
            got = self.ids[key] = len(self.keys)
            self.keys.append(key)
        return got

    def reset(self) -> None:
        self.ids, self.keys = {}, []
        self.version += 1


class _Column:
    """A NumPy array of one value per key number, grown as keys are numbered."""

    def __init__(self, dtype: Any, fill: float | int) -> None:
        self.dtype, self.fill = dtype, fill
        self.values = np.full(64, fill, dtype)
        self.size = 0

    def append(self, value: float | int) -> None:
        if self.size == len(self.values):
            self.values = np.concatenate([self.values, np.full(len(self.values), self.fill, self.dtype)])
        self.values[self.size] = value
        self.size += 1

    @property
    def view(self) -> np.ndarray[Any, Any]:
        return self.values[: self.size]


_I64 = np.int64
_F64 = np.float64


class _Rows(NamedTuple):
    """Aggregates by key number (``key``: an aggregate key's number): per row the count, sum and minimum of exec times
    and the ``coll_sn`` span (its lowest ``lo`` with the earliest dump time ``lo_ts`` among those, its highest ``hi``
    with the earliest ``hi_ts``). A slice holds one row per key, sorted; a horizon is its slices' rows one after the
    other, ``pos`` the slice each row is in."""

    key: np.ndarray[Any, Any]
    n: np.ndarray[Any, Any]
    total: np.ndarray[Any, Any]
    low: np.ndarray[Any, Any]
    lo: np.ndarray[Any, Any]
    lo_ts: np.ndarray[Any, Any]
    hi: np.ndarray[Any, Any]
    hi_ts: np.ndarray[Any, Any]

    @classmethod
    def empty(cls) -> _Rows:
        return cls(*(np.empty(0, _F64 if name in ("total", "low") else _I64) for name in cls._fields))

    def take(self, where: Any) -> _Rows:
        return _Rows(*(column[where] for column in self))

    @classmethod
    def joined(cls, parts: list[_Rows]) -> _Rows:
        if len(parts) == 1:
            return parts[0]
        return cls(*(np.concatenate(columns) for columns in zip(*parts, strict=True)))

    def reduced(self) -> _Rows:
        """One row per key: counts and sums added, minima kept, spans merged as :class:`SnSpan` merges them."""
        by_lo = np.lexsort((self.lo_ts, self.lo, self.key))
        keys = self.key[by_lo]
        starts = _starts(keys)
        by_hi = np.lexsort((self.hi_ts, ~self.hi, self.key))  # highest hi first (~ reverses without overflow)
        return _Rows(keys[starts], np.add.reduceat(self.n[by_lo], starts),
                     np.add.reduceat(self.total[by_lo], starts), np.minimum.reduceat(self.low[by_lo], starts),
                     self.lo[by_lo][starts], self.lo_ts[by_lo][starts], self.hi[by_hi][starts],
                     self.hi_ts[by_hi][starts])  # fmt: skip


_EMPTY = _Rows.empty()
_DEAD = np.iinfo(_I64).max  # a forgotten key's newest slice: never forgotten again


class _Ledger:
    """What was folded since the last evaluation, as it came: per fold (a record, or a summary) the aggregate key's
    number, the process's number, how many rows, and the window's start and slice length (µs); per row its slice of
    that window and the :class:`_Rows` values. Plain arrays of machine numbers, appended a batch of summaries at a time
    in C: which engine slice a row lands in is computed at :meth:`StragglerEngine._absorb`, for all rows at once."""

    PER_FOLD = ("key", "proc", "rows", "start", "step")
    PER_ROW = ("index", "n", "total", "low", "lo", "lo_ts", "hi", "hi_ts")

    def __init__(self) -> None:
        self.folds: dict[str, array[Any]] = {name: array("q") for name in self.PER_FOLD}
        self.rows: dict[str, array[Any]] = {
            name: array("d" if name in ("total", "low") else "q") for name in self.PER_ROW
        }

    def __len__(self) -> int:
        return len(self.folds["key"])

    def fold(self, folds: Sequence[Sequence[int]], rows: Sequence[Iterable[Any]]) -> bool:
        """Append ``folds`` (a column per :attr:`PER_FOLD` name) and ``rows`` (likewise, :attr:`PER_ROW`); False, and
        nothing appended, when a value does not fit in 64 bits."""
        sizes = [(column, len(column)) for column in (*self.folds.values(), *self.rows.values())]
        try:  # from lists: a third faster than extending from an iterator
            for name, per_fold in zip(self.PER_FOLD, folds, strict=True):
                self.folds[name].fromlist(list(per_fold))
            for name, per_row in zip(self.PER_ROW, rows, strict=True):
                self.rows[name].fromlist(list(per_row))
        except OverflowError:
            for column, size in sizes:
                del column[size:]
            return False
        return True

    def taken(self) -> tuple[dict[str, np.ndarray[Any, Any]], dict[str, np.ndarray[Any, Any]]]:
        """The folds and the rows as NumPy arrays; the ledger starts over."""
        folds, rows, fresh = self.folds, self.rows, _Ledger()
        self.folds, self.rows = fresh.folds, fresh.rows
        return ({name: _numpy(values) for name, values in folds.items()},
                {name: _numpy(values) for name, values in rows.items()})  # fmt: skip


def _numpy(values: array[Any]) -> np.ndarray[Any, Any]:
    kind = _F64 if values.typecode == "d" else _I64
    return np.frombuffer(values, kind) if len(values) else np.empty(0, kind)


def _bus_bytes(op: str, n_ranks: int, size: int) -> float:
    """A collective's bus bytes per rank: its bus bandwidth were it to take one second."""
    one_second = bandwidths_gbs(op, n_ranks, size, 1e6)
    return one_second[1] * 1e9 if one_second else 0.0


def _robust(values: list[float], floor: float) -> tuple[float, float]:
    med, mad = median_mad(values)
    return med, max(MAD_TO_SIGMA * mad, floor)


def _starts(keys: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Where each run of equal values of sorted ``keys`` (not empty) starts."""
    return np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))


def _pooled(busy: list[float], covered: list[float], pool: int) -> list[float]:
    """Compute shares of consecutive pools of ``pool`` slices, pooled from the end: each pool's busy time against the
    time it covers (NaN: a pool that covers none, no tick of the process in it)."""
    out = []
    for end in range(len(busy), 0, -pool):
        start = max(0, end - pool)
        time = math.fsum(covered[start:end])
        out.append(1 - math.fsum(busy[start:end]) / time if time > 0 else math.nan)
    return out[::-1]


def _dump_interval(rows: _Rows, proc: np.ndarray[Any, Any], known: float) -> float:
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


def _bytes(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:g} {unit}"
    return f"{size} B"


def _nan_median(values: Iterable[float]) -> float:
    kept = [x for x in values if x == x]
    return statistics.median(kept) if kept else math.nan


Pattern = Literal["steady", "intermittent", "undetermined"]


@dataclass(frozen=True)
class _Pattern:
    """Steady or intermittent, as far as pools of ``resolution_s`` tell: a fault that comes and goes faster than that
    averages out within each pool and cannot be told from a steady one; pools too noisy against the excess, or too
    few, tell nothing ("undetermined")."""

    kind: Pattern
    resolution_s: float
    duty: float = 1.0
    burst: float = 1.0

    average: float = 1.0  # the mean factor from its first slow pool to its last

    MIN_POOLS: ClassVar[int] = 6

    @classmethod
    def judge(cls, factors: list[float], pool_sd: float, min_excess: float, resolution_s: float) -> _Pattern:
        """``factors``: the process's compute share per pool against its peers', in time order (a longer memory
        than one horizon: bursts longer than a horizon fill some horizons whole); ``pool_sd`` how far a healthy
        process's pool strays by noise alone. Only the pools from its first slow one to its last count: quiet pools
        before an onset or after a fault ended say nothing of bursts, quiet pools between slow ones do."""
        above = sorted(x for x in factors if x >= 1 + max(min_excess, 4 * pool_sd))
        if not above:
            return cls("undetermined", resolution_s)
        # slow: at least half the typical excess of its slow pools (a hiccup before an onset is not a burst)
        hot_at = 1 + max(min_excess, 4 * pool_sd, (above[(3 * len(above)) // 4] - 1) / 2)
        slow = [i for i, x in enumerate(factors) if x >= hot_at]
        if len(slow) < 2:
            return cls("undetermined", resolution_s)
        span = factors[slow[0] : slow[-1] + 1]
        average = statistics.fmean(span)
        # a burst's edges fall inside pools, which then read part slow: the slow pools' upper quartile is its size
        slow_factors = sorted(x for x in span if x >= hot_at)
        burst = slow_factors[min(len(slow_factors) - 1, (3 * len(slow_factors)) // 4)]
        if len(span) < cls.MIN_POOLS or burst - 1 < 4 * pool_sd:
            return cls("undetermined", resolution_s, burst=burst, average=average)
        quiet = sum(x < 1 + 2 * pool_sd for x in span)
        if quiet >= max(2, 0.15 * len(span)):
            # whole cycles: from its first slow pool to the start of its last run of slow pools
            last_run = slow[-1]
            while last_run - 1 >= slow[0] and factors[last_run - 1] >= hot_at:
                last_run -= 1
            cycles = factors[slow[0] : last_run] or span
            average = statistics.fmean(cycles)
            duty = min(1.0, max(0.0, (average - 1) / (burst - 1)))
            return cls("intermittent", resolution_s, duty, burst, average)
        if quiet <= 0.05 * len(span):
            return cls("steady", resolution_s, burst=burst, average=average)
        return cls("undetermined", resolution_s, burst=burst, average=average)


@dataclass
class _Candidate:
    """A finding being confirmed: evidence added per consecutive flagged evaluation."""

    finding: Finding
    evidence: float = 0.0
    evals: int = 0
    confirmed: bool = False
    flagged_evals: int = 0
    seen_evals: int = 0


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


class StragglerEngine:
    """Feed records with :meth:`add`; :meth:`evaluate` judges every slice completed since the last call (online);
    :meth:`analyze` does that to the end and lists every finding confirmed on the way (offline). Holds no clock (online,
    the caller sets ``clock_us``) and does no I/O."""

    def __init__(self, params: StragglerParams | None = None, offline: bool = True) -> None:
        """``offline``: also keep what only :meth:`analyze` reports (the distinct operations, the findings that
        resolved), which grows with the job: the live engine keeps neither."""
        self.params = p = params or StragglerParams()
        self.offline = offline
        self.slice_us = max(1, int(p.slice_s * 1e6))
        self.horizon = max(1, round(p.window_s / p.slice_s))
        self.records = self.ring = self.sampled = self.bw_mismatches = 0
        self.comms: dict[str, _Comm] = {}
        self.slices: dict[int, _Rows] = {}
        self.proc_last: dict[Proc, int] = {}  # latest dump time of each process (µs)
        # the first slice holding each process's records: before it the process did not exist (a job that started
        # within the horizon), which is not time spent computing
        self.proc_first: dict[Proc, int] = {}
        self.evaluated: int | None = None  # last slice judged
        # online, the caller's clock (µs): records dumped more than clock_ahead_s past it are not judged but counted in
        # ``ahead``. One host's clock running ahead would otherwise make its processes the newest, the only ones
        # complete_slice waits for: the job's real slices judged as stale and dropped, its stragglers never named.
        self.clock_us: int | None = None
        self.ahead = 0
        self.candidates: dict[tuple[str, int | None, Kind], _Candidate] = {}
        # per culprit, the first and the latest slice whose judgement flagged it, through gaps of half a horizon (a
        # weak finding flickers in and out, under sampled capture most)
        self._flagged: dict[tuple[str, int | None, Kind], tuple[int, int]] = {}
        self.history: list[Finding] = []  # confirmed findings that resolved (offline)
        self._ops: set[tuple[str, str, int]] = set()  # (offline)
        self._step_rate = 0.0  # steps per µs of the job, from the last evaluation
        # suspects' pool factors by the slice their pool ends at, with the pool's length
        self._pools: dict[Proc, dict[int, tuple[float, int]]] = {}
        self._interval_us = 0.0  # the plugins' dump interval (µs), from the last evaluation's dump times
        self._horizon_now = self.horizon  # slices judged, stretched for long steps
        self._late_from: int | None = None  # earliest judged slice that received records since
        # slices (first, last) of each process that miss records its agent got after their window had closed
        self._incomplete: dict[Proc, list[tuple[int, int]]] = defaultdict(list)
        # bumped when a rank of a comm gets another process or a comm is forgotten (its ranks' processes change)
        self._members_version = 0
        self._jobs_of: tuple[tuple[int, tuple[Proc, ...]], list[list[Proc]]] | None = None
        self._stages_of: tuple[tuple[int, tuple[Proc, ...]] | None, list[list[Proc]]] = (None, [])
        self._memberships_of: tuple[int, dict[Proc, list[tuple[_Comm, int]]]] = (-1, {})
        self._ledger = _Ledger()
        self._procs: _Index[Proc] = _Index()  # numbered again when processes are forgotten
        self._numberings = 0
        self._span_proc: tuple[tuple[int, int, int], np.ndarray[Any, Any]] = ((-1, -1, -1), np.empty(0, _I64))
        self._comm_sized: tuple[tuple[int, int], tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]] = (
            (-1, -1),
            (np.empty(0, _I64), np.empty(0, _I64)),
        )
        self._number_keys()

    def _number_keys(self) -> None:
        """Fresh numberings of the keys (:meth:`_renumber` fills them again with the live ones)."""
        self._numberings += 1
        # aggregate keys, and per number: its (comm, coll, rank), its (comm, coll, size), its comm and the newest slice
        # holding it (-1: none yet; _DEAD once forgotten)
        self._aggs: _Index[AggKey] = _Index()
        self._agg_span, self._agg_low = _Column(_I64, -1), _Column(_I64, -1)
        self._agg_comm, self._agg_last = _Column(_I64, -1), _Column(_I64, -1)
        # (comm, coll, rank), and per number: its comm, its rank and its (comm, coll) (whose op rate it shares)
        self._spans: _Index[SpanKey] = _Index()
        self._span_comm, self._span_rank, self._span_rate = (
            _Column(_I64, -1),
            _Column(_I64, -1),
            _Column(_I64, -1),
        )
        self._rate_keys: _Index[tuple[str, str]] = _Index()
        # (comm, coll, size), and per number: the live aggregate keys of it (the last one gone, it goes too), its comm,
        # coll (numbered in _colls) and size, its bus bytes per rank (0: point-to-point, or none) and its own best bus
        # bandwidth so far (NaN: none)
        self._lows: _Index[LowKey] = _Index()
        self._colls: _Index[str] = _Index()
        self._low_aggs, self._low_comm = _Column(_I64, 0), _Column(_I64, -1)
        self._low_op, self._low_size = _Column(_I64, -1), _Column(_I64, 0)
        self._low_bus, self._low_best = _Column(_F64, 0.0), _Column(_F64, math.nan)
        # comms by number (None: forgotten) and the newest slice holding each
        self._comm_of: list[_Comm | None] = []
        self._comm_last = _Column(_I64, -1)

    # -- input ----------------------------------------------------------------------------------------------------
    def _latest_us(self) -> int | None:
        """The latest dump time judged (None: no clock, offline)."""
        if self.clock_us is None:
            return None
        return self.clock_us + int(self.params.clock_ahead_s * 1e6)

    def add(self, rec: InspectorRecord) -> None:
        latest = self._latest_us()
        if latest is not None and rec.dump_ts_us > latest:
            self.ahead += 1
            return
        self._count(rec.capture_model, 1, int(rec.bw_mismatch))
        comm = self._member(rec.comm_id, rec.comm_name, rec.rank, (rec.hostname, rec.pid), rec.dump_ts_us)
        if rec.exec_time_us is None or rec.exec_time_us <= 0:
            return
        index = rec.dump_ts_us // self.slice_us
        if self.evaluated is not None and index <= self.evaluated - self._reach():
            return  # far older than what is judged now: nothing to add to
        p2p = rec.op_kind == "p2p"
        comm.p2p |= p2p
        if self.offline:
            self._ops.add((rec.comm_id, rec.op, rec.sn if not p2p else -rec.sn - 1))
        key = self._agg_number(comm, (rec.comm_id, rec.op, rec.msg_size_bytes, rec.rank), p2p, rec.n_ranks)
        folds = ([key], [self._procs.number((rec.hostname, rec.pid))], [1], [rec.dump_ts_us], [0])
        exec_us, sn, ts = rec.exec_time_us, rec.sn, rec.dump_ts_us
        self._ledger.fold(folds, ([0], [1], [exec_us], [exec_us], [sn], [ts], [sn], [ts]))

    def add_summary(self, s: InspectorSummaryRecord) -> None:
        self.add_summaries([s])

    def add_summaries(self, summaries: Sequence[InspectorSummaryRecord]) -> None:
        """Fold agents' window summaries (:mod:`agent.collectors.inspector.summary`): their per-slice aggregates are
        the ones :meth:`add` builds from the raw records, so the judgement is the same."""
        latest = self._latest_us()
        if latest is not None:
            ahead = [s for s in summaries if max(s.last_dump_ts_us, s.window_start_us) > latest]
            if ahead:
                self.ahead += sum(s.count for s in ahead)
                summaries = [s for s in summaries if max(s.last_dump_ts_us, s.window_start_us) <= latest]
        keys, procs = [], []
        for s in summaries:
            self._count(s.capture_model, s.count, s.bw_mismatches)
            # its latest record, as with raw records (a window's end may lie past the end of the job)
            comm = self._member(s.comm_id, s.comm_name, s.rank, (s.hostname, s.pid), s.last_dump_ts_us)
            if s.late:
                # records that reached the agent after their window closed (a starved host reading its dumps behind):
                # the window before this one lacks them, and without them the process looks idle, i.e. computing
                start = s.window_start_us // self.slice_us
                self._incomplete[(s.hostname, s.pid)].append(
                    (start - max(1, s.window_us // self.slice_us), start - 1)
                )
            size = (
                s.bytes // s.count if s.count else s.size_bucket
            )  # the exact size when the bucket holds one
            comm.p2p |= s.op_kind == "p2p"
            keys.append(
                self._agg_number(comm, (s.comm_id, s.op, size, s.rank), s.op_kind == "p2p", s.n_ranks)
            )
            procs.append(self._procs.number((s.hostname, s.pid)))
        lists = [list(map(read, summaries)) for read in _SUMMARY_LISTS]
        widths = list(map(len, lists[0]))
        if any(list(map(len, column)) != widths for column in lists[1:]):
            # parallel lists of other lengths: as far as all go
            widths = list(map(min, *(map(len, column) for column in lists)))
            lists = [
                [values[:width] for values, width in zip(column, widths, strict=True)] for column in lists
            ]
        starts = [s.window_start_us for s in summaries]
        steps = [s.slice_us for s in summaries]
        self._ledger.fold(
            (keys, procs, widths, starts, steps), [chain.from_iterable(column) for column in lists]
        )

    def _count(self, capture_model: str, records: int, bw_mismatches: int) -> None:
        self.records += records
        if capture_model == "ring":
            self.ring += records
        else:
            self.sampled += records
        self.bw_mismatches += bw_mismatches

    def _member(self, comm_id: str, name: str | None, rank: int, proc: Proc, dump_ts_us: int) -> _Comm:
        comm = self.comms.get(comm_id)
        if comm is None:
            # the plugin writes "unknown" for a communicator created without a name: such a comm goes by its id
            named = name if name and name != "unknown" else comm_id
            comm = self.comms[comm_id] = _Comm(comm_id, named, len(self._comm_of))
            self._comm_of.append(comm)
            self._comm_last.append(-1)
        if comm.members.get(rank) != proc:
            comm.join(rank, proc)
            self._members_version += 1
        if dump_ts_us > self.proc_last.get(proc, -1):  # -1: a dump time of 0 makes the process known too
            self.proc_last[proc] = dump_ts_us
        return comm

    def _agg_number(self, comm: _Comm, key: AggKey, p2p: bool, n_ranks: int) -> int:
        number = self._aggs.ids.get(key)
        if number is None:
            # Send/Recv: the bytes moved, so a point-to-point comm's bandwidth is its algorithm bandwidth
            number = self._register(
                comm, key, lambda: float(key[2]) if p2p else _bus_bytes(key[1], n_ranks, key[2])
            )
        return number

    def _register(self, comm: _Comm, key: AggKey, bus: Callable[[], float], best: float = math.nan) -> int:
        """Number an aggregate key, and the keys it belongs to; ``bus`` gives the bus bytes of its (comm, coll, size)
        where that is new (with ``best``, its best bandwidth)."""
        comm_id, op, size, rank = key
        span = self._spans.ids.get((comm_id, op, rank))
        if span is None:
            span = self._spans.number((comm_id, op, rank))
            self._span_comm.append(comm.number)
            self._span_rank.append(rank)
            self._span_rate.append(self._rate_keys.number((comm_id, op)))
        else:  # a comm forgotten (idle beyond the reach) and back: its spans stay, numbered under its new number
            self._span_comm.values[span] = comm.number
        low = self._lows.ids.get((comm_id, op, size))
        if low is None:
            low = self._lows.number((comm_id, op, size))
            for column, value in ((self._low_aggs, 0), (self._low_comm, comm.number), (self._low_op, self._colls.number(op)),
                                  (self._low_size, size), (self._low_bus, bus()), (self._low_best, best)):  # fmt: skip
                column.append(value)
        self._low_aggs.values[low] += 1
        self._agg_span.append(span)
        self._agg_low.append(low)
        self._agg_comm.append(comm.number)
        self._agg_last.append(-1)
        return self._aggs.number(key)

    def extend(self, records: Iterable[InspectorRecord]) -> StragglerEngine:
        for rec in records:
            self.add(rec)
        return self

    @property
    def capture_model(self) -> Literal["ring", "sampled", "mixed"]:
        if self.ring and self.sampled:
            return "mixed"
        return "ring" if self.ring else "sampled"

    def _absorb(self) -> None:
        """Merge the ledger into the slices: rows far older than what is judged now are dropped, rows of slices already
        judged have them judged again, and each slice keeps one row per key."""
        if not self._ledger:
            return
        folds, rows = self._ledger.taken()
        # each row's slice of the engine's, from its window's start and slice length and its slice of that window; a
        # window far beyond 64 bits (hostile) would overflow: its rows are dropped
        start, step = (np.repeat(folds[name], folds["rows"]) for name in ("start", "step"))
        offset = rows["index"] * step
        reach = np.abs(start.astype(_F64) + rows["index"].astype(_F64) * step.astype(_F64)) < _MAX_SLICE
        slices = np.where(reach, start + offset, 0) // self.slice_us
        n = rows["n"]
        latest = self._latest_us()
        if latest is not None:  # a slice of a summary's lists beyond its window
            reach &= slices <= latest // self.slice_us
        if self.evaluated is not None:
            reach &= slices > self.evaluated - self._reach()
            late = slices[reach & (slices <= self.evaluated)]
            if len(late):  # a process catching up: judge it again
                self._late_from = min(
                    int(late.min()), self._late_from if self._late_from is not None else 2**63
                )
        for index in np.unique(slices[reach]).tolist():
            self.slices.setdefault(index, _EMPTY)
        folded = np.flatnonzero(reach & (n > 0))
        if not len(folded):
            return
        key = np.repeat(folds["key"], folds["rows"])[folded]
        proc = np.repeat(folds["proc"], folds["rows"])[folded]
        slices = slices[folded]
        by_proc = np.lexsort((slices, proc))  # each process's first slice
        starts = _starts(proc[by_proc])
        procs = self._procs.keys
        for number, index in zip(
            proc[by_proc][starts].tolist(), slices[by_proc][starts].tolist(), strict=True
        ):
            proc_key = procs[number]
            if index < self.proc_first.get(proc_key, index + 1):
                self.proc_first[proc_key] = index
        np.maximum.at(self._agg_last.values, key, slices)
        np.maximum.at(self._comm_last.values, self._agg_comm.values[key], slices)
        new = _Rows(key, n[folded], rows["total"][folded], rows["low"][folded], rows["lo"][folded],
                    rows["lo_ts"][folded], rows["hi"][folded], rows["hi_ts"][folded])  # fmt: skip
        by_slice = np.argsort(slices, kind="stable")
        bounds = [*_starts(slices[by_slice]).tolist(), len(by_slice)]
        for begin, end in itertools.pairwise(bounds):
            at = int(slices[by_slice[begin]])
            self.slices[at] = _Rows.joined([self.slices[at], new.take(by_slice[begin:end])]).reduced()

    # -- evaluation -----------------------------------------------------------------------------------------------
    def complete_slice(self, final: bool = False) -> int | None:
        """The newest slice every live process has written past (``final``: at least the first slice)."""
        if not self.slices:
            return None
        newest = max(self.proc_last.values(), default=0)
        live = [ts for ts in self.proc_last.values() if ts >= newest - 2 * self.horizon * self.slice_us]
        # offline too: the slice of a process's last tick is judged only once every process is past it, and the
        # job's last ticks never are (the job ends between ticks: the time from its end to the next tick is no compute)
        last = min(live, default=newest) // self.slice_us - 1
        return max(last, min(self.slices)) if final else last

    def evaluate(self, final: bool = False) -> list[Finding]:
        """Judge every slice completed since the last call; the findings confirmed and active now."""
        self._absorb()
        last = self.complete_slice(final)
        if last is not None:
            first = min(self.slices) if self.evaluated is None else self.evaluated + 1
            if self._late_from is not None:
                first, self._late_from = min(first, self._late_from), None
            if not final:  # online catch-up after a gap: the recent past is what alerts are about
                first = max(first, last - self.params.catch_up_windows * self.horizon)
            # online, processes left behind by complete_slice (reading their dumps far behind, or stopped) lack the
            # records of the slices past their latest: not judged there (they would look idle, i.e. computing)
            behind = {} if final else {p: ts // self.slice_us for p, ts in self.proc_last.items()
                                       if ts // self.slice_us <= last}  # fmt: skip
            every = 1 if final else self.params.judge_every
            filled = sorted(i for i, rows in self.slices.items() if len(rows.key))
            index = first
            while index <= last:
                if index % every == every - 1:
                    self._judge(index, {p for p, reached in behind.items() if reached <= index})
                self.evaluated = index
                index = self._next_to_judge(index + 1, filled)
            if first <= last:
                self.evaluated = last
            self._forget(last - self._reach())
        return self.active()

    def _next_to_judge(self, index: int, filled: list[int]) -> int:
        """``index``, or the next slice whose horizon holds records (``filled``: the slices that do, in order) where
        judging the ones between changes nothing: no candidate, and the previous judgement found no steps (it leaves
        the horizon unstretched and the step rate 0, so an empty horizon flags nothing and leaves the same). Offline,
        one record dumped days away from the others (a clock, a corrupt file) was millions of empty horizons judged
        one by one."""
        if self.candidates or self._step_rate or self._horizon_now != self.horizon:
            return index
        at = bisect_left(filled, index - self.horizon + 1)
        if at == len(filled):
            return 2**63  # nothing left to judge
        return max(index, filled[at])

    def _forget(self, oldest: int) -> None:
        """Drop the slices up to ``oldest``, the keys whose newest slice they were, the comms with nothing in the kept
        slices (an ended job's) and the processes likewise; or every job an aggregator ever followed would stay."""
        for old in [i for i in self.slices if i <= oldest]:
            del self.slices[old]
        dead = np.flatnonzero(self._agg_last.view <= oldest)
        if len(dead):
            self._agg_last.values[dead] = _DEAD
            lows, counts = np.unique(self._agg_low.values[dead], return_counts=True)
            self._low_aggs.values[lows] -= counts
            keys = self._aggs.keys
            for number in dead.tolist():
                del self._aggs.ids[keys[number]]
            low_keys = self._lows.keys
            for low in lows[self._low_aggs.values[lows] == 0].tolist():  # a size no kept slice holds
                del self._lows.ids[low_keys[low]]
        gone = [cid for cid, comm in self.comms.items() if self._comm_last.values[comm.number] <= oldest]
        if gone:
            self._members_version += 1
            for cid in gone:
                self._comm_of[self.comms.pop(cid).number] = None
        ended = [p for p, ts in self.proc_last.items() if ts // self.slice_us <= oldest]
        for proc in ended:
            del self.proc_last[proc]
            self.proc_first.pop(proc, None)
            self._pools.pop(proc, None)
        if ended:
            self._procs.reset()
        for proc, spans in list(self._incomplete.items()):
            if not (kept := [span for span in spans if span[1] > oldest]):
                del self._incomplete[proc]
            else:
                self._incomplete[proc] = kept
        if len(self._aggs.keys) - len(self._aggs.ids) > max(MAX_DEAD_KEYS, len(self._aggs.ids)):
            self._renumber()

    def _renumber(self) -> None:
        """Number the live keys again from nothing (forgotten ones would otherwise take room in every array made per
        key number), and the slices' rows with them."""
        old_keys, old_last, old_comm_last = self._aggs.keys, self._agg_last.values, self._comm_last.values
        old_lows, old_bus, old_best = self._lows.ids, self._low_bus.values, self._low_best.values
        live = np.array(sorted(self._aggs.ids.values()), _I64)
        self._number_keys()
        for comm in self.comms.values():
            last, comm.number = old_comm_last[comm.number], len(self._comm_of)
            self._comm_of.append(comm)
            self._comm_last.append(last)
        for number in live.tolist():
            key = old_keys[number]
            low = old_lows[key[:3]]
            self._register(self.comms[key[0]], key, partial(float, old_bus[low]), float(old_best[low]))
        self._agg_last.values[: len(live)] = old_last[live]
        new_number = np.full(len(old_keys), -1, _I64)
        new_number[live] = np.arange(len(live))  # in the same order: each slice's rows stay sorted
        self.slices = {i: rows._replace(key=new_number[rows.key]) for i, rows in self.slices.items()}

    def _reach(self) -> int:
        """How far behind the last judged slice a slice can still be read: online catch-up judges again at most
        ``catch_up_windows`` horizons back, each judgement reading one (stretched) horizon. Older slices are dropped
        (at 1024 nodes x 8 GPUs a slice holds about 1.5 MB of aggregates) and records for them ignored."""
        return self.params.catch_up_windows * self.horizon + self._horizon_now

    def active(self) -> list[Finding]:
        return _ranked([c.finding for c in self.candidates.values() if c.confirmed])

    def analyze(self) -> Analysis:
        """Offline: judge every slice; every finding confirmed at some point, merged per culprit."""
        self.evaluate(final=True)
        merged: dict[tuple[str, int | None, Kind], Finding] = {}
        for f in [*self.history, *self.active()]:
            prev = merged.get(f.key)
            if prev is None or f.z > prev.z:
                if prev is not None:
                    f.first_ts_us = min(f.first_ts_us, prev.first_ts_us)
                    f.last_ts_us = max(f.last_ts_us, prev.last_ts_us)
                merged[f.key] = f
            else:
                prev.first_ts_us = min(f.first_ts_us, prev.first_ts_us)
                prev.last_ts_us = max(f.last_ts_us, prev.last_ts_us)
        findings = _ranked(list(merged.values()))
        ops = len(self._ops)
        return Analysis(self.records, ops, self.capture_model, findings, bw_mismatches=self.bw_mismatches)

    def _window(self, first: int, last: int) -> tuple[_Rows, np.ndarray[Any, Any]]:
        """The rows of slices ``first..last`` one after the other, and the position of each row's slice among them."""
        parts = [(pos, rows) for pos, i in enumerate(range(first, last + 1))
                 if (rows := self.slices.get(i)) is not None and len(rows.key)]  # fmt: skip
        if not parts:
            return _EMPTY, np.empty(0, _I64)
        return (_Rows.joined([rows for _, rows in parts]),
                np.concatenate([np.full(len(rows.key), pos, _I64) for pos, rows in parts]))  # fmt: skip

    def _memberships(self) -> dict[Proc, list[tuple[_Comm, int]]]:
        """Each process's (comm, rank) memberships, in the comms' order (made again once the comms' members changed:
        a walk over every comm's members, where a finding's process was looked for in each)."""
        if self._memberships_of[0] != self._members_version:
            of: dict[Proc, list[tuple[_Comm, int]]] = defaultdict(list)
            for comm in self.comms.values():
                for rank, member in comm.members.items():
                    of[member].append((comm, rank))
            self._memberships_of = (self._members_version, of)
        return self._memberships_of[1]

    def _comm_sizes(self) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """Per comm number, its hosts and its members (0 for a comm forgotten)."""
        stamp = (self._members_version, len(self._comm_of))
        if self._comm_sized[0] != stamp:
            comms = self._comm_of
            self._comm_sized = (stamp, (np.array([len(c.hosts) if c else 0 for c in comms], _I64),
                                        np.array([len(c.members) if c else 0 for c in comms], _I64)))  # fmt: skip
        return self._comm_sized[1]

    def _span_procs(self) -> np.ndarray[Any, Any]:
        """The process of each (comm, coll, rank) number: its comm's member at that rank now."""
        stamp = (self._members_version, self._procs.version, self._numberings)
        made_at, procs = self._span_proc
        if made_at != stamp:
            procs = np.empty(0, _I64)
        if len(procs) < len(self._spans.keys):
            comms, number = self._comm_of, self._procs.number
            more = [-1 if (comm := comms[c]) is None else number(comm.members[rank]) for c, rank in
                    zip(self._span_comm.view[len(procs):].tolist(), self._span_rank.view[len(procs):].tolist(),
                        strict=True)]  # fmt: skip
            procs = np.concatenate([procs, np.array(more, _I64)])
        self._span_proc = (stamp, procs)
        return procs

    def _pool_slices(self) -> int:
        """Slices per pool, the time resolution of a process's compute share: a pool holds a few steps, and a dump
        interval (ring: an op's completion is known only to its tick) or, sampled, a few samples per key."""
        p = self.params
        steps = math.ceil(p.min_steps / max(self._step_rate * self.slice_us, 1e-9)) if self._step_rate else 1
        ticks = p.pool_samples if self.sampled > self.ring else 1
        return max(1, steps, math.ceil(ticks * self._interval_us / self.slice_us))

    def _judge(self, index: int, behind: set[Proc]) -> None:
        # long steps stretch the horizon to ``min_window_steps`` steps (a few ops give no stable share), long dump
        # intervals to enough pools to tell a steady straggler from an intermittent one and, sampled, to
        # ``sampled_window_samples`` samples per key
        p = self.params
        steps_per_slice = self._step_rate * self.slice_us
        need = (_Pattern.MIN_POOLS + 2) * self._pool_slices() if self._step_rate else 0
        if self.sampled > self.ring:
            need = max(need, math.ceil(p.sampled_window_samples * self._interval_us / self.slice_us))
        if steps_per_slice > 0:
            need = max(need, math.ceil(p.min_window_steps / steps_per_slice))
        horizon = max(self.horizon, min(p.max_stretch * self.horizon, need))
        self._horizon_now = horizon
        # slices with no record are time too (long ops complete less often than a slice): kept, empty
        first = max(index - horizon + 1, min(self.slices))
        if first > index:
            return
        rows, pos = self._window(first, index)
        # first seen: the slice whose evaluation first flagged it (its horizon reaches further back, into healthy time)
        start_us, end_us = index * self.slice_us, (index + 1) * self.slice_us
        unjudged = self._unjudged(first, index) | behind
        flagged = self._compute(rows, pos, index - first + 1, first, unjudged) + self._communication(
            rows, unjudged
        )
        # an unjudged process (and its node's network) keeps its standing until its records are complete again
        held = {key for host, pid in unjudged
                for key in ((host, pid, "compute"), (host, None, "compute"), (host, None, "communication"))}  # fmt: skip
        seen = set()
        for f in flagged:
            f.first_ts_us, f.last_ts_us = start_us, end_us
            seen.add(f.key)
            cand = self.candidates.get(f.key)
            since, last = self._flagged.get(f.key, (index, index))
            self._flagged[f.key] = (since if index - last <= horizon // 2 else index, index)
            if cand is None:
                cand = self.candidates[f.key] = _Candidate(f)
            cand.evals += 1
            cand.evidence += f.z
            f.first_ts_us = cand.finding.first_ts_us
            cand.finding = f
            needed = min(self.params.confirm_windows, math.ceil(self.params.evidence_z / max(f.z, 1e-9)))
            # consecutive horizons share most of their data: a weak finding must stay flagged over part of a horizon of
            # fresh records (a run of unlucky samples or of hiccups does not)
            lasting = (index - self._flagged[f.key][0] >= self.params.confirm_share * horizon
                       or f.z >= 2 * self.params.evidence_z)  # fmt: skip
            if cand.evals >= needed and lasting:
                cand.confirmed = True
            cand.flagged_evals += 1
        self._flagged = {key: at for key, at in self._flagged.items() if index - at[1] <= horizon}
        for key, cand in list(self.candidates.items()):
            cand.seen_evals += 1
            cand.finding.confidence = cand.flagged_evals / cand.seen_evals
            if key not in seen and key not in held:
                del self.candidates[key]
                if cand.confirmed and self.offline:
                    self.history.append(cand.finding)

    def _unjudged(self, first: int, last: int) -> set[Proc]:
        """Processes missing records in slices ``first..last``: their compute share there is not known."""
        return {
            proc
            for proc, spans in self._incomplete.items()
            if any(a <= last and b >= first for a, b in spans)
        }

    # -- compute --------------------------------------------------------------------------------------------------
    def _shares(
        self, rows: _Rows, pos: np.ndarray[Any, Any], width: int, first: int
    ) -> tuple[dict[Proc, _ProcShare], Callable[[Proc], tuple[list[float], list[float]]]]:
        """Each process's share of the horizon (``width`` slices from slice ``first``: ``rows``, each in slice ``pos``)
        spent outside collectives, overall, and the function giving it per slice, counted from its first record where
        that lies within the horizon."""
        if not len(rows.key):
            return {}, lambda proc: ([], [])
        slice_us = self.params.slice_s * 1e6
        span_proc = self._span_procs()
        procs, spans = self._procs.keys, len(self._spans.keys)
        span = self._agg_span.values[rows.key]  # per row
        start = np.clip(np.fromiter((self.proc_first.get(proc, first) for proc in procs), _I64, len(procs)) - first,
                        0, width - 1)  # fmt: skip
        lived_us = (width - start) * slice_us
        sampled = self.sampled > self.ring
        if not sampled:
            # ring: every op is there, but an op's completion is known only to the dump tick that wrote it (the ops of
            # a tick completed since the process's previous one). A process's time is therefore counted from tick to
            # tick: the busy time of the ops of a slice's ticks against the time since its previous tick, so slices
            # shorter than the dump interval (empty, or holding a whole interval's ops) neither lose nor gain time
            lo = np.full(spans, np.iinfo(_I64).max, _I64)
            hi = np.full(spans, -1, _I64)
            np.minimum.at(lo, span, rows.lo)
            np.maximum.at(hi, span, rows.hi)
            seen = np.flatnonzero(hi >= 0)
            most = np.zeros(len(procs), _I64)
            np.maximum.at(most, span_proc[seen], hi[seen] - lo[seen] + 1)
            proc = span_proc[span]
            ops = np.bincount(proc, rows.n, len(procs))
            # ops the plugin numbered but did not write (dropped from its ring, or filtered: small or untimed ops)
            numbered = np.zeros(len(procs), _I64)
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
                edge_pos = np.full(spans, -1 if edge is np.maximum else width, _I64)
                edge.at(edge_pos, span, pos)
                at = np.flatnonzero(pos == edge_pos[span])
                at = at[np.lexsort(order(at))]
                ends.append(at[_starts(span[at])])  # one row per key seen, in key order
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
        ops_of, lived_of, step_of = ops.astype(_I64).tolist(), (width - start).tolist(), step_rate.tolist()
        mask = present.tolist()
        made = map(_ProcShare, *(compress(values, mask)
                                 for values in (share, ops_of, lived_of, step_of, recorded.tolist())))  # fmt: skip
        shares = dict(zip(compress(procs, mask), made, strict=True))
        per_slice: list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]] = []

        def slices_of(proc: Proc) -> tuple[list[float], list[float]]:
            """Its busy time and the time it covers (µs) per slice, from its first record."""
            if not per_slice:
                if span_rate is None:
                    per_slice.append((busy_cells, covered_cells))
                else:
                    per_slice.append(self._slice_shares(rows, pos, width, span, span_proc, span_rate))
            i = self._procs.ids[proc]
            busy_of, covered_of = per_slice[0]
            return busy_of[start[i] :, i].tolist(), covered_of[start[i] :, i].tolist()

        return shares, slices_of

    def _slice_shares(self, rows: _Rows, pos: np.ndarray[Any, Any], width: int, span: np.ndarray[Any, Any],
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
    def _tick_cells(rows: _Rows, pos: np.ndarray[Any, Any], proc: np.ndarray[Any, Any], width: int,
                    procs: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:  # fmt: skip
        """Ring: per slice and process (slice x process number) the busy time of the ops its ticks in the slice wrote,
        and the time from its previous tick to its last one in the slice; a process's first slice in the horizon only
        sets where its time starts (its ops completed after a tick before the horizon)."""
        cell = pos * procs + proc
        busy = np.bincount(cell, rows.total, width * procs).reshape(width, procs)
        flat = np.full(width * procs, -1, _I64)
        np.maximum.at(flat, cell, rows.hi_ts)
        last = flat.reshape(width, procs)
        filled = np.where(last >= 0, np.arange(width)[:, None], -1)
        latest = np.maximum.accumulate(filled, axis=0)  # per slice the last slice at or before it with a tick
        before = np.vstack([np.full((1, procs), -1, _I64), latest[:-1]])
        columns = np.broadcast_to(np.arange(procs), (width, procs))
        counted = (last >= 0) & (before >= 0)
        covered = np.where(counted, last - last[np.maximum(before, 0), columns], 0).astype(_F64)
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
        parent: dict[Proc, Proc] = {proc: proc for proc in procs}

        def find(x: Proc) -> Proc:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for comm in self.comms.values():
            members = [m for m in comm.members.values() if m in parent]
            for other in members[1:]:
                parent[find(other)] = find(members[0])
        groups: dict[Proc, list[Proc]] = defaultdict(list)
        for proc in parent:
            groups[find(proc)].append(proc)
        return list(groups.values())

    def _stages(self, job: list[Proc]) -> list[list[Proc]]:
        """A job's processes that are comparable: connected by collectives other than point-to-point ones and those
        spanning the whole job. Pipeline stages run different layers (and their Send/Recv waits go unrecorded where
        the plugin records no P2P): each is judged apart when every one is large enough to judge; else the job."""
        if len(job) < 2 * self.params.min_group:
            return [job]
        key = (self._members_version, tuple(job))
        if self._stages_of[0] == key:
            return self._stages_of[1]
        parent = {proc: proc for proc in job}

        def find(x: Proc) -> Proc:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for comm in self.comms.values():
            members = [m for m in comm.members.values() if m in parent]
            if comm.p2p or len(members) >= len(job):
                continue
            for other in members[1:]:
                parent[find(other)] = find(members[0])
        groups: dict[Proc, list[Proc]] = defaultdict(list)
        for proc in job:
            groups[find(proc)].append(proc)
        stages = list(groups.values())
        if len(stages) < 2 or min(map(len, stages)) < self.params.min_group:
            stages = [job]
        self._stages_of = (key, stages)
        return stages

    def _compute(
        self, rows: _Rows, pos: np.ndarray[Any, Any], width: int, first: int, unjudged: set[Proc]
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
            # the slices since the job's last process began (all of them, for a job older than the horizon), pooled
            # from the end so every process's pools cover the same time
            lived = min(shares[proc].lived for proc in job)
            if lived * self.slice_us * self._step_rate < p.min_window_steps:
                continue  # a job that began within the horizon: too few steps of it yet
            med, spread = _robust([shares[proc].share for proc in job], p.spread_floor * max(
                statistics.median(shares[proc].share for proc in job), 0.05))  # fmt: skip
            if med <= 0.05:
                continue  # collectives fill the whole time (overlapped or mis-timed): no compute to compare
            suspects = [proc for proc in job if not (
                shares[proc].ops < p.min_ops or shares[proc].share / med < 1 + p.min_excess
                or (shares[proc].share - med) / spread < p.z_threshold / 2)]  # fmt: skip
            if not suspects:
                continue
            for proc in job:
                busy_of, covered_of = slices_of(proc)
                busy_of, covered_of = busy_of[-lived:], covered_of[-lived:]
                # pooled from the end (so every process's pools cover the same time), each pool's share from the
                # time it covers: a pool without a tick of the process holds no measure (NaN)
                shares[proc].slices = _pooled(busy_of, covered_of, pool)
            # each pool against the same pool of the peers: their waits during a burst lower their share then
            pools = len(shares[job[0]].slices)
            slice_meds = [_nan_median([shares[proc].slices[i] for proc in job]) for i in range(pools)]
            resolution_s = pool * self.slice_us / 1e6
            suspected = set(suspects)
            # the peers' own pool-to-pool spread: how far one pool's factor strays by noise alone
            calm = [x / m - 1 for proc in job if proc not in suspected
                    for x, m in zip(shares[proc].slices, slice_meds, strict=True) if x == x and m > 0]  # fmt: skip
            pool_sd = _robust(calm, 0.01)[1] if len(calm) >= 8 else math.inf
            # strict: flagged on its own; leaning: as slow but with half the evidence, enough to join a node-wide
            # finding on its host (its processes cross the bar one by one while the node slows down)
            strict: dict[str, list[Finding]] = defaultdict(list)
            leaning: dict[str, list[Finding]] = defaultdict(list)
            for proc in suspects:
                ps = shares[proc]
                factor, z, cost = ps.share / med, (ps.share - med) / spread, ps.share - med
                factors = [
                    x / m if x == x and m > 0 else math.nan
                    for x, m in zip(ps.slices, slice_meds, strict=True)
                ]
                per_slice = [x for x in factors if x == x]
                # a one-step hiccup is not a straggler: the excess must span several pools and several steps
                hot = sum(x >= 1 + p.min_excess for x in per_slice)
                if hot < 3 or hot * pool * self.slice_us * ps.step_rate < p.min_steps:
                    continue
                pattern = _Pattern.judge(self._remember(proc, factors, first + width, pool), pool_sd,
                                         p.min_excess, resolution_s)  # fmt: skip
                if pattern.kind != "intermittent":
                    pattern = dataclasses.replace(pattern, burst=factor)
                f = self._proc_finding(proc, factor, z, cost, pattern, len(job), med, ps)
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

    def _remember(self, proc: Proc, factors: list[float], end: int, pool: int) -> list[float]:
        """Add a suspect's pool factors (ending at slice ``end``, exclusive) to its memory of the last
        ``pattern_memory_windows`` horizons, where the pools lie on the grid of ``pool`` slices; its memory's factors
        in time order, pools that overlap an earlier one left out (the pool length follows the step rate)."""
        memory = self._pools.setdefault(proc, {})
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

    def _proc_finding(self, proc: Proc, factor: float, z: float, cost: float, pattern: _Pattern, peers: int,
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
            shape = (
                f"; steady or intermittent undetermined (pools of {pattern.resolution_s:g} s too few or too "
                "noisy against the excess)"
            )
        evidence = (
            f"computes {factor:.2f}x longer between collectives than the median of its {peers - 1} peers "
            f"({med * factor:.0%} of the time outside recorded collectives vs {med:.0%}; lateness {z:.1f} robust "
            f"sd); costs the job {cost:.1%} of its time{shape}; arrives last in its {len(memberships)} comm(s), "
            f"e.g. rank {rank}/{len(comm.members)} of {self.describe(comm)}"
        )
        coverage = self._coverage(1 - med, 1 - ps.share, ps.recorded)
        return Finding(proc[0], proc[1], "compute", comm.label, rank, factor, 1.0, evidence, cost=cost,
                       duty_cycle=pattern.duty, burst_slowdown=pattern.burst, z=z, comm_ids=comm_ids,
                       pattern=pattern.kind, pattern_resolution_s=pattern.resolution_s, coverage=coverage)  # fmt: skip

    def describe(self, comm: _Comm) -> str:
        """A comm as an operator can find it: its name, or (created without one) its id and layout: ranks, hosts and
        the role its shape suggests."""
        if comm.label != comm.comm_id:
            return comm.label
        ranks, hosts = len(comm.members), len(comm.hosts)
        per_host = ranks / max(hosts, 1)
        if hosts == 1:
            role = "intra-node, TP-like"
        elif ranks == 2:
            role = "two ranks on two nodes, PP-like"
        elif per_host == 1:
            role = "one rank per node, DP/EP-like"
        else:
            role = f"{per_host:g} ranks per node"
        return f"comm {comm.comm_id} ({ranks} ranks on {hosts} host(s), {role})"

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
                       coverage=parts[0].coverage)  # fmt: skip

    def _communication(self, rows: _Rows, unjudged: set[Proc]) -> list[Finding]:
        """Cross-node comms slower than their shape or their own best; localized to the nodes they share. A comm with
        an unjudged member is left out: its transfer time is its last arriver's, whose records may be the ones not in
        (the others' times then include their wait for it)."""
        p = self.params
        # each (comm, coll, size)'s shortest time over the horizon
        shortest = np.full(len(self._lows.keys), math.inf)
        np.minimum.at(shortest, self._agg_low.values[rows.key], rows.low)
        low = np.flatnonzero(shortest < math.inf)
        comm = self._low_comm.values[low]
        if unjudged:
            partial = np.zeros(len(self._comm_of), bool)
            for number in np.unique(comm).tolist():
                partial[number] = any(m in unjudged for m in self._comm_of[number].members.values())  # type: ignore[union-attr]
            low, comm = low[~partial[comm]], comm[~partial[comm]]
        # cross-node comms only: intra-node comms cannot point at a node's network
        hosts, members = self._comm_sizes()
        bus = self._low_bus.values[low]
        cross = (hosts[comm] >= 2) & (bus != 0)
        low, comm, bus = low[cross], comm[cross], bus[cross]
        bw = bus / shortest[low]
        # comms of the same shape: the upper quartile of their bandwidths, once per shape
        shape = np.stack([self._low_op.values[low], self._low_size.values[low], members[comm], hosts[comm]])
        shapes, of_shape = np.unique(shape, axis=1, return_inverse=True) if len(low) else (shape, low)
        upper = np.full(shapes.shape[1], math.nan)
        by_shape = np.argsort(of_shape, kind="stable")
        bounds = [*_starts(of_shape[by_shape]).tolist(), len(low)] if len(low) else []
        for begin, end in itertools.pairwise(bounds):
            if end - begin >= 3:
                upper[of_shape[by_shape[begin]]] = statistics.quantiles(
                    bw[by_shape[begin:end]].tolist(), n=4
                )[2]
        # against the upper quartile of its shape and its own best (those it has), as a ratio of bandwidths
        best = self._low_best.values[low]
        ref = np.fmax(upper[of_shape], best)
        judged = ~np.isnan(ref)
        self._low_best.values[low[judged]] = np.fmax(best[judged], bw[judged])
        ratio = ref / bw
        # per comm its slowest (comm, coll, size), the first where several are as slow
        slowest = np.flatnonzero(judged & (ratio > 0))
        slowest = slowest[np.lexsort((slowest, -ratio[slowest], comm[slowest]))]
        slowest = slowest[_starts(comm[slowest])] if len(slowest) else slowest
        picked = low[slowest].tolist()
        ids = [self._lows.keys[i][0] for i in picked]
        ratios = dict(zip(ids, ratio[slowest].tolist(), strict=True))  # comm -> reference bandwidth / its own
        normal = dict(
            zip(ids, (bus[slowest] / ref[slowest]).tolist(), strict=True)
        )  # comm -> reference time (µs) of its slowest (coll, size)
        measured = dict(zip(ids, picked, strict=True))  # comm -> the (comm, coll, size) number compared
        slow = {comm for comm, r in ratios.items() if r >= p.comm_slow_ratio}
        fast = set(ratios) - slow
        if not slow or not fast:
            return []  # everything slow (or nothing): no node to single out
        rate = self._op_rates(rows)
        out = []
        for host in self._localize(slow, fast):
            through = sorted(
                (c for c in slow if host in self.comms[c].hosts), key=lambda c: self.comms[c].label
            )
            if len(through) < 2:
                continue  # one slow comm is one slow link or one noisy sample, not a node
            factor = statistics.median(ratios[c] for c in through)
            details = []
            for c in through:
                _, coll, size = self._lows.keys[measured[c]]
                details.append({"comm": self.comms[c].label, "comm_id": c, "layout": self.describe(self.comms[c]),
                                "coll": coll, "size_bytes": size, "normal_us": round(normal[c], 1),
                                "observed_us": round(normal[c] * ratios[c], 1), "factor": round(ratios[c], 2)})  # fmt: skip
            z = (factor - 1) / 0.05 * len(through) ** 0.5
            # its cost: per process, the extra transfer time of its slow comms times their op rates, as a share of
            # its time; the worst process's (the steps wait for it)
            extra: dict[Proc, float] = defaultdict(float)
            for c in through:
                _, coll, _ = self._lows.keys[measured[c]]
                for member in self.comms[c].members.values():
                    extra[member] += rate.get((c, coll), 0.0) * normal[c] * (ratios[c] - 1)
            cost = min(1.0, max(extra.values(), default=0.0))
            shown = [f"{d['layout']} {d['coll']} {_bytes(int(str(d['size_bytes'])))}: {d['observed_us']} us vs "
                     f"{d['normal_us']} us" for d in details[:3]]  # fmt: skip
            peers = sorted(
                (c for c in fast if self.comms[c].hosts - {host}), key=lambda c: self.comms[c].label
            )
            evidence = (
                f"{len(through)} cross-node comm(s) through {host} transfer {factor:.2f}x slower than comms of the "
                f"same shape (collective, message size, ranks, hosts) or their own best: " + "; ".join(shown)
                + (" ..." if len(details) > 3 else "") + f"; costs the job {cost:.1%} of its time"
                + (f"; {len(peers)} other judged cross-node comm(s), without {host}, are normal, e.g. "
                   + ", ".join(self.describe(self.comms[c]) for c in peers[:2]) if peers else "")
            )  # fmt: skip
            labels = [d["comm"] for d in details]
            out.append(Finding(host, None, "communication", str(labels[0]) if len(labels) == 1 else None, None,
                               factor, 1.0, evidence, cost=cost, z=z, comms=details, comm_ids=through))  # fmt: skip
        return out

    def _op_rates(self, rows: _Rows) -> dict[tuple[str, str], float]:
        """Ops per µs of each (comm, coll): its ranks' largest ``coll_sn`` span over the horizon's dump times."""
        spans = len(self._spans.keys)
        span = self._agg_span.values[rows.key]
        lo, hi = np.full(spans, np.iinfo(_I64).max, _I64), np.full(spans, -1, _I64)
        lo_ts, hi_ts = np.full(spans, np.iinfo(_I64).max, _I64), np.full(spans, -1, _I64)
        np.minimum.at(lo, span, rows.lo)
        np.maximum.at(hi, span, rows.hi)
        np.minimum.at(lo_ts, span, rows.lo_ts)
        np.maximum.at(hi_ts, span, rows.hi_ts)
        out: dict[tuple[str, str], float] = {}
        keys = self._spans.keys
        for number in np.flatnonzero((hi > lo) & (hi_ts > lo_ts)).tolist():
            comm, coll, _ = keys[number]
            rate = (hi[number] - lo[number]) / (hi_ts[number] - lo_ts[number])
            out[(comm, coll)] = max(out.get((comm, coll), 0.0), float(rate))
        return out

    def _localize(self, slow: set[str], fast: set[str]) -> list[str]:
        """Nodes common to the slow comms and (nearly) absent from the fast ones: a greedy set cover."""
        comms = self.comms
        slow_by_host: dict[str, set[str]] = defaultdict(set)
        fast_by_host: dict[str, int] = defaultdict(int)
        for comm in slow:
            for host in comms[comm].hosts:
                slow_by_host[host].add(comm)
        for comm in fast:
            for host in comms[comm].hosts:
                fast_by_host[host] += 1
        candidates = {
            h: s for h, s in slow_by_host.items() if fast_by_host[h] <= 0.2 * (len(s) + fast_by_host[h])
        }
        picked: list[str] = []
        uncovered = set(slow)
        while uncovered:
            best = max(candidates, key=lambda h: (len(candidates[h] & uncovered), -fast_by_host[h], h),
                       default=None)  # fmt: skip
            if best is None or not candidates[best] & uncovered:
                break
            picked.append(best)
            uncovered -= candidates.pop(best)
        return picked


def _ranked(findings: list[Finding]) -> list[Finding]:
    """Worst first; a process's compute finding is folded into its node's when the whole node is reported."""
    nodes = {f.hostname for f in findings if f.kind == "compute" and f.pid is None}
    kept = [f for f in findings if not (f.kind == "compute" and f.pid is not None and f.hostname in nodes)]
    return sorted(kept, key=lambda f: (-f.confidence * f.slowdown, f.hostname, f.pid or 0))


def analyze_records(records: Iterable[InspectorRecord], params: StragglerParams | None = None) -> Analysis:
    return StragglerEngine(params).extend(records).analyze()
