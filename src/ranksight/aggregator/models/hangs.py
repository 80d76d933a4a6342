"""Hang localization from Inspector silence: the last ``coll_sn`` each rank of a communicator reported.

The plugin writes a record when a collective completes, so every rank of a communicator normally ends up reporting the
same last ``coll_sn``: at a normal job end, and when a whole job pauses (checkpointing). A hang shows as a communicator
whose collectives stopped advancing (no new ``coll_sn`` from any rank for ``quiet_s``) while some ranks' last reported
``coll_sn`` stays behind their peers': those ranks went silent first (their process stopped, so operations it had
completed were never dumped) and their peers then blocked waiting for them. The finder names them, with the
communicator, the collective and their nodes.

Sampled capture (the 2.28/2.29 plugin: one slot per communicator, the last op completed of any type, written at a
dump tick only when one completed since the last; ``coll_sn`` counted per type) has no ring to compare, but a process
that lives on writes, at its next tick, the last op it completed on each communicator. Once every communicator of a
job (those linked by shared processes) is quiet, every rank still running reports on each the same last (collective,
``coll_sn``), the one its latest-dumped record holds; a rank that reports an older one, silent since, went silent before
its peers completed it. A repeated sample (the same op again) is no progress. Two limits, since a process that exits at
a job's end also loses what it completed after its last tick: the ranks behind are named only when they are a minority
of the job's processes (at an end most are behind somewhere; at a hang all but the hung process caught up), and only
when their peers completed at least two more of their last collective (a process exiting a dump tick early misses one
when a step takes about a dump interval, as a hung one does: then nothing is named). A hung process whose last tick
came after its last completed op is behind nowhere, as in ring capture. RAS names both.

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
    collective: str = ""  # sampled capture: the collective of that coll_sn when not the stalled one


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


@dataclass
class _Slot:
    """A rank's latest sampled record of one communicator."""

    dump_us: int
    window_end_us: int  # whole-window summaries: the end of its window (0: raw records or parts)
    op: str
    sn: int
    proc: Proc


