"""Hang localization from Inspector silence: the last ``coll_sn`` each rank of a communicator reported.

The plugin writes a record when a collective completes, so every rank of a communicator normally ends up reporting the
same last ``coll_sn``: at a normal job end, and when a whole job pauses (checkpointing). A hang shows as a communicator
whose collectives stopped advancing (no new ``coll_sn`` from any rank for ``quiet_s``) while some ranks' last reported
``coll_sn`` stays behind their peers': those ranks went silent first (their process stopped, so operations it had
completed were never dumped) and their peers then blocked waiting for them. The finder names them, with the
communicator, the collective and their nodes.

Ring capture only. In the sampled model a rank's last sample is a lower bound of its progress (only the latest operation
per dump tick is written, on each process's own timer), so at a normal end the last samples differ by up to a dump
interval exactly as at a hang: no culprit can be named honestly from them; RAS op counts (``comm_hang``) do.

A rank whose process still dumps while it waits leaves the same last ``coll_sn`` as the peers waiting for it: Inspector
alone cannot tell them apart, and RAS names it. Pure: fed records with their receipt time, asked with a clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ranksight.schemas.records import InspectorRecord

Proc = tuple[str, int]  # (hostname, pid)


@dataclass(frozen=True)
class LaggingRank:
    rank: int
    hostname: str
    pid: int
    coll_sn: int  # the last one it reported


@dataclass(frozen=True)
class Hang:
    """One stalled communicator collective whose lagging ranks went silent behind their peers."""

    comm: str  # comm_name when the plugin gives one, else the hash id
    comm_id: str
    collective: str
    peers_sn: int  # the last coll_sn its other ranks completed
    lagging: tuple[LaggingRank, ...]
    stalled_s: float


@dataclass
class _CommOp:
    label: str
    n_ranks: int
    last: dict[int, tuple[int, Proc]] = field(default_factory=dict)  # rank -> (last coll_sn, process)
    top: int = -1
    advanced_ns: int = 0  # receipt time of the last new top coll_sn


class HangFinder:
    """Per cluster: the last ``coll_sn`` of every rank of every (communicator, collective), folded in per record
    (O(1)); :meth:`hangs` scans the stalled ones."""

    def __init__(self, quiet_s: float) -> None:
        self.quiet_ns = int(quiet_s * 1e9)
        self.comm_ops: dict[tuple[str, str], _CommOp] = {}
        self.proc_seen: dict[
            Proc, tuple[int, str]
        ] = {}  # process -> (receipt time of its latest record, its node)
        self.sampled = False

    def add(self, rec: InspectorRecord, recv_ns: int, node: str) -> None:
        proc = (rec.hostname, rec.pid)
        self.proc_seen[proc] = (recv_ns, node)
        if rec.capture_model == "sampled":
            self.sampled = True
        if rec.op_kind != "coll":
            return
        key = (rec.comm_id, rec.op)
        c = self.comm_ops.get(key)
        if c is None:
            c = self.comm_ops[key] = _CommOp(rec.comm_name or rec.comm_id, rec.n_ranks)
        mine = c.last.get(rec.rank)
        if mine is None or rec.sn >= mine[0]:
            c.last[rec.rank] = (rec.sn, proc)
        if rec.sn > c.top:
            c.top, c.advanced_ns = rec.sn, recv_ns

    def hangs(self, now_ns: int) -> list[Hang]:
        if self.sampled:
            return []  # a sample's coll_sn is only a lower bound: see the module docstring
        out = []
        for (comm_id, op), c in self.comm_ops.items():
            if now_ns - c.advanced_ns < self.quiet_ns or len(c.last) < c.n_ranks:
                continue
            lagging = tuple(
                LaggingRank(rank, proc[0], proc[1], sn)
                for rank, (sn, proc) in sorted(c.last.items())
                if sn < c.top and self._seen_ns(proc) <= c.advanced_ns  # silent since its peers went on
            )
            if lagging:
                out.append(Hang(c.label, comm_id, op, c.top, lagging, (now_ns - c.advanced_ns) / 1e9))
        return out

    def _seen_ns(self, proc: Proc) -> int:
        seen = self.proc_seen.get(proc)
        return seen[0] if seen else 0  # forgotten for its age: silent since long before

    def forget_older_than(self, horizon_ns: int) -> None:
        """Drop collectives that last advanced before the horizon (the job is taken as ended or killed), and
        processes silent since then."""
        self.comm_ops = {k: c for k, c in self.comm_ops.items() if c.advanced_ns >= horizon_ns}
        self.proc_seen = {p: seen for p, seen in self.proc_seen.items() if seen[0] >= horizon_ns}

    def forget_nodes(self, nodes: set[str]) -> None:
        """Drop the processes of ``nodes`` and their ranks (the nodes left live state)."""
        gone = {p for p, (_, node) in self.proc_seen.items() if node in nodes}
        if not gone:
            return
        self.proc_seen = {p: seen for p, seen in self.proc_seen.items() if p not in gone}
        for c in self.comm_ops.values():
            c.last = {rank: last for rank, last in c.last.items() if last[1] not in gone}
        self.comm_ops = {k: c for k, c in self.comm_ops.items() if c.last}


def lagging_evidence(hangs: list[Hang]) -> list[dict[str, object]]:
    """One row per lagging rank of each stalled collective, for an alert's evidence."""
    return [{"hostname": r.hostname, "pid": r.pid, "rank": r.rank, "comm": h.comm, "comm_id": h.comm_id,
             "collective": h.collective, "coll_sn": r.coll_sn, "peers_sn": h.peers_sn}
            for h in hangs for r in h.lagging]  # fmt: skip
