"""Cross-rank matching of Flight Recorder dumps: who never arrived, who called something else, where ranks diverged.

Within one process group every member enqueues the same collectives in the same order, numbered by
``collective_seq_id`` (point-to-point calls by ``p2p_seq_id``, counted apart). So, per group:

* **collective_hang**: some members enqueued collective ``s`` (and the ones still waiting in it have not completed it)
  while others' last enqueued is below ``s``: those never arrived. The lowest such ``s`` is the op the others wait in.
* **collective_mismatch**: at one sequence id members enqueued calls that cannot meet: another op, other sizes, other
  dtypes. The verdicts are Flight Recorder's own classes (``COLLECTIVE_TYPE_MISMATCH``, ``SIZE_OR_SYNTAX_MISMATCH``,
  ``COLLECTIVE_DTYPE_MISMATCH``); the reference call is the one most members made, so the odd rank out is named; when
  as many members made another call (two ranks of a two-rank group), both sides are named.
* **rank_without_dump**: a member whose dump is missing (a dead process, an unreachable node); the finding names the
  last op the members that answered had entered.
* **p2p_hang**: a send on rank A to B that B never posted the matching recv for (or a recv on B from A that A never
  sent): fr_trace's pairing, a send ``A->B`` with a recv ``B<-A`` of the same group, the k-th of one with the k-th of
  the other in ``p2p_seq_id`` order (among the ops not yet completed). The peer that never posted is named; the peers
  in ``profiling_name`` are group ranks, mapped to global ranks through the group's sorted members (``pg_config``'s
  ranks where torch filled them in, else the ranks seen in the group). A paired send and recv whose sizes or dtypes
  differ are a ``collective_mismatch`` with ``seq_kind`` ``p2p`` (fr_trace: the send's input sizes against the recv's
  output sizes), naming both ends.

A rank missing from one group's op because it waits in another group's hung op is held up there, not a cause
(``blocked_ranks``). The findings none of whose ranks is held up come first, each part ordered by the time its op was
created: the first is where the ranks diverged first. A rank named by a finding comes with where it is: its main thread's innermost frame of its own code when its dump carries Python
stacks (ranksight's dumps do), else the call site of its entry at that sequence id, else of the last op it entered.
Pure: dumps in, a report out.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ranksight.core.flightrec.load import MAX_RANKS, Entry, Frame, RankDump

TYPE_MISMATCH = "COLLECTIVE_TYPE_MISMATCH"
SIZE_MISMATCH = "SIZE_OR_SYNTAX_MISMATCH"
DTYPE_MISMATCH = "COLLECTIVE_DTYPE_MISMATCH"
# ops whose ranks legitimately differ in input (scatter root, all_to_all splits) or output (gather root) shapes
_INPUTS_MAY_DIFFER = frozenset(
    {"scatter", "all_to_all", "all_to_all_single", "all_to_all_v_single", "broadcast"}
)
_OUTPUTS_MAY_DIFFER = frozenset({"gather", "all_to_all", "all_to_all_single", "all_to_all_v_single"})
_LIBRARY_PATH_MARKS = ("/site-packages/", "/dist-packages/", "/lib/python3")


@dataclass
class Finding:
    kind: str
    process_group: str  # "name:description", or the name when torch has no description
    collective: str
    seq: int
    missing_ranks: list[int] = field(default_factory=list)
    mismatched_ranks: list[int] = field(default_factory=list)
    waiting_ranks: list[int] = field(default_factory=list)
    waiting_s: float | None = None
    created_ns: int | None = None  # when the first rank enqueued the op (orders findings)
    verdicts: dict[int, dict[str, Any]] = field(default_factory=dict)
    frames: dict[int, dict[str, Any]] = field(default_factory=dict)
    seq_kind: str = "collective"
    first_divergence: bool = False
    group_ranks: list[int] = field(default_factory=list)  # the group's members (global ranks) as far as known
    # missing ranks that are waiting in another group's hung op: held up there, not the cause here
    blocked_ranks: dict[int, dict[str, Any]] = field(default_factory=dict)

    @property
    def culprits(self) -> list[int]:
        """The ranks this finding blames: those that never arrived (or called something else) and are not held up
        in another finding's op."""
        return [r for r in self.missing_ranks or self.mismatched_ranks if r not in self.blocked_ranks]

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "process_group": self.process_group,
            "collective": self.collective,
            "seq": self.seq,
            "seq_kind": self.seq_kind,
            "missing_ranks": self.missing_ranks,
            "mismatched_ranks": self.mismatched_ranks,
            "waiting_ranks": self.waiting_ranks,
            "waiting_s": None if self.waiting_s is None else round(self.waiting_s, 3),
            "first_divergence": self.first_divergence,
            "group_ranks": self.group_ranks,
            "blocked_ranks": {str(r): v for r, v in sorted(self.blocked_ranks.items())},
            "verdicts": {str(r): v for r, v in sorted(self.verdicts.items())},
            "frames": {str(r): v for r, v in sorted(self.frames.items())},
        }


