"""The straggler engine's input and storage: records and agents' summaries folded into per-slice aggregates by
numbered key, the communicators and processes they come from, and what is forgotten once no horizon reaches it.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import chain
from typing import Any, Literal

import numpy as np

from ranksight.aggregator.models.straggler.findings import Proc, StragglerParams
from ranksight.aggregator.models.straggler.ledger import (
    DEAD,
    EMPTY,
    F64,
    I64,
    Column,
    Index,
    Ledger,
    Rows,
    run_starts,
)
from ranksight.formats.inspector import bandwidths_gbs
from ranksight.schemas.records import InspectorRecord, InspectorSummaryRecord

AggKey = tuple[str, str, int, int]  # (comm, coll, size, rank)
SpanKey = tuple[str, str, int]  # (comm, coll, rank): coll_sn counts per collective type (p2p_sn per process)
# (comm, coll, size): a comm's transfer time is its shortest exec time of any rank
LowKey = tuple[str, str, int]
# numbered keys nobody holds any more (ended jobs, sizes that came and went) beyond this many, and more than the live
# ones: everything is numbered again
MAX_DEAD_KEYS = 4096
# a summary's per-slice lists, in the order of the rows they make (:class:`Ledger`)
_SUMMARY_LISTS = tuple(
    operator.attrgetter(name)
    for name in ("slice_index", "slice_count", "slice_exec_sum_us", "slice_exec_min_us", "slice_sn_lo",
                 "slice_sn_lo_ts_us", "slice_sn_hi", "slice_sn_hi_ts_us")
)  # fmt: skip


# a slice index computed from a window beyond this is refused (64-bit arithmetic)
_MAX_SLICE = 2.0**62


@dataclass
class Comm:
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


def bus_bytes(op: str, n_ranks: int, size: int) -> float:
    """A collective's bus bytes per rank: its bus bandwidth were it to take one second."""
    one_second = bandwidths_gbs(op, n_ranks, size, 1e6)
    return one_second[1] * 1e9 if one_second else 0.0


