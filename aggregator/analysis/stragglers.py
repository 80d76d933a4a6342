"""The one straggler engine (design §6): pure, incremental, used online by the aggregator and offline by
``ranksight analyze``.

Why not "the rank with the lowest bandwidth": a rank's ``exec_time`` includes its wait for the last rank to arrive, so a
late rank (compute straggler) shows the *shortest* time of its group while its peers look slow.

Inputs are per-slice aggregates (``slice_s`` of dump time): per (comm, coll, size, rank) the count, sum and minimum of
exec times, and per (comm, coll) the span of ``coll_sn`` seen. Records are folded into them once (:meth:`add`), so the
engine never re-reads a record; the agents' per-window summaries (``inspector_summary``) carry the same aggregates per slice
and feed them in with :meth:`StragglerEngine.add_summary`.

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
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import zip_longest
from typing import Any, Generic, Literal, NamedTuple, TypeVar

import msgspec

from ranksight.agent.collectors.inspector.parse import bandwidths_gbs
from ranksight.agent.collectors.inspector.summary import SnSpan
from ranksight.aggregator.analysis.robust import MAD_TO_SIGMA, median_mad
from ranksight.schemas.twins import InspectorRecord, InspectorSummaryRecord

Kind = Literal["compute", "communication"]
Proc = tuple[str, int]  # (hostname, pid): rank numbers are per communicator, a process is not
AggKey = tuple[str, str, int, int]  # (comm, coll, size, rank)
SpanKey = tuple[str, str, int]  # (comm, coll, rank): coll_sn counts per collective type (p2p_sn per process)
K = TypeVar("K")
NO_SN = 2**63  # no coll_sn of a key in a slice: above every low end, and -1 below every high end


@dataclass(frozen=True)
class StragglerParams:
    window_s: float = 6.0  # sliding evaluation horizon
    slice_s: float = 0.5  # records are summed per slice
    judge_every: int = 1  # online, the horizon is judged at every this many slices (offline at every slice)
    confirm_windows: int = 3  # most consecutive flagged evaluations a weak finding needs
    catch_up_windows: int = 4  # online, late records and gaps are judged again this many horizons back
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
    label: str  # comm_name when the plugin gives one, else the hash id
    op_bytes: dict[tuple[str, int], float] = field(default_factory=dict)  # (coll, size) -> bus bytes per rank
    members: dict[int, Proc] = field(default_factory=dict)
    last_slice: int = -1  # the newest slice holding its records (none left in the kept slices: forgotten)
    # (coll, size, rank) -> the slices' keys of it and the newest slice holding them: every slice shares these tuples
    # and their strings (about 40 % of a slice's memory when each record's decoded strings were kept instead); an
    # entry goes with its newest slice (sizes averaged per window can make new keys all the time)
    keys: dict[tuple[str, int, int], tuple[AggKey, SpanKey, int]] = field(default_factory=dict)
    # (coll, size) -> its ranks' entries in keys: the last one gone, the size's bus bytes and best bandwidth go too
    size_keys: dict[tuple[str, int], int] = field(default_factory=dict)
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
    """Keys numbered in order of first use: a slice's digest is a list by number, and a horizon's digests combine
    per number at C speed (``map(min, zip_longest(*lists))``) instead of a dict operation per key and slice. A new key
    takes the next number, so a digest made with ``len(keys)`` entries grows by one append per key numbered while it
    is made. ``reset`` renumbers (the digests made before carry the old ``version`` and are made again)."""

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


class _Agg(msgspec.Struct, gc=False, array_like=True):
    """Exec times of one (comm, coll, size, rank) in one slice (millions at a thousand nodes: a struct the cyclic GC
    never scans, as it holds only numbers; packed as a msgpack array)."""

    n: int = 0
    total: float = 0.0
    low: float = math.inf

    def merge(self, n: int, total: float, low: float) -> None:
        self.n += n
        self.total += total
        self.low = min(self.low, low)


class _Packed(NamedTuple):
    """A slice's aggregates and spans as msgpack arrays (encoded and decoded in C) beside their (shared) keys, for the
    slices kept only for catch-up (most of them at a thousand nodes): about half a slice's memory as dicts of
    structs."""

    agg_keys: list[AggKey]
    aggs: bytes
    span_keys: list[SpanKey]
    spans: bytes


_PACK = msgspec.msgpack.Encoder()
_UNPACK_AGGS = msgspec.msgpack.Decoder(list[_Agg])
_UNPACK_SPANS = msgspec.msgpack.Decoder(list[SnSpan])


def _keys_like(values: dict[Any, Any], keys: list[Any] | None) -> tuple[list[Any], list[Any]]:
    """``keys`` where ``values`` has exactly those, else a list of its own; and the values in that order."""
    if keys is not None and len(keys) == len(values) and all(map(values.__contains__, keys)):
        return keys, [values[key] for key in keys]
    return list(values), list(values.values())


@dataclass
class _Slice:
    _aggs: dict[AggKey, _Agg] = field(default_factory=dict)
    _spans: dict[SpanKey, SnSpan] = field(default_factory=dict)
    # past the horizon: arrays until a late record or a judgement reads it again
    packed: _Packed | None = None
    version: int = 0  # bumped by every fold: a digest of an older version is stale
    # digests by the engine's numbering (:class:`_Index`), each with the versions it was made at (slice, members,
    # numbering): per process its ops and exec time sum; per (comm, coll, rank) its coll_sn low and high ends (ring);
    # per (comm, coll, size) the shortest exec time of any rank (inf: none)
    proc_sums: tuple[list[int], list[float]] = field(default_factory=lambda: ([], []))
    sums_of: tuple[int, int, int] = (-1, -1, -1)
    sn_ends: tuple[list[int], list[int]] = field(default_factory=lambda: ([], []))
    ends_of: tuple[int, int] = (-1, -1)
    # per (comm, coll, rank) number (the numbering of ``sn_ends``): its ops and exec time sum over its sizes (sampled)
    key_sums: tuple[list[int], list[float]] = field(default_factory=lambda: ([], []))
    key_sums_of: tuple[int, int] = (-1, -1)
    lows: list[float] = field(default_factory=list)
    lows_of: tuple[int, int] = (-1, -1)

    @property
    def aggs(self) -> dict[AggKey, _Agg]:
        if self.packed is not None:
            self.unpack()
        return self._aggs

    @property
    def spans(self) -> dict[SpanKey, SnSpan]:
        if self.packed is not None:
            self.unpack()
        return self._spans

    def agg_keys(self) -> Iterable[AggKey]:
        return self.packed.agg_keys if self.packed is not None else self._aggs.keys()

    def pack(self, like: _Packed | None = None) -> None:
        """``like``: another packed slice, whose key lists this one shares where it has the same keys (a job's
        slices mostly do: one list for them, not one per slice; at 1024 nodes about 15 MB of the engine's 250)."""
        if self.packed is None:
            agg_keys, aggs = _keys_like(self._aggs, like.agg_keys if like is not None else None)
            span_keys, spans = _keys_like(self._spans, like.span_keys if like is not None else None)
            self.packed = _Packed(agg_keys, _PACK.encode(aggs), span_keys, _PACK.encode(spans))
            self._aggs, self._spans = {}, {}

    def unpack(self) -> None:
        packed, self.packed = self.packed, None
        if packed is not None:
            self._aggs = dict(zip(packed.agg_keys, _UNPACK_AGGS.decode(packed.aggs), strict=True))
            self._spans = dict(zip(packed.span_keys, _UNPACK_SPANS.decode(packed.spans), strict=True))


@dataclass
class _Candidate:
    """A finding being confirmed: evidence added per consecutive flagged evaluation."""

    finding: Finding
    evidence: float = 0.0
    evals: int = 0
    confirmed: bool = False
    flagged_evals: int = 0
    seen_evals: int = 0
    slowdowns: list[float] = field(default_factory=list)


@dataclass
class _ProcShare:
    share: float
    ops: int
    lived: int  # slices of the horizon from the process's first record
    step_rate: float  # steps per µs: the rate of its most frequent collective
    # compute share per slice of those ``lived`` slices (aligned at the horizon's end): made only for a job where a
    # process stands out overall (most evaluations of a healthy job need none)
    slices: list[float] = field(default_factory=list)


def _drop_digests(sl: _Slice) -> None:
    if sl.lows_of[0] >= 0 or sl.sums_of[0] >= 0 or sl.ends_of[0] >= 0 or sl.key_sums_of[0] >= 0:
        sl.proc_sums, sl.sums_of, sl.lows, sl.lows_of = ([], []), (-1, -1, -1), [], (-1, -1)
        sl.sn_ends, sl.ends_of, sl.key_sums, sl.key_sums_of = ([], []), (-1, -1), ([], []), (-1, -1)


def _sums(sl: _Slice, index: _Index[K], key_of: Callable[[AggKey], K]) -> tuple[list[int], list[float]]:
    """A slice's ops and exec time sum per number (in ``index``) of ``key_of`` its aggregates' keys."""
    ids, ops, times = index.ids, [0] * len(index.keys), [0.0] * len(index.keys)
    for agg_key, agg in sl.aggs.items():
        key = key_of(agg_key)
        i = ids.get(key)
        if i is None:
            i = index.number(key)
            ops.append(0)
            times.append(0.0)
        ops[i] += agg.n
        times[i] += agg.total
    return ops, times


def _robust(values: list[float], floor: float) -> tuple[float, float]:
    med, mad = median_mad(values)
    return med, max(MAD_TO_SIGMA * mad, floor)


class StragglerEngine:
    """Feed records with :meth:`add`; :meth:`evaluate` judges every slice completed since the last call (online);
    :meth:`analyze` does that to the end and lists every finding confirmed on the way (offline). Holds no clock and does
    no I/O."""

    def __init__(self, params: StragglerParams | None = None, offline: bool = True) -> None:
        """``offline``: also keep what only :meth:`analyze` reports (the distinct operations, the findings that
        resolved), which grows with the job: the live engine keeps neither."""
        self.params = p = params or StragglerParams()
        self.offline = offline
        self.slice_us = max(1, int(p.slice_s * 1e6))
        self.horizon = max(1, round(p.window_s / p.slice_s))
        self.records = self.ring = self.sampled = self.bw_mismatches = 0
        self.comms: dict[str, _Comm] = {}
        self.slices: dict[int, _Slice] = {}
        self.proc_last: dict[Proc, int] = {}  # latest dump time of each process (µs)
        # the first slice holding each process's records: before it the process did not exist (a job that started
        # within the horizon), which is not time spent computing
        self.proc_first: dict[Proc, int] = {}
        self.evaluated: int | None = None  # last slice judged
        self.candidates: dict[tuple[str, int | None, Kind], _Candidate] = {}
        self.history: list[Finding] = []  # confirmed findings that resolved (offline)
        self._ops: set[tuple[str, str, int]] = set()  # (offline)
        self._best_bw: dict[tuple[str, str, int], float] = {}  # own best bus bandwidth per (comm, coll, size)
        self._step_rate = 0.0  # steps per µs of the job, from the last evaluation
        self._horizon_now = self.horizon  # slices judged, stretched for long steps
        self._late_from: int | None = None  # earliest judged slice that received records since
        # slices (first, last) of each process that miss records its agent got after their window had closed
        self._incomplete: dict[Proc, list[tuple[int, int]]] = defaultdict(list)
        # bumped when a rank of a comm gets another process or a comm is forgotten (slice digests go stale)
        self._members_version = 0
        self._jobs_of: tuple[tuple[int, tuple[Proc, ...]], list[list[Proc]]] | None = None
        # numberings of the slices' digests: renumbered when processes or comms are forgotten, or one holds far
        # more keys than the last horizon (sizes come and go)
        self._proc_index: _Index[Proc] = _Index()
        self._span_index: _Index[SpanKey] = _Index()
        self._low_index: _Index[tuple[str, str, int]] = _Index()
        self._live_spans = self._live_lows = 0  # keys of each numbering in the last judged horizon

    # -- input ----------------------------------------------------------------------------------------------------
    def add(self, rec: InspectorRecord) -> None:
        self._count(rec.capture_model, 1, int(rec.bw_mismatch))
        comm = self._member(rec.comm_id, rec.comm_name, rec.rank, (rec.hostname, rec.pid), rec.dump_ts_us)
        if rec.exec_time_us is None or rec.exec_time_us <= 0:
            return
        index = rec.dump_ts_us // self.slice_us
        sl = self._slice(index)
        if sl is None:
            return
        self._first_seen((rec.hostname, rec.pid), index)
        p2p = rec.op_kind == "p2p"
        if self.offline:
            self._ops.add((rec.comm_id, rec.op, rec.sn if not p2p else -rec.sn - 1))
        self._fold(sl, index, comm, rec.comm_id, rec.op, p2p, rec.msg_size_bytes, rec.rank, rec.n_ranks,
                   (1, rec.exec_time_us, rec.exec_time_us), (rec.sn, rec.dump_ts_us, rec.sn, rec.dump_ts_us))  # fmt: skip

    def add_summary(self, s: InspectorSummaryRecord) -> None:
        """Fold an agent's window summary (:mod:`agent.collectors.inspector.summary`): its per-slice aggregates are
        the ones :meth:`add` builds from the raw records, so the judgement is the same."""
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
        size = s.bytes // s.count if s.count else s.size_bucket  # the exact size when the bucket holds one
        slices = zip(s.slice_index, s.slice_count, s.slice_exec_sum_us, s.slice_exec_min_us, s.slice_sn_lo,
                     s.slice_sn_lo_ts_us, s.slice_sn_hi, s.slice_sn_hi_ts_us, strict=False)  # fmt: skip
        proc, p2p, earliest = (s.hostname, s.pid), s.op_kind == "p2p", None
        for index, n, total, low, lo, lo_ts, hi, hi_ts in slices:
            at = (s.window_start_us + index * s.slice_us) // self.slice_us
            sl = self._slice(at)
            if sl is not None and n > 0:
                earliest = at if earliest is None else min(earliest, at)
                self._fold(sl, at, comm, s.comm_id, s.op, p2p, size, s.rank, s.n_ranks,
                           (n, total, low), (lo, lo_ts, hi, hi_ts))  # fmt: skip
        if earliest is not None:
            self._first_seen(proc, earliest)

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
            comm = self.comms[comm_id] = _Comm(name or comm_id)
        if comm.members.get(rank) != proc:
            comm.join(rank, proc)
            self._members_version += 1
        if dump_ts_us > self.proc_last.get(proc, 0):
            self.proc_last[proc] = dump_ts_us
        return comm

    def _first_seen(self, proc: Proc, index: int) -> None:
        if index < self.proc_first.get(proc, index + 1):
            self.proc_first[proc] = index

    def _slice(self, index: int) -> _Slice | None:
        """The slice at ``index``; None when it is far older than what is judged now (nothing to add to)."""
        if self.evaluated is not None and index <= self.evaluated - self._reach():
            return None
        if self.evaluated is not None and index <= self.evaluated:  # a process catching up: judge it again
            self._late_from = index if self._late_from is None else min(self._late_from, index)
        sl = self.slices.get(index)
        if sl is None:
            sl = self.slices[index] = _Slice()
        elif sl.packed is not None:
            sl.unpack()
        return sl

    @staticmethod
    def _fold(sl: _Slice, index: int, comm: _Comm, comm_id: str, op: str, p2p: bool, size: int, rank: int,
              n_ranks: int, times: tuple[int, float, float], span: tuple[int, int, int, int]) -> None:  # fmt: skip
        """Add ``times`` (count, sum, minimum of exec times) and the ``coll_sn`` span ``(lo, its ts, hi, its ts)``."""
        sl.version += 1
        if index > comm.last_slice:
            comm.last_slice = index
        lookup = (op, size, rank)
        keys = comm.keys.get(lookup)
        if keys is None:
            # span: each rank's own samples (one dump-thread phase)
            keys = comm.keys[lookup] = ((comm_id, op, size, rank), (comm_id, op, rank), index)
            comm.size_keys[(op, size)] = comm.size_keys.get((op, size), 0) + 1
        elif index > keys[2]:
            keys = comm.keys[lookup] = (keys[0], keys[1], index)
        key, span_key, _ = keys
        lo, lo_ts, hi, hi_ts = span
        spans, aggs = sl._spans, sl._aggs  # unpacked by _slice
        got = spans.get(span_key)
        if got is None:
            got = spans[span_key] = SnSpan.at(lo, lo_ts)
        else:
            got.add(lo, lo_ts)
        got.add(hi, hi_ts)
        agg = aggs.get(key)
        if agg is None:
            agg = aggs[key] = _Agg()
            if not p2p and (op, size) not in comm.op_bytes:
                one_second = bandwidths_gbs(op, n_ranks, size, 1e6)
                comm.op_bytes[(op, size)] = one_second[1] * 1e9 if one_second else 0.0
        agg.merge(*times)

    def extend(self, records: Iterable[InspectorRecord]) -> StragglerEngine:
        for rec in records:
            self.add(rec)
        return self

    @property
    def capture_model(self) -> Literal["ring", "sampled", "mixed"]:
        if self.ring and self.sampled:
            return "mixed"
        return "ring" if self.ring else "sampled"

    # -- evaluation -----------------------------------------------------------------------------------------------
    def complete_slice(self, final: bool = False) -> int | None:
        """The newest slice every live process has written past (``final``: the newest slice there is)."""
        if not self.slices:
            return None
        if final:
            return max(self.slices)
        newest = max(self.proc_last.values())
        live = [ts for ts in self.proc_last.values() if ts >= newest - 2 * self.horizon * self.slice_us]
        return min(live) // self.slice_us - 1

    def evaluate(self, final: bool = False) -> list[Finding]:
        """Judge every slice completed since the last call; the findings confirmed and active now."""
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
            for index in range(first, last + 1):
                if index % every == every - 1:
                    self._judge(index, {p for p, reached in behind.items() if reached <= index})
                self.evaluated = index
            keep = self._reach()
            for old in [i for i in self.slices if i <= last - keep]:
                self._forget_keys(self.slices.pop(old), old)
            # digests serve only the horizon (late records make them again), and slices past it are packed
            like = None
            for index, sl in self.slices.items():
                if index <= last - self._horizon_now:
                    _drop_digests(sl)
                    sl.pack(like)
                    like = sl.packed
            # comms with nothing in the kept slices (an ended job's): forgotten with their keys and best bandwidths
            gone = {cid for cid, comm in self.comms.items() if comm.last_slice <= last - keep}
            for numbering, live in ((self._span_index, self._live_spans), (self._low_index, self._live_lows)):
                if gone or len(numbering.keys) > 4 * live + 1024:
                    numbering.reset()
            if gone:
                self._members_version += 1
                self.comms = {cid: comm for cid, comm in self.comms.items() if cid not in gone}
                self._best_bw = {key: bw for key, bw in self._best_bw.items() if key[0] not in gone}
            # processes with nothing in the kept slices (an ended job's): forgotten, or every restart adds to them
            ended = [p for p, ts in self.proc_last.items() if ts // self.slice_us <= last - keep]
            for proc in ended:
                del self.proc_last[proc]
                self.proc_first.pop(proc, None)
            if ended:
                self._proc_index.reset()
            for proc, spans in list(self._incomplete.items()):
                if not (kept := [span for span in spans if span[1] > last - keep]):
                    del self._incomplete[proc]
                else:
                    self._incomplete[proc] = kept
        return self.active()

    def _forget_keys(self, sl: _Slice, index: int) -> None:
        """Drop the comms' shared keys whose newest slice was ``sl`` (slice ``index``, dropped)."""
        for comm_id, op, size, rank in sl.agg_keys():
            comm = self.comms.get(comm_id)
            if comm is None:
                continue
            lookup = (op, size, rank)
            cached = comm.keys.get(lookup)
            if cached is not None and cached[2] <= index:
                del comm.keys[lookup]
                # the size's last rank gone: its bus bytes and best bandwidth go too
                left = comm.size_keys[(op, size)] = comm.size_keys[(op, size)] - 1
                if not left:
                    del comm.size_keys[(op, size)]
                    comm.op_bytes.pop((op, size), None)
                    self._best_bw.pop((comm_id, op, size), None)

    def _reach(self) -> int:
        """How far behind the last judged slice a slice can still be read: online catch-up judges again at most
        ``catch_up_windows`` horizons back, each judgement reading one (stretched) horizon. Older slices are dropped
        (at 1024 nodes x 8 GPUs a slice holds several MB of aggregates) and records for them ignored."""
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

    def _judge(self, index: int, behind: set[Proc]) -> None:
        # long steps stretch the horizon to ``min_window_steps`` steps: a few ops would give no stable share
        steps_per_slice = self._step_rate * self.slice_us
        horizon = self.horizon
        if steps_per_slice > 0:
            horizon = max(
                horizon, min(20 * horizon, math.ceil(self.params.min_window_steps / steps_per_slice))
            )
        self._horizon_now = horizon
        # slices with no record are time too (long ops complete less often than a slice): kept, empty
        first = max(index - horizon + 1, min(self.slices))
        window = [self.slices.get(i) or _Slice() for i in range(first, index + 1)]
        if not window:
            return
        # first seen: the slice whose evaluation first flagged it (its horizon reaches further back, into healthy time)
        start_us, end_us = index * self.slice_us, (index + 1) * self.slice_us
        unjudged = self._unjudged(first, index) | behind
        flagged = self._compute(window, first, unjudged) + self._communication(window, unjudged)
        # an unjudged process (and its node's network) keeps its standing until its records are complete again
        held = {key for host, pid in unjudged
                for key in ((host, pid, "compute"), (host, None, "compute"), (host, None, "communication"))}  # fmt: skip
        seen = set()
        for f in flagged:
            f.first_ts_us, f.last_ts_us = start_us, end_us
            seen.add(f.key)
            cand = self.candidates.get(f.key)
            if cand is None:
                cand = self.candidates[f.key] = _Candidate(f)
            cand.evals += 1
            cand.evidence += f.z
            cand.slowdowns.append(f.slowdown)
            f.first_ts_us = cand.finding.first_ts_us
            cand.finding = f
            needed = min(self.params.confirm_windows, math.ceil(self.params.evidence_z / max(f.z, 1e-9)))
            if cand.evals >= needed:
                cand.confirmed = True
            cand.flagged_evals += 1
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
        self, window: list[_Slice], first: int
    ) -> tuple[dict[Proc, _ProcShare], Callable[[Proc], list[float]]]:
        """Each process's share of the horizon (``window``, from slice ``first``) spent outside collectives, overall,
        and the function giving it per slice, counted from its first record where that lies within the horizon."""
        p = self.params
        slice_us = p.slice_s * 1e6
        starts: dict[Proc, int] = {}  # a process's first slice in the window

        def start_of(proc: Proc) -> int:
            got = starts.get(proc)
            if got is None:
                got = starts[proc] = min(max(0, self.proc_first.get(proc, first) - first), len(window) - 1)
            return got

        sampled = self.sampled > self.ring
        comms = self.comms
        # ring: every op is there; a process's step rate is its most frequent (comm, coll)'s, and all its keys
        # share the same time, so the most ops of any one key gives it
        most_ops: dict[Proc, int] = {}
        comm_rates: dict[tuple[str, str], list[float]] = defaultdict(list)
        if not sampled:
            ends = [self._sn_ends(sl) for sl in window]
            los = map(min, zip_longest(*(lo for lo, _ in ends), fillvalue=NO_SN))
            his = map(max, zip_longest(*(hi for _, hi in ends), fillvalue=-1))
            live = 0
            for (comm, _op, rank), lo, hi in zip(self._span_index.keys, los, his, strict=False):
                if hi >= 0:  # in the horizon
                    live += 1
                    proc = comms[comm].members[rank]
                    if hi - lo + 1 > most_ops.get(proc, 0):
                        most_ops[proc] = hi - lo + 1
            self._live_spans = live
        else:
            # sampled: the rate between each key's first and last sample of the horizon (a rank's coll_sn grows
            # with its dump time: its oldest slice's low end, its newest slice's high end; two dict merges)
            oldest: dict[SpanKey, SnSpan] = {}
            for sl in reversed(window):
                oldest.update(sl.spans)
            newest: dict[SpanKey, SnSpan] = {}
            for sl in window:
                newest.update(sl.spans)
            for key, last in newest.items():
                first_span = oldest[key]
                if last.hi_ts > first_span.lo_ts and last.hi > first_span.lo:
                    comm_rates[key[:2]].append((last.hi - first_span.lo) / (last.hi_ts - first_span.lo_ts))
        # sampled: each rank's rate is off by up to one op over the horizon, differently per rank: average them
        mean_rate = {key: statistics.fmean(v) for key, v in comm_rates.items()}
        busy: dict[Proc, float] = defaultdict(float)
        ops: dict[Proc, int] = defaultdict(int)
        step_rate: dict[Proc, float] = defaultdict(float)
        rated: dict[Proc, list[tuple[int, float]]] = defaultdict(list)  # sampled: (key number, op rate)
        if not sampled:
            # ring: every op is there, so a process's time in collectives is the sum of its exec times, per slice
            # from the slice's digest (made once per slice, not once per horizon holding it)
            # summed per process index across the slices in one pass at C speed (each column in slice order)
            digests = [self._proc_sums(sl) for sl in window]
            op_sums = map(sum, zip_longest(*(ops_of for ops_of, _ in digests), fillvalue=0))
            time_sums = map(sum, zip_longest(*(times for _, times in digests), fillvalue=0.0))
            # (the numbering may hold processes numbered after these digests were made: zip stops at the digests)
            for proc, done, spent in zip(self._proc_index.keys, op_sums, time_sums, strict=False):
                if done:
                    busy[proc], ops[proc] = spent, done
            for proc, count in most_ops.items():
                step_rate[proc] = count / ((len(window) - start_of(proc)) * slice_us)
        else:
            # sampled: coll_sn counts a (comm, coll)'s ops of every size, so the time a rank spends in a collective is
            # that op rate times the mean exec time of its samples of all sizes (each size's mean times the rate of
            # all of them would count every size as if it alone ran at that rate); per (comm, coll, rank) from the
            # slices' digests, summed across the horizon at C speed
            digests = [self._key_sums(sl) for sl in window]
            op_sums = map(sum, zip_longest(*(ops_of for ops_of, _ in digests), fillvalue=0))
            time_sums = map(sum, zip_longest(*(times for _, times in digests), fillvalue=0.0))
            live = 0
            for number, ((comm, op, rank), n, total) in enumerate(
                zip(self._span_index.keys, op_sums, time_sums, strict=False)
            ):
                if n:
                    live += 1
                    proc = comms[comm].members[rank]
                    rate = mean_rate.get((comm, op), 0.0)
                    busy[proc] += total / n * rate * ((len(window) - start_of(proc)) * slice_us)
                    ops[proc] += n
                    step_rate[proc] = max(step_rate[proc], rate)
                    rated[proc].append((number, rate))
            self._live_spans = live
        lived = {proc: (len(window) - start_of(proc)) * slice_us for proc in busy}
        shares = {proc: _ProcShare(1 - b / lived[proc], ops[proc], len(window) - start_of(proc), step_rate[proc])
                  for proc, b in busy.items()}  # fmt: skip

        def slices_of(proc: Proc) -> list[float]:
            start = start_of(proc)
            if sampled:
                out = []
                for ops_of, times in digests[start:]:
                    spent = 0.0  # in collectives: each key's mean exec time in the slice times its op rate
                    for number, rate in rated[proc]:
                        if number < len(ops_of) and ops_of[number]:
                            spent += times[number] / ops_of[number] * rate * slice_us
                    out.append(1 - spent / slice_us)
                return out
            i = self._proc_index.ids[proc]
            return [1 - (times[i] if i < len(times) else 0.0) / slice_us for _, times in digests[start:]]

        return shares, slices_of

    def _lows(self, sl: _Slice) -> list[float]:
        """The slice's shortest exec time per (comm, coll, size) number, over its ranks."""
        index = self._low_index
        if sl.lows_of != (sl.version, index.version):
            ids, lows = index.ids, [math.inf] * len(index.keys)
            for (comm, op, size, _rank), agg in sl.aggs.items():
                key = (comm, op, size)
                i = ids.get(key)
                if i is None:
                    i = index.number(key)
                    lows.append(math.inf)
                if agg.low < lows[i]:
                    lows[i] = agg.low
            sl.lows, sl.lows_of = lows, (sl.version, index.version)
        return sl.lows

    def _sn_ends(self, sl: _Slice) -> tuple[list[int], list[int]]:
        """The slice's coll_sn low and high ends per (comm, coll, rank) number (``NO_SN`` and -1: none)."""
        index = self._span_index
        if sl.ends_of != (sl.version, index.version):
            ids, los, his = index.ids, [NO_SN] * len(index.keys), [-1] * len(index.keys)
            for key, span in sl.spans.items():
                i = ids.get(key)
                if i is None:
                    i = index.number(key)
                    los.append(NO_SN)
                    his.append(-1)
                los[i], his[i] = span.lo, span.hi
            sl.sn_ends, sl.ends_of = (los, his), (sl.version, index.version)
        return sl.sn_ends

    def _key_sums(self, sl: _Slice) -> tuple[list[int], list[float]]:
        """The slice's ops and exec time sum per (comm, coll, rank) number, over its message sizes."""
        index = self._span_index
        if sl.key_sums_of != (sl.version, index.version):
            sl.key_sums = _sums(sl, index, lambda key: (key[0], key[1], key[3]))
            sl.key_sums_of = (sl.version, index.version)
        return sl.key_sums

    def _proc_sums(self, sl: _Slice) -> tuple[list[int], list[float]]:
        """The slice's ops and exec time sum per process number (made again once the slice, a comm's members or
        the numbering changed)."""
        index, comms = self._proc_index, self.comms
        if sl.sums_of != (sl.version, self._members_version, index.version):
            sl.proc_sums = _sums(sl, index, lambda key: comms[key[0]].members[key[3]])
            sl.sums_of = (sl.version, self._members_version, index.version)
        return sl.proc_sums

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

    def _compute(self, window: list[_Slice], first: int, unjudged: set[Proc]) -> list[Finding]:
        p = self.params
        shares, slices_of = self._shares(window, first)
        out: list[Finding] = []
        rates = [ps.step_rate for ps in shares.values() if ps.step_rate > 0]
        self._step_rate = statistics.median(rates) if rates else 0.0
        if len(window) * self.slice_us * self._step_rate < p.min_window_steps:
            return out  # too few steps yet for a stable share (start of a job, or a horizon still stretching)
        # slices judged one by one must hold a few steps each: with long steps, consecutive slices are pooled
        pool = max(1, math.ceil(p.min_steps / max(self._step_rate * self.slice_us, 1e-9))) if rates else 1
        for everyone in self._jobs(shares):
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
                tail = slices_of(proc)[-lived:]
                if pool > 1:
                    pools = [tail[max(0, end - pool) : end] for end in range(lived, 0, -pool)]
                    tail = [statistics.fmean(chunk) for chunk in reversed(pools)]
                shares[proc].slices = tail
            # each slice against the same slice of the peers: their waits during a burst lower their share then
            slice_meds = [max(statistics.median(shares[proc].slices[i] for proc in job), 1e-9)
                          for i in range(len(shares[job[0]].slices))]  # fmt: skip
            # strict: flagged on its own; leaning: as slow but with half the evidence, enough to join a node-wide
            # finding on its host (its processes cross the bar one by one while the node slows down)
            strict: dict[str, list[Finding]] = defaultdict(list)
            leaning: dict[str, list[Finding]] = defaultdict(list)
            for proc in suspects:
                ps = shares[proc]
                factor, z, cost = ps.share / med, (ps.share - med) / spread, ps.share - med
                per_slice = [x / m for x, m in zip(ps.slices, slice_meds, strict=True)]
                # a one-step hiccup is not a straggler: the excess must span several slices and several steps
                hot = sum(x >= 1 + p.min_excess for x in per_slice)
                if hot < 3 or hot * pool * self.slice_us * ps.step_rate < p.min_steps:
                    continue
                # bursts: with a quarter of the slices back near normal, the slow slices' typical factor is the
                # burst slowdown and the share of time at it that gives the average is the duty cycle
                burst, duty = factor, 1.0
                slow = [x for x in per_slice if x >= factor]
                if slow and sum(x < 1 + (factor - 1) / 3 for x in per_slice) >= 0.25 * len(per_slice):
                    burst = max(factor, statistics.median(slow))
                    duty = (factor - 1) / (burst - 1) if burst > factor else 1.0
                f = self._proc_finding(proc, factor, z, cost, duty, burst, len(job), med)
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
            if skipped:
                note = (f"; {len(skipped)} process(es) not judged, their records incomplete (arrived at their agent "
                        f"after the window closed, or not in yet): " + ", ".join(f"{h} pid {pid}" for h, pid in skipped[:4])
                        + (" ..." if len(skipped) > 4 else ""))  # fmt: skip
                for f in found:
                    f.evidence += note
            out += found
        return out

    def _proc_finding(self, proc: Proc, factor: float, z: float, cost: float, duty: float, burst: float,
                      peers: int, med: float) -> Finding:  # fmt: skip
        memberships = [
            (comm, rank) for comm in self.comms.values() for rank, m in comm.members.items() if m == proc
        ]
        comm_ids = [cid for cid, comm in self.comms.items() if proc in comm.members.values()]
        # named after its node's comm (where it is the one late rank among its neighbours), the largest if several
        comm, rank = min(memberships, key=lambda cr: (-sum(h == proc[0] for h, _ in cr[0].members.values()),
                                                      -len(cr[0].members), cr[0].label))  # fmt: skip
        intermittent = duty < 0.75
        evidence = (
            f"computes {factor:.2f}x longer between collectives than its {peers - 1} peers "
            f"({med * factor:.0%} of the time outside collectives vs {med:.0%}; lateness {z:.1f} robust sd); "
            f"costs the job {cost:.1%} of its time"
            + (
                f"; intermittent: slow in {duty:.0%} of the time, {burst:.2f}x during bursts"
                if intermittent
                else ""
            )
            + f"; arrives last in its {len(memberships)} comm(s), e.g. rank {rank}/{len(comm.members)} of {comm.label}"
        )
        return Finding(proc[0], proc[1], "compute", comm.label, rank, factor, 1.0,
                       evidence, cost=cost, duty_cycle=duty, burst_slowdown=burst, z=z, comm_ids=comm_ids)  # fmt: skip

    @staticmethod
    def _node_finding(host: str, parts: list[Finding], total: int) -> Finding:
        slowdown = statistics.median(f.slowdown for f in parts)
        evidence = (
            f"{len(parts)} of {total} processes on {host} compute {slowdown:.2f}x longer between collectives than "
            f"their peers (node-wide compute slowness: CPU, power or thermal); e.g. pid {parts[0].pid}: "
            f"{parts[0].evidence}"
        )
        return Finding(host, None, "compute", None, None, slowdown, 1.0, evidence,
                       cost=max(f.cost for f in parts), duty_cycle=statistics.median(f.duty_cycle for f in parts),
                       burst_slowdown=statistics.median(f.burst_slowdown for f in parts),
                       z=statistics.median(f.z for f in parts),
                       comm_ids=sorted({cid for f in parts for cid in f.comm_ids}))  # fmt: skip

    # -- communication --------------------------------------------------------------------------------------------
    def _communication(self, window: list[_Slice], unjudged: set[Proc]) -> list[Finding]:
        """Cross-node comms slower than their shape or their own best; localized to the nodes they share. A comm with
        an unjudged member is left out: its transfer time is its last arriver's, whose records may be the ones not in
        (the others' times then include their wait for it)."""
        p = self.params
        # each key's shortest time over the horizon, the slices' lists compared per index at C speed
        lows = [self._lows(sl) for sl in window]
        shortest = map(min, zip_longest(*lows, fillvalue=math.inf))
        low = {key: t for key, t in zip(self._low_index.keys, shortest, strict=False) if t < math.inf}
        self._live_lows = len(low)
        if unjudged:
            partial: dict[str, bool] = {}
            for comm in {key[0] for key in low}:
                partial[comm] = any(m in unjudged for m in self.comms[comm].members.values())
            low = {key: t for key, t in low.items() if not partial[key[0]]}
        bw: dict[tuple[str, str, int], float] = {}
        by_shape: dict[tuple[str, int, int, int], list[float]] = defaultdict(list)
        for key, t in low.items():
            info = self.comms[key[0]]
            hosts = len(info.hosts)
            bus = info.op_bytes.get((key[1], key[2]), 0.0)
            if hosts < 2 or not bus:
                continue  # intra-node comms cannot point at a node's network
            bw[key] = bus / t
            by_shape[(key[1], key[2], len(info.members), hosts)].append(bw[key])
        # the upper quartile of each shape once, not once per comm of it (quadratic in a large job's comms)
        upper = {
            shape: statistics.quantiles(values, n=4)[2]
            for shape, values in by_shape.items()
            if len(values) >= 3
        }
        ratios: dict[str, float] = {}  # comm -> slowness (reference bandwidth / its bandwidth)
        normal: dict[str, float] = {}  # comm -> reference transfer time (µs)
        for key, b in bw.items():
            comm, op, size = key
            info = self.comms[comm]
            shape = (op, size, len(info.members), len(info.hosts))
            refs = [upper[shape]] if shape in upper else []
            best = self._best_bw.get(key)
            if best is not None:
                refs.append(best)
            if not refs:
                continue
            ref = max(refs)
            ratio = ref / b
            if ratio > ratios.get(comm, 0.0):
                ratios[comm] = ratio
                normal[comm] = info.op_bytes[(op, size)] / ref
            if best is None or b > best:
                self._best_bw[key] = b
        slow = {comm for comm, r in ratios.items() if r >= p.comm_slow_ratio}
        fast = set(ratios) - slow
        if not slow or not fast:
            return []  # everything slow (or nothing): no node to single out
        out = []
        for host in self._localize(slow, fast):
            through = sorted(
                (c for c in slow if host in self.comms[c].hosts), key=lambda c: self.comms[c].label
            )
            if len(through) < 2:
                continue  # one slow comm is one slow link or one noisy sample, not a node
            factor = statistics.median(ratios[c] for c in through)
            details = [{"comm": self.comms[c].label, "normal_us": round(normal[c], 1),
                        "observed_us": round(normal[c] * ratios[c], 1), "factor": round(ratios[c], 2)}
                       for c in through]  # fmt: skip
            z = (factor - 1) / 0.05 * len(through) ** 0.5
            labels = [d["comm"] for d in details]
            evidence = (
                f"{len(through)} cross-node comm(s) through {host} transfer {factor:.2f}x slower than comms of the "
                f"same shape or their own best (e.g. {details[0]['comm']}: {details[0]['observed_us']} us vs "
                f"{details[0]['normal_us']} us); its other peers' comms are normal: {', '.join(map(str, labels[:5]))}"
                + (" ..." if len(labels) > 5 else "")
            )
            out.append(Finding(host, None, "communication", str(labels[0]) if len(labels) == 1 else None, None,
                               factor, 1.0, evidence, z=z, comms=details, comm_ids=through))  # fmt: skip
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