@dataclass
class HangReport:
    findings: list[Finding]
    ranks_seen: list[int]
    ranks_missing_dump: list[int]
    world_size: int | None

    @property
    def hang(self) -> bool:
        return bool(self.findings)

    def as_dict(self) -> dict[str, Any]:
        return {
            "findings": [f.as_dict() for f in self.findings],
            "ranks_seen": self.ranks_seen,
            "ranks_missing_dump": self.ranks_missing_dump,
            "world_size": self.world_size,
        }


@dataclass
class _Group:
    name: str
    desc: str = ""
    pg_id: int | None = None
    members: set[int] = field(default_factory=set)
    collectives: dict[int, dict[int, Entry]] = field(
        default_factory=lambda: defaultdict(dict)
    )  # rank -> seq -> entry
    enqueued: dict[int, int] = field(default_factory=dict)
    completed: dict[int, int] = field(default_factory=dict)
    p2p: dict[int, list[Entry]] = field(default_factory=lambda: defaultdict(list))  # rank -> its P2P entries
    configured: tuple[int, ...] = ()  # the members pg_config lists, in order (empty for gloo)

    @property
    def label(self) -> str:
        return f"{self.name}:{self.desc}" if self.desc and self.desc != "undefined" else self.name


def analyze(dumps: Sequence[RankDump], world_size: int | None = None, min_wait_s: float = 0.0) -> HangReport:
    """Match ``dumps`` (one per rank) across ranks. ``world_size`` (else the dumps' own, else one past the highest rank
    seen) decides which ranks' dumps are missing; a lagging rank is reported only once the ranks that entered the op
    have waited ``min_wait_s`` where that is known (dumps taken a moment apart in a healthy job differ by an op)."""
    by_rank = {d.rank: d for d in dumps}
    configured = [r for d in dumps for ranks in d.pg_ranks.values() for r in ranks]
    world = min(
        world_size
        or max((d.world_size or 0 for d in dumps), default=0)
        or (max(configured + list(by_rank), default=-1) + 1),
        MAX_RANKS,
    )
    missing_dump = sorted(set(range(world)) - set(by_rank))
    findings: list[Finding] = []
    for group in _groups(by_rank, world).values():
        for finding in _group_findings(group, by_rank, missing_dump, min_wait_s):
            finding.group_ranks = sorted(group.members)
            findings.append(finding)
    _mark_blocked(findings)
    # a finding whose ranks are all where they are by their own doing comes before one they hold up
    findings.sort(key=lambda f: (bool(f.blocked_ranks), f.created_ns is None, f.created_ns or 0, f.kind))
    if findings:
        findings[0].first_divergence = True
    return HangReport(findings, sorted(by_rank), missing_dump, world or None)