class Slices:
    """Records and summaries folded (:meth:`add`, :meth:`add_summaries`) into slices of ``slice_s``; the rows of a
    stretch of slices (:meth:`_window`); slices, keys, comms and processes beyond :meth:`_reach` forgotten."""

    def __init__(self, params: StragglerParams | None = None, offline: bool = True) -> None:
        self.params = p = params or StragglerParams()
        self.offline = offline
        self.slice_us = max(1, int(p.slice_s * 1e6))
        self.horizon = max(1, round(p.window_s / p.slice_s))
        self.records = self.ring = self.sampled = self.bw_mismatches = 0
        self.comms: dict[str, Comm] = {}
        self.slices: dict[int, Rows] = {}
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
        self._ops: set[tuple[str, str, int]] = set()  # (offline)
        # suspects' pool factors by the slice their pool ends at, with the pool's length
        self._pools: dict[Proc, dict[int, tuple[float, int]]] = {}
        self._late_pools: dict[Proc, dict[int, tuple[float, int]]] = {}  # sampled, judged by lateness
        self._horizon_now = self.horizon  # slices judged, stretched for long steps
        self._late_from: int | None = None  # earliest judged slice that received records since
        # slices (first, last) of each process that miss records its agent got after their window had closed
        self._incomplete: dict[Proc, list[tuple[int, int]]] = defaultdict(list)
        # bumped when a rank of a comm gets another process or a comm is forgotten (its ranks' processes change)
        self._members_version = 0
        self._ledger = Ledger()
        self._procs: Index[Proc] = Index()  # numbered again when processes are forgotten
        self._numberings = 0
        self._number_keys()

    def _number_keys(self) -> None:
        """Fresh numberings of the keys (:meth:`_renumber` fills them again with the live ones)."""
        self._numberings += 1
        # aggregate keys, and per number: its (comm, coll, rank), its (comm, coll, size), its comm and the newest slice
        # holding it (-1: none yet; DEAD once forgotten)
        self._aggs: Index[AggKey] = Index()
        self._agg_span, self._agg_low = Column(I64, -1), Column(I64, -1)
        self._agg_comm, self._agg_last = Column(I64, -1), Column(I64, -1)
        # (comm, coll, rank), and per number: its comm, its rank and its (comm, coll) (whose op rate it shares)
        self._spans: Index[SpanKey] = Index()
        self._span_comm, self._span_rank, self._span_rate = (
            Column(I64, -1),
            Column(I64, -1),
            Column(I64, -1),
        )
        self._rate_keys: Index[tuple[str, str]] = Index()
        # (comm, coll, size), and per number: the live aggregate keys of it (the last one gone, it goes too), its comm,
        # coll (numbered in _colls) and size, its bus bytes per rank (0: point-to-point, or none) and its own best bus
        # bandwidth so far (NaN: none)
        self._lows: Index[LowKey] = Index()
        self._colls: Index[str] = Index()
        self._p2p_ops: set[str] = set()  # ops seen as point-to-point (Send, Recv): each recorded by one rank
        self._low_aggs, self._low_comm = Column(I64, 0), Column(I64, -1)
        self._low_op, self._low_size = Column(I64, -1), Column(I64, 0)
        self._low_bus, self._low_best = Column(F64, 0.0), Column(F64, math.nan)
        # comms by number (None: forgotten) and the newest slice holding each
        self._comm_of: list[Comm | None] = []
        self._comm_last = Column(I64, -1)

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

    def _member(self, comm_id: str, name: str | None, rank: int, proc: Proc, dump_ts_us: int) -> Comm:
        comm = self.comms.get(comm_id)
        if comm is None:
            # the plugin writes "unknown" for a communicator created without a name: such a comm goes by its id
            named = name if name and name != "unknown" else comm_id
            comm = self.comms[comm_id] = Comm(comm_id, named, len(self._comm_of))
            self._comm_of.append(comm)
            self._comm_last.append(-1)
        if comm.members.get(rank) != proc:
            comm.join(rank, proc)
            self._members_version += 1
        if dump_ts_us > self.proc_last.get(proc, -1):  # -1: a dump time of 0 makes the process known too
            self.proc_last[proc] = dump_ts_us
        return comm

    def _agg_number(self, comm: Comm, key: AggKey, p2p: bool, n_ranks: int) -> int:
        number = self._aggs.ids.get(key)
        if number is None:
            if p2p:
                self._p2p_ops.add(key[1])
            # Send/Recv: the bytes moved, so a point-to-point comm's bandwidth is its algorithm bandwidth
            number = self._register(
                comm, key, lambda: float(key[2]) if p2p else bus_bytes(key[1], n_ranks, key[2])
            )
        return number

    def _register(self, comm: Comm, key: AggKey, bus: Callable[[], float], best: float = math.nan) -> int:
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
        reach = np.abs(start.astype(F64) + rows["index"].astype(F64) * step.astype(F64)) < _MAX_SLICE
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
            self.slices.setdefault(index, EMPTY)
        folded = np.flatnonzero(reach & (n > 0))
        if not len(folded):
            return
        key = np.repeat(folds["key"], folds["rows"])[folded]
        proc = np.repeat(folds["proc"], folds["rows"])[folded]
        slices = slices[folded]
        by_proc = np.lexsort((slices, proc))  # each process's first slice
        starts = run_starts(proc[by_proc])
        procs = self._procs.keys
        for number, index in zip(
            proc[by_proc][starts].tolist(), slices[by_proc][starts].tolist(), strict=True
        ):
            proc_key = procs[number]
            if index < self.proc_first.get(proc_key, index + 1):
                self.proc_first[proc_key] = index
        np.maximum.at(self._agg_last.values, key, slices)
        np.maximum.at(self._comm_last.values, self._agg_comm.values[key], slices)
        new = Rows(key, n[folded], rows["total"][folded], rows["low"][folded], rows["lo"][folded],
                    rows["lo_ts"][folded], rows["hi"][folded], rows["hi_ts"][folded])  # fmt: skip
        by_slice = np.argsort(slices, kind="stable")
        bounds = [*run_starts(slices[by_slice]).tolist(), len(by_slice)]
        for begin, end in itertools.pairwise(bounds):
            at = int(slices[by_slice[begin]])
            self.slices[at] = Rows.joined([self.slices[at], new.take(by_slice[begin:end])]).reduced()

    def _forget(self, oldest: int) -> None:
        """Drop the slices up to ``oldest``, the keys whose newest slice they were, the comms with nothing in the kept
        slices (an ended job's) and the processes likewise; or every job an aggregator ever followed would stay."""
        for old in [i for i in self.slices if i <= oldest]:
            del self.slices[old]
        dead = np.flatnonzero(self._agg_last.view <= oldest)
        if len(dead):
            self._agg_last.values[dead] = DEAD
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
            self._late_pools.pop(proc, None)
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
        live = np.array(sorted(self._aggs.ids.values()), I64)
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
        new_number = np.full(len(old_keys), -1, I64)
        new_number[live] = np.arange(len(live))  # in the same order: each slice's rows stay sorted
        self.slices = {i: rows._replace(key=new_number[rows.key]) for i, rows in self.slices.items()}

    def _reach(self) -> int:
        """How far behind the last judged slice a slice can still be read: online catch-up judges again at most
        ``catch_up_windows`` horizons back, each judgement reading one (stretched) horizon. Older slices are dropped
        (at 1024 nodes x 8 GPUs a slice holds about 1.5 MB of aggregates) and records for them ignored."""
        return self.params.catch_up_windows * self.horizon + self._horizon_now

    def _window(self, first: int, last: int) -> tuple[Rows, np.ndarray[Any, Any]]:
        """The rows of slices ``first..last`` one after the other, and the position of each row's slice among them."""
        parts = [(pos, rows) for pos, i in enumerate(range(first, last + 1))
                 if (rows := self.slices.get(i)) is not None and len(rows.key)]  # fmt: skip
        if not parts:
            return EMPTY, np.empty(0, I64)
        return (Rows.joined([rows for _, rows in parts]),
                np.concatenate([np.full(len(rows.key), pos, I64) for pos, rows in parts]))  # fmt: skip

    def describe(self, comm: Comm) -> str:
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