@dataclass
class _CommSlots:
    """Sampled capture: the latest record of every rank of a communicator, whatever its collective."""

    label: str
    n_ranks: int
    latest: dict[int, _Slot] = field(default_factory=dict)
    changed_ns: int = 0  # receipt time of the last record that moved a rank to another op
    gap_us: int = 0


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
        self.slots: dict[str, _CommSlots] = {}  # sampled capture, by communicator

    def add(self, rec: InspectorRecord, recv_ns: int, node: str) -> None:
        self._progress(rec, rec.sn, rec.dump_ts_us, recv_ns, node)
        self._sample(rec, rec.sn, rec.dump_ts_us, 0, recv_ns, 0)

    def add_summary(self, s: InspectorSummaryRecord, recv_ns: int, node: str) -> None:
        end_us = s.window_start_us + s.window_us
        proc = (s.hostname, s.pid)
        if not s.part_us and end_us > self.proc_window_end_us.get(proc, 0):
            self.proc_news_ns[proc] = recv_ns
        self.proc_window_end_us[proc] = max(self.proc_window_end_us.get(proc, 0), end_us)
        self._sample(
            s, s.sn_last, s.last_dump_ts_us, 0 if s.part_us else end_us, recv_ns, s.part_us or s.window_us
        )
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

    def _sample(
        self,
        rec: InspectorRecord | InspectorSummaryRecord,
        sn: int,
        dump_us: int,
        window_end_us: int,
        recv_ns: int,
        gap_us: int,
    ) -> None:
        """Sampled capture: keep the rank's latest record of the communicator (by dump time)."""
        if rec.capture_model != "sampled" or rec.op_kind != "coll":
            return
        c = self.slots.get(rec.comm_id)
        if c is None:
            c = self.slots[rec.comm_id] = _CommSlots(rec.comm_name or rec.comm_id, rec.n_ranks)
        c.gap_us = max(c.gap_us, gap_us)
        mine = c.latest.get(rec.rank)
        if mine is not None and (dump_us, sn) <= (mine.dump_us, mine.sn):
            return  # older, or the same sample again
        if mine is None or (mine.op, mine.sn) != (rec.op, sn):
            c.changed_ns = recv_ns
        c.latest[rec.rank] = _Slot(dump_us, window_end_us, rec.op, sn, (rec.hostname, rec.pid))

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
            return self._sampled_hangs(now_ns, read_until)
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

    def _sampled_hangs(self, now_ns: int, read_until: Callable[[str], int | None] | None) -> list[Hang]:
        """Sampled capture: once every communicator of a job (those linked by shared processes) is quiet, on each the
        ranks whose latest record is not the op its latest-dumped record holds, silent since; named where the ranks
        behind anywhere are a minority of the job's processes."""

        def quiet(c: _CommSlots) -> bool:
            return now_ns - c.changed_ns >= self.quiet_ns + c.gap_us * 1000 and len(c.latest) >= c.n_ranks

        if not any(quiet(c) for c in self.slots.values()):
            return []  # the common case, checked in one pass
        comms = list(self.slots.items())
        out = []
        for job in _jobs([{slot.proc for slot in c.latest.values()} for _, c in comms]):
            if not all(quiet(comms[i][1]) for i in job):
                continue  # part of the job still runs (or is yet unseen): judged once all of it is quiet
            procs: set[Proc] = set()
            behind: set[Proc] = set()
            hangs = []
            for comm_id, c in (comms[i] for i in job):
                top = max(c.latest.values(), key=lambda slot: (slot.dump_us, slot.sn))
                procs |= {slot.proc for slot in c.latest.values()}
                late = {
                    rank: slot for rank, slot in c.latest.items() if (slot.op, slot.sn) != (top.op, top.sn)
                }
                behind |= {slot.proc for slot in late.values()}
                silent = tuple(
                    LaggingRank(rank, slot.proc[0], slot.proc[1], slot.sn, slot.op)
                    for rank, slot in sorted(late.items())
                    if self._trails(comm_id, slot)
                    and self._silent_since_slot(top, slot.proc)
                    and self._sends_nothing(slot.proc, now_ns)
                    and self._read_past_us(top.dump_us, slot.proc, read_until)
                )
                if silent:
                    hangs.append(
                        Hang(c.label, comm_id, top.op, top.sn, silent, (now_ns - c.changed_ns) / 1e9)
                    )
            if 2 * len(behind) < len(procs):  # most of the job caught up everywhere: not its end
                out += hangs
        return out

    def _trails(self, comm_id: str, slot: _Slot) -> bool:
        """Whether its peers completed at least two more of the rank's last collective: one more is what a process
        that exits at a job's end before its last dump tick loses as well (when a step is about a dump interval)."""
        c = self.comm_ops.get((comm_id, slot.op))
        return c is not None and c.top - slot.sn >= 2

    def _silent_since_slot(self, top: _Slot, proc: Proc) -> bool:
        """Whether the process reported nothing since the communicator's latest-dumped record."""
        if top.window_end_us:
            return self.proc_window_end_us.get(proc, 0) <= top.window_end_us
        return self.proc_dump_us.get(proc, 0) <= top.dump_us

    def _silent_since_top(self, c: _CommOp, proc: Proc) -> bool:
        """Whether the process reported nothing since its peers went on to the top ``coll_sn``."""
        if c.window_us:
            return self.proc_window_end_us.get(proc, 0) <= c.top_window_end_us
        # forgotten for its age: silent since long before
        return self.proc_dump_us.get(proc, 0) <= c.top_dump_us

    def _read_past(self, c: _CommOp, proc: Proc, read_until: Callable[[str], int | None] | None) -> bool:
        return self._read_past_us(c.top_dump_us, proc, read_until)

    def _read_past_us(self, dump_us: int, proc: Proc, read_until: Callable[[str], int | None] | None) -> bool:
        seen = self.proc_seen.get(proc)
        until = read_until(seen[1]) if read_until is not None and seen is not None else None
        return until is None or until >= dump_us * 1000 + self.quiet_ns

    def _sends_nothing(self, proc: Proc, now_ns: int) -> bool:
        """Whether no news of the process arrived for ``quiet_s``: a host reading its dump files behind keeps sending
        records whose coll_sn trails its peers' (late news, not silence); an old record delivered again is no news."""
        return now_ns - self.proc_news_ns.get(proc, 0) >= self.quiet_ns

    def forget_older_than(self, horizon_ns: int) -> None:
        """Drop collectives that last advanced before the horizon (the job is taken as ended or killed), and
        processes silent since then."""
        self.comm_ops = {k: c for k, c in self.comm_ops.items() if c.advanced_ns >= horizon_ns}
        self.slots = {k: c for k, c in self.slots.items() if c.changed_ns >= horizon_ns}
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
        for s in self.slots.values():
            s.latest = {rank: slot for rank, slot in s.latest.items() if slot.proc not in gone}
        self.slots = {k: s for k, s in self.slots.items() if s.latest}


def _jobs(members: list[set[Proc]]) -> list[list[int]]:
    """The communicators (indices into ``members``, each its processes) grouped by job: linked by a shared process."""
    owner: dict[Proc, int] = {}
    parent = list(range(len(members)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, procs in enumerate(members):
        for proc in procs:
            parent[root(owner.setdefault(proc, i))] = root(i)
    groups: dict[int, list[int]] = {}
    for i in range(len(members)):
        groups.setdefault(root(i), []).append(i)
    return list(groups.values())


def lagging_evidence(hangs: list[Hang]) -> list[dict[str, object]]:
    """One row per lagging rank of each stalled collective, for an alert's evidence."""
    return [{"hostname": r.hostname, "pid": r.pid, "rank": r.rank, "comm": h.comm, "comm_id": h.comm_id,
             "collective": h.collective, "coll_sn": r.coll_sn, "peers_sn": h.peers_sn}
            | ({"last_collective": r.collective} if r.collective and r.collective != h.collective else {})
            for h in hangs for r in h.lagging]  # fmt: skip