def _mark_blocked(findings: list[Finding]) -> None:
    """Fill in each finding's ``blocked_ranks``: a rank missing from one group's op because it waits in another
    group's hung op (a member of both, held up there). It is blocked only where that other op's hang has a cause
    of its own, a rank that waits nowhere (or one blocked in turn, followed to such a rank); ranks that only wait
    on each other across groups (a deadlock) all stay named."""
    waits_in: dict[int, list[Finding]] = defaultdict(list)
    for finding in findings:
        for rank in finding.waiting_ranks:
            waits_in[rank].append(finding)

    def elsewhere(finding: Finding, rank: int) -> list[Finding]:
        return [other for other in waits_in.get(rank, []) if other is not finding]

    caused = {
        id(f) for f in findings if any(not elsewhere(f, r) for r in f.missing_ranks or f.mismatched_ranks)
    }
    while True:
        more = {id(f) for f in findings if id(f) not in caused and any(
            any(id(other) in caused for other in elsewhere(f, r)) for r in f.missing_ranks)}  # fmt: skip
        if not more:
            break
        caused |= more
    for finding in findings:
        for rank in finding.missing_ranks:
            held = next((other for other in elsewhere(finding, rank) if id(other) in caused), None)
            if held is not None:
                finding.blocked_ranks[rank] = {"process_group": held.process_group, "collective": held.collective,
                                               "seq": held.seq, "seq_kind": held.seq_kind}  # fmt: skip


def _groups(by_rank: dict[int, RankDump], world: int) -> dict[str, _Group]:
    groups: dict[str, _Group] = {}
    names_by_id: dict[int, str] = {}
    for rank, dump in by_rank.items():
        for entry in dump.entries:
            group = groups.setdefault(entry.pg_name, _Group(entry.pg_name))
            group.desc = group.desc or entry.pg_desc
            if entry.pg_id is not None:
                group.pg_id = entry.pg_id
                names_by_id[entry.pg_id] = entry.pg_name
            group.members.add(rank)
            if entry.is_p2p:
                group.p2p[rank].append(entry)
            else:
                group.collectives[rank][entry.collective_seq_id] = entry
    for dump in by_rank.values():
        for name, ranks in dump.pg_ranks.items():
            if name in groups:  # gloo's pg_config has one nameless group, which joins no entry
                groups[name].members.update(ranks)
                groups[name].configured = tuple(sorted(ranks))
    for rank, dump in by_rank.items():
        for pg_id, status in dump.pg_status.items():
            name = names_by_id.get(pg_id, str(pg_id))
            group = groups.setdefault(name, _Group(name, pg_id=pg_id))
            group.members.add(rank)
            group.enqueued[rank] = status.last_enqueued
            group.completed[rank] = status.last_completed
    if "0" in groups:  # the default group spans the world
        groups["0"].members.update(range(world))
    for group in groups.values():
        for rank, entries in group.collectives.items():
            group.enqueued.setdefault(rank, max(entries, default=0))
            group.completed.setdefault(rank, -1)
    return groups


def _group_findings(
    group: _Group, by_rank: dict[int, RankDump], missing_dump: list[int], min_wait_s: float
) -> Iterable[Finding]:
    answered = sorted(r for r in group.members if r in by_rank)
    enqueued = {r: max(group.enqueued.get(r, 0), 0) for r in answered}
    if not enqueued:
        return
    lowest, highest = min(enqueued.values()), max(enqueued.values())
    if lowest < highest:
        finding = _lag_finding(group, by_rank, enqueued, lowest + 1)
        if finding.waiting_s is None or finding.waiting_s >= min_wait_s:
            yield finding
    mismatch = _first_mismatch(group, by_rank, answered)
    if mismatch is not None:
        yield mismatch
    absent = sorted(set(missing_dump) & group.members)
    if absent:
        yield _absent_finding(group, by_rank, enqueued, highest, absent)
    for finding in _p2p_findings(group, by_rank):
        if finding.waiting_s is None or finding.waiting_s >= min_wait_s:
            yield finding


