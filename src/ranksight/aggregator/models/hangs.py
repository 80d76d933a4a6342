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

"Silent since its peers went on" compares dump times (the process's latest record against the one that brought the
top ``coll_sn``), so the order in which agents' batches arrive does not matter; and a rank is silent only when no news of it (a later
dump time) arrived for ``quiet_s`` either: a host reading its dump files behind sends late news, not silence. Agents that summarize
(``inspector_summary``) publish each rank's last ``coll_sn`` and dump time in parts every ``part_us``: fed like raw
records, and quiet only after ``quiet_s`` plus that period (the next part may take that long). Older agents' whole
windows report it once per window: quiet after ``quiet_s`` plus one window, and the silence compares windows (the
rank's latest summarized window against the one where the peers reached their last ``coll_sn``), since all of a
window's summaries arrive together, in any order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ranksight.schemas.records import InspectorRecord, InspectorSummaryRecord

Proc = tuple[str, int]  # (hostname, pid)


@dataclass(frozen=True)
class LaggingRank:
    rank: int
    hostname: str
    pid: int
    coll_sn: int  # the last one it reported


def comm_hash(comm_id: str) -> int | str:
    """A communicator hash as a number: Inspector and RAS may print it with different leading zeros."""
    try:
        return int(comm_id, 16)
    except ValueError:
        return comm_id


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
    top_dump_us: int = 0  # dump time of the record that brought it
    gap_us: int = 0  # longest wait for news while it advances: a summary part's period, a whole window
    window_us: int = 0  # fed by whole-window summaries: their window (0: raw records or parts)
    top_window_end_us: int = 0  # whole-window summaries: end of the window where the top coll_sn was reached


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
        self.proc_dump_us: dict[Proc, int] = {}  # process -> dump time of its latest record
        self.proc_window_end_us: dict[Proc, int] = {}  # process -> end of its latest summarized window
        self.proc_news_ns: dict[Proc, int] = {}  # process -> receipt time of its latest later dump time

    def add(self, rec: InspectorRecord, recv_ns: int, node: str) -> None:
        self._progress(rec, rec.sn, rec.dump_ts_us, recv_ns, node)

    def add_summary(self, s: InspectorSummaryRecord, recv_ns: int, node: str) -> None:
        end_us = s.window_start_us + s.window_us
        proc = (s.hostname, s.pid)
        if not s.part_us and end_us > self.proc_window_end_us.get(proc, 0):
            self.proc_news_ns[proc] = recv_ns
        self.proc_window_end_us[proc] = max(self.proc_window_end_us.get(proc, 0), end_us)
        if s.part_us:  # the records read in one period, the last one (ring: the top coll_sn) at the end
            c = self._progress(s, s.sn_last, s.last_dump_ts_us, recv_ns, node)
            if c is not None:
                c.gap_us = max(c.gap_us, s.part_us)
            return
        c = self._fold(s, s.sn_last, recv_ns, node)
        if c is None:
            return
        c.window_us = c.gap_us = s.window_us
        if s.sn_last > c.top:
            c.top, c.advanced_ns, c.top_window_end_us = s.sn_last, recv_ns, end_us

    def _progress(
        self, rec: InspectorRecord | InspectorSummaryRecord, sn: int, dump_us: int, recv_ns: int, node: str
    ) -> _CommOp | None:
        """Fold a rank's progress up to ``sn``, dumped at ``dump_us``."""
        proc = (rec.hostname, rec.pid)
        if dump_us > self.proc_dump_us.get(proc, 0):
            self.proc_dump_us[proc], self.proc_news_ns[proc] = dump_us, recv_ns
        c = self._fold(rec, sn, recv_ns, node)
        if c is not None and sn > c.top:
            c.top, c.advanced_ns, c.top_dump_us = sn, recv_ns, dump_us
        return c

    def _fold(
        self, rec: InspectorRecord | InspectorSummaryRecord, sn: int, recv_ns: int, node: str
    ) -> _CommOp | None:
        proc = (rec.hostname, rec.pid)
        self.proc_seen[proc] = (recv_ns, node)
        if rec.capture_model == "sampled":
            self.sampled = True
        if rec.op_kind != "coll":
            return None
        key = (rec.comm_id, rec.op)
        c = self.comm_ops.get(key)
        if c is None:
            c = self.comm_ops[key] = _CommOp(rec.comm_name or rec.comm_id, rec.n_ranks)
        mine = c.last.get(rec.rank)
        if mine is None or sn >= mine[0]:
            c.last[rec.rank] = (sn, proc)
        return c

    def hangs(self, now_ns: int, read_until: Callable[[str], int | None] | None = None) -> list[Hang]:
        """The stalled collectives now. ``read_until(node)``: the time up to which the node's agent has read its dump
        files (its heartbeat says so; None: unknown); a rank whose agent has not read past the stall plus ``quiet_s``
        is not judged: its silence may be its agent's (starved, frozen), not its own."""
        if self.sampled:
            return []  # a sample's coll_sn is only a lower bound: see the module docstring
        out = []
        for (comm_id, op), c in self.comm_ops.items():
            if now_ns - c.advanced_ns < self.quiet_ns + c.gap_us * 1000 or len(c.last) < c.n_ranks:
                continue
            lagging = tuple(
                LaggingRank(rank, proc[0], proc[1], sn)
                for rank, (sn, proc) in sorted(c.last.items())
                if sn < c.top
                and self._silent_since_top(c, proc)
                and self._sends_nothing(proc, now_ns)
                and self._read_past(c, proc, read_until)
            )
            if lagging:
                out.append(Hang(c.label, comm_id, op, c.top, lagging, (now_ns - c.advanced_ns) / 1e9))
        return out

    def _silent_since_top(self, c: _CommOp, proc: Proc) -> bool:
        """Whether the process reported nothing since its peers went on to the top ``coll_sn``."""
        if c.window_us:
            return self.proc_window_end_us.get(proc, 0) <= c.top_window_end_us
        # forgotten for its age: silent since long before
        return self.proc_dump_us.get(proc, 0) <= c.top_dump_us

    def _read_past(self, c: _CommOp, proc: Proc, read_until: Callable[[str], int | None] | None) -> bool:
        seen = self.proc_seen.get(proc)
        until = read_until(seen[1]) if read_until is not None and seen is not None else None
        return until is None or until >= c.top_dump_us * 1000 + self.quiet_ns

    def _sends_nothing(self, proc: Proc, now_ns: int) -> bool:
        """Whether no news of the process arrived for ``quiet_s``: a host reading its dump files behind keeps sending
        records whose coll_sn trails its peers' (late news, not silence); an old record delivered again is no news."""
        return now_ns - self.proc_news_ns.get(proc, 0) >= self.quiet_ns

    def forget_older_than(self, horizon_ns: int) -> None:
        """Drop collectives that last advanced before the horizon (the job is taken as ended or killed), and
        processes silent since then."""
        self.comm_ops = {k: c for k, c in self.comm_ops.items() if c.advanced_ns >= horizon_ns}
        self.proc_seen = {p: seen for p, seen in self.proc_seen.items() if seen[0] >= horizon_ns}
        self.proc_dump_us = {p: ts for p, ts in self.proc_dump_us.items() if p in self.proc_seen}
        self.proc_news_ns = {p: ns for p, ns in self.proc_news_ns.items() if p in self.proc_seen}
        self.proc_window_end_us = {
            p: end for p, end in self.proc_window_end_us.items() if p in self.proc_seen
        }

    def forget_nodes(self, nodes: set[str]) -> None:
        """Drop the processes of ``nodes`` and their ranks (the nodes left live state)."""
        gone = {p for p, (_, node) in self.proc_seen.items() if node in nodes}
        if not gone:
            return
        self.proc_seen = {p: seen for p, seen in self.proc_seen.items() if p not in gone}
        self.proc_dump_us = {p: ts for p, ts in self.proc_dump_us.items() if p not in gone}
        self.proc_news_ns = {p: ns for p, ns in self.proc_news_ns.items() if p not in gone}
        self.proc_window_end_us = {p: end for p, end in self.proc_window_end_us.items() if p not in gone}
        for c in self.comm_ops.values():
            c.last = {rank: last for rank, last in c.last.items() if last[1] not in gone}
        self.comm_ops = {k: c for k, c in self.comm_ops.items() if c.last}


def lagging_evidence(hangs: list[Hang]) -> list[dict[str, object]]:
    """One row per lagging rank of each stalled collective, for an alert's evidence."""
    return [{"hostname": r.hostname, "pid": r.pid, "rank": r.rank, "comm": h.comm, "comm_id": h.comm_id,
             "collective": h.collective, "coll_sn": r.coll_sn, "peers_sn": h.peers_sn}
            for h in hangs for r in h.lagging]  # fmt: skip