def _lag_finding(group: _Group, by_rank: dict[int, RankDump], enqueued: dict[int, int], seq: int) -> Finding:
    entered = sorted(r for r, last in enqueued.items() if last >= seq)
    missing = sorted(r for r, last in enqueued.items() if last < seq)
    ops = [group.collectives[r][seq] for r in entered if seq in group.collectives[r]]
    waiting = [r for r in entered if group.completed.get(r, -1) < seq]
    finding = Finding(
        kind="collective_hang",
        process_group=group.label,
        collective=_most_common(e.collective for e in ops) if ops else "unknown",
        seq=seq,
        missing_ranks=missing,
        waiting_ranks=waiting,
        created_ns=min((e.time_created_ns for e in ops), default=None),
    )
    finding.waiting_s = _waited(finding.created_ns, [by_rank[r] for r in waiting or entered])
    for rank in missing:
        finding.frames[rank] = _where(by_rank[rank], _last_entry(group, rank))
    return finding


def _first_mismatch(group: _Group, by_rank: dict[int, RankDump], answered: list[int]) -> Finding | None:
    seqs = sorted({s for r in answered for s in group.collectives.get(r, {})})
    for seq in seqs:
        calls = {r: group.collectives[r][seq] for r in answered if seq in group.collectives.get(r, {})}
        if len(calls) < 2:
            continue
        reference = _most_common_call(calls)
        against = dict.fromkeys(calls, reference)
        verdicts = {r: v for r, e in calls.items() if (v := _verdict(reference, e)) is not None}
        if not verdicts:
            continue
        counts = Counter(_signature(e) for e in calls.values())
        rival = next((calls[r] for r in sorted(verdicts)
                      if counts[_signature(calls[r])] == counts[_signature(reference)]), None)  # fmt: skip
        if (
            rival is not None
        ):  # as many members made another call: nothing says which side is odd, both are named
            for rank, call in calls.items():
                if rank not in verdicts and (v := _verdict(rival, call)) is not None:
                    verdicts[rank], against[rank] = v, rival
        finding = Finding(
            kind="collective_mismatch",
            process_group=group.label,
            collective=reference.collective,
            seq=seq,
            mismatched_ranks=sorted(verdicts),
            waiting_ranks=sorted(r for r in calls if group.completed.get(r, -1) < seq),
            created_ns=min(e.time_created_ns for e in calls.values()),
        )
        finding.waiting_s = _waited(finding.created_ns, [by_rank[r] for r in calls])
        for rank, verdict in verdicts.items():
            call = calls[rank]
            finding.verdicts[rank] = _verdict_of(verdict, call, against[rank])
            finding.frames[rank] = _where(by_rank[rank], call)
        return finding
    return None


def _p2p_findings(group: _Group, by_rank: dict[int, RankDump]) -> Iterable[Finding]:
    """Sends and recvs not yet completed, paired per (sender, receiver) in ``p2p_seq_id`` order; one finding per
    pair of ranks whose first unpaired op waits for a peer that has a dump but never posted its side."""
    order = group.configured or tuple(sorted(group.members))
    sends: dict[tuple[int, int], list[Entry]] = defaultdict(list)
    recvs: dict[tuple[int, int], list[Entry]] = defaultdict(list)
    for entries in group.p2p.values():
        for entry in sorted(entries, key=lambda e: e.p2p_seq_id):
            pair = _p2p_pair(entry, order)
            if pair is not None and entry.state != "completed":
                (sends if entry.op == "send" else recvs)[pair].append(entry)
    for pair in sorted(set(sends) | set(recvs)):
        posted, answered = sends.get(pair, []), recvs.get(pair, [])
        src, dst = pair
        mismatch = _p2p_mismatch(group, by_rank, pair, list(zip(posted, answered, strict=False)))
        if mismatch is not None:
            yield mismatch
        if len(posted) > len(answered):
            waiter, absent, op = src, dst, posted[len(answered)]
        elif len(answered) > len(posted):
            waiter, absent, op = dst, src, answered[len(posted)]
        else:
            continue
        if absent not in by_rank or waiter not in by_rank:
            continue  # a peer without a dump is rank_without_dump's
        finding = Finding(kind="p2p_hang", process_group=group.label, collective=op.collective, seq=op.p2p_seq_id,
                          missing_ranks=[absent], waiting_ranks=[waiter], created_ns=op.time_created_ns,
                          seq_kind="p2p")  # fmt: skip
        finding.waiting_s = _waited(op.time_created_ns, [by_rank[waiter]])
        peer_entries = group.p2p.get(absent, [])
        finding.frames[absent] = _where(by_rank[absent], _last_entry(group, absent) or
                                        (max(peer_entries, key=lambda e: e.p2p_seq_id) if peer_entries else None))  # fmt: skip
        yield finding


def _p2p_mismatch(
    group: _Group, by_rank: dict[int, RankDump], ranks: tuple[int, int], pairs: list[tuple[Entry, Entry]]
) -> Finding | None:
    """The first paired send and recv that cannot meet: fr_trace's rule, the send's input sizes against the recv's
    output sizes (``SIZE_OR_SYNTAX_MISMATCH``), and their dtypes. Both ends are named: neither side is the reference."""
    for send, recv in pairs:
        if send.input_sizes != recv.output_sizes:
            verdict = SIZE_MISMATCH
        elif _dtypes(send) != _dtypes(recv):
            verdict = DTYPE_MISMATCH
        else:
            continue
        ends = {ranks[0]: (send, recv), ranks[1]: (recv, send)}
        finding = Finding(kind="collective_mismatch", process_group=group.label, collective=send.collective,
                          seq=send.p2p_seq_id, mismatched_ranks=sorted(ends), waiting_ranks=sorted(ends),
                          created_ns=min(send.time_created_ns, recv.time_created_ns),
                          seq_kind="p2p")  # fmt: skip
        finding.waiting_s = _waited(finding.created_ns, [by_rank[r] for r in ends if r in by_rank])
        for rank, (call, peer) in ends.items():
            finding.verdicts[rank] = _verdict_of(verdict, call, peer, peer_outputs=True)
            if rank in by_rank:
                finding.frames[rank] = _where(by_rank[rank], call)
        return finding
    return None


def _p2p_pair(entry: Entry, order: tuple[int, ...]) -> tuple[int, int] | None:
    """(sender, receiver) as global ranks of a send ``"a->b"`` or a recv ``"b<-a"`` (group ranks in torch's name)."""
    if entry.op == "send":
        src, sep, dst = entry.peers.partition("->")
    elif entry.op == "recv":
        dst, sep, src = entry.peers.partition("<-")
    else:
        return None
    try:
        local = int(src), int(dst)
    except ValueError:
        return None
    if not sep or not all(0 <= r < len(order) for r in local):
        return None
    return order[local[0]], order[local[1]]


def _absent_finding(
    group: _Group, by_rank: dict[int, RankDump], enqueued: dict[int, int], highest: int, absent: list[int]
) -> Finding:
    last = [
        group.collectives[r][highest]
        for r, s in enqueued.items()
        if s == highest and highest in group.collectives[r]
    ]
    waiting = sorted(r for r, s in enqueued.items() if s == highest and group.completed.get(r, -1) < highest)
    created = min((e.time_created_ns for e in last), default=None)
    return Finding(
        kind="rank_without_dump",
        process_group=group.label,
        collective=_most_common(e.collective for e in last) if last else "unknown",
        seq=highest,
        missing_ranks=absent,
        waiting_ranks=waiting,
        created_ns=created,
        waiting_s=_waited(created, [by_rank[r] for r in waiting]) if waiting else None,
    )


def _verdict(reference: Entry, call: Entry) -> str | None:
    if call.op != reference.op:
        return TYPE_MISMATCH
    if call.op not in _INPUTS_MAY_DIFFER and call.input_sizes != reference.input_sizes:
        return SIZE_MISMATCH
    if call.op not in _OUTPUTS_MAY_DIFFER and call.output_sizes != reference.output_sizes:
        return SIZE_MISMATCH
    if _dtypes(call) != _dtypes(reference):
        return DTYPE_MISMATCH
    return None


def _verdict_of(verdict: str, call: Entry, expected: Entry, peer_outputs: bool = False) -> dict[str, Any]:
    """A named rank's call and what it was judged against (the peer's output sizes too, for a send or recv)."""
    against: dict[str, Any] = {"collective": expected.collective,
                               "input_sizes": [list(s) for s in expected.input_sizes]}  # fmt: skip
    if peer_outputs:
        against["output_sizes"] = [list(s) for s in expected.output_sizes]
    return {
        "verdict": verdict,
        "collective": call.collective,
        "input_sizes": [list(s) for s in call.input_sizes],
        "output_sizes": [list(s) for s in call.output_sizes],
        "input_dtypes": list(call.input_dtypes),
        "expected": {**against, "input_dtypes": list(expected.input_dtypes)},
    }


def _dtypes(entry: Entry) -> frozenset[str]:
    return frozenset(entry.input_dtypes) | frozenset(entry.output_dtypes)


def _signature(entry: Entry) -> tuple[Any, ...]:
    return (entry.op, entry.input_sizes, entry.output_sizes, _dtypes(entry))


def _most_common_call(calls: dict[int, Entry]) -> Entry:
    counts = Counter(_signature(e) for e in calls.values())
    best = max(counts.values())
    # ties go to the lowest rank's call, so the outcome never depends on dict order
    return next(calls[r] for r in sorted(calls) if counts[_signature(calls[r])] == best)


def _most_common(names: Iterable[str]) -> str:
    counts = Counter(names)
    return max(sorted(counts), key=lambda n: counts[n])


def _last_entry(group: _Group, rank: int) -> Entry | None:
    entries = group.collectives.get(rank, {})
    return entries[max(entries)] if entries else None


def _waited(created_ns: int | None, dumps: Sequence[RankDump]) -> float | None:
    times = [d.dump_time_ns for d in dumps if d.dump_time_ns is not None]
    if created_ns is None or not times:
        return None  # torch's own dumps carry no dump time
    return max(0.0, (max(times) - created_ns) / 1e9)


def _where(dump: RankDump, entry: Entry | None) -> dict[str, Any]:
    """Where a named rank is: its main thread's stack when the dump has one, else the call site of ``entry``."""
    main = next((t for t in dump.threads if t.main), None)
    if main is not None and main.frames:
        return {"source": "python_stack", "thread": main.name, "where": _own_frame(main.frames).where(),
                "stack": [f.as_dict() for f in main.frames], **_identity(dump)}  # fmt: skip
    if entry is not None and entry.frames:
        return {"source": "collective_call", "seq": entry.seq, "collective": entry.collective,
                "where": _own_frame(entry.frames).where(), "stack": [f.as_dict() for f in entry.frames],
                **_identity(dump)}  # fmt: skip
    return {"source": "none", "where": None, "stack": [], **_identity(dump)}


def _own_frame(frames: Sequence[Frame]) -> Frame:
    """The innermost frame of the job's own code (not the standard library's or an installed package's)."""
    for frame in reversed(frames):
        if not any(mark in frame.filename for mark in _LIBRARY_PATH_MARKS):
            return frame
    return frames[-1]


def _identity(dump: RankDump) -> dict[str, Any]:
    return {"host": dump.host, "pid": dump.pid, "gpu": dump.gpu}
