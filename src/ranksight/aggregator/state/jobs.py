"""Live job / communicator state from ``ras`` polls and ``ras_event`` MONITOR events (design §5 "Jobs and cycles").

Facts are keyed by (cluster, job id), so a new job or restart cycle is never judged with the previous one: a status
that arrives for a job that had ended starts a new cycle. Per communicator the tracker counts consecutive polls with
a MISMATCH (routinely transient, so rules wait for it to persist) and keeps its op count total with the receipt time it
last changed (first seen counts as a change), carried over polls without JSON detail (a text status lists only flagged
communicators: the others carry over, unflagged), so a hang is judged on time, not on poll counts. A MONITOR ``PEER_DEAD`` is kept as a pending dead peer, with the number of statuses since that did not
list it, until a status lists the process (then the status speaks for it). A job ends when its endpoint closes
(``ENDPOINT_CLOSED``); the end is normal when the last poll had no ERROR/DEAD/ABORT and no peer died. Endpoints close
one after the other: a status polled by an agent whose own endpoint had not closed yet is the ended cycle's, whenever
it arrives (agent time is compared only with the same agent's clock). Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace
from typing import Literal

from ranksight.aggregator.forgetting import NodeKey
from ranksight.aggregator.state.ras_parts import PartAssembler
from ranksight.aggregator.timefmt import NS
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records.ras import (
    RasDiagnosticsRecord,
    RasEventRecord,
    RasLaggingRank,
    RasProcess,
    RasRecord,
)

JOB_KINDS = frozenset(
    {"ras", "inspector", "inspector_summary"}
)  # fresh facts of these: a job runs on the node
JobStateName = Literal["running", "stale", "ended"]
ENDPOINT_CLOSED = "ENDPOINT_CLOSED"
PEER_DEAD = "PEER_DEAD"
FAILURE_EVENT_WORDS = ("DEAD", "ABORT", "ERROR")
MAX_PENDING_PEERS = 1024  # per job: a whole-job failure can report every peer
MAX_STATUSES_PENDING = 16  # a pending dead peer no status listed this often is forgotten


@dataclass
class CommState:
    hash: str
    size: int | None
    status: str | None
    errors: list[str]
    missing_ranks: list[int]
    rank_status: dict[str, int]
    op_total: int | None  # sum over collectives of the highest count; None until a poll with JSON detail says
    op_changed_ns: int  # receipt time of the poll where op_total was first known or last changed
    unknown_ranks: list[int] = field(default_factory=list)
    complete: bool = True
    evidence: list[str] = field(default_factory=list)
    lagging: list[RasLaggingRank] = field(default_factory=list)
    mismatch_polls: int = 0  # consecutive polls with MISMATCH
    stalled_polls: int = 0  # consecutive polls with JSON detail and op counts not advancing
    lag_polls: int = 0  # consecutive polls with the same ranks behind the same counts and nothing advancing


def process_key(host: str | None, pid: int | None, addr: str | None = None) -> str:
    """A job's process identity: ``host:pid``, or the address of a peer the server cannot name."""
    return addr if host is None and addr is not None else f"{host}:{pid}"


@dataclass
class PendingPeer:
    """A MONITOR ``PEER_DEAD`` no status has listed yet."""

    event: RasEventRecord
    seen_ns: int
    statuses_since: int = 0


@dataclass
class JobState:
    cluster: str
    job_id: str
    endpoint: str
    node: str  # the agent that polled last
    first_seen_ns: int
    state: JobStateName = "running"
    health: str | None = None
    version: str | None = None
    last_poll_ns: int | None = None
    expires_ns: int = 0
    ended_ns: int | None = None
    # per agent incarnation that sent facts of this cycle: the agent time of its endpoint's close (None: not closed
    # yet). Agent time survives replay (receipt time does not) and is compared only with the same agent's clock.
    agents: dict[str, int | None] = field(default_factory=dict)
    normal_end: bool | None = None
    polls: int = 0
    ranks: int | None = None
    comms: dict[str, CommState] = field(default_factory=dict)
    missing_processes: list[RasProcess] = field(default_factory=list)
    dead_processes: list[RasProcess] = field(default_factory=list)
    failure_events: int = 0
    events: deque[RasEventRecord] = field(default_factory=lambda: deque(maxlen=50))
    peers_dead: dict[str, PendingPeer] = field(
        default_factory=dict
    )  # process key -> PEER_DEAD not yet listed
    diagnostics: RasDiagnosticsRecord | None = (
        None  # the job's latest completed RAS diagnostics run (NCCL 2.31+)
    )


def _advance(prev: CommState | None, comm: CommState) -> CommState:
    comm.mismatch_polls = (prev.mismatch_polls if prev else 0) + 1 if "MISMATCH" in comm.errors else 0
    comm.lag_polls = int(bool(comm.lagging))
    if prev is None:
        return comm
    if comm.op_total is None:  # a poll without JSON detail (text): the last known counts stand
        comm.op_total, comm.stalled_polls = prev.op_total, prev.stalled_polls
        if comm.lagging and _moved(prev.lagging, comm.lagging):
            # its MISMATCH lines show counts past the last known: progress, at this poll
            comm.stalled_polls = 0
            return comm
        comm.op_changed_ns = prev.op_changed_ns
        if comm.lagging and prev.lagging and _lag(comm) <= _lag(prev):
            # the same ranks behind at the same counts (text names only the outliers: a subset of JSON's list)
            comm.lagging, comm.lag_polls = prev.lagging, prev.lag_polls + 1
        elif not comm.lagging:
            comm.lagging, comm.lag_polls = prev.lagging, prev.lag_polls
    elif prev.op_total is not None and comm.op_total == prev.op_total:
        comm.op_changed_ns, comm.stalled_polls = prev.op_changed_ns, prev.stalled_polls + 1
        if comm.lagging and _lag(comm) == _lag(prev):
            comm.lag_polls = prev.lag_polls + 1
    return comm


def _lag(comm: CommState) -> set[tuple[int, str, int]]:
    return {(r.rank, r.collective, r.count) for r in comm.lagging}


def _moved(before: list[RasLaggingRank], now: list[RasLaggingRank]) -> bool:
    """Whether counts named now are past those named before: a collective's highest, or a rank's own."""
    highest = {r.collective: r.peers_count for r in before}
    counts = {(r.rank, r.collective): r.count for r in before}
    return any(
        r.peers_count > highest.get(r.collective, r.peers_count)
        or r.count > counts.get((r.rank, r.collective), r.count)
        for r in now
    )


def _incarnation(env: Envelope) -> str:
    return f"{env.node}/{env.agent}"


def _of_ended_cycle(job: JobState, env: Envelope) -> bool:
    """Whether a status arriving after the job ended belongs to the ended cycle, by the polling agent's own clock.

    Endpoints close one after the other (the first close ends the job); an agent still polling its open endpoint
    then reports the same processes, stamped later than another node's close. It is a new cycle only once the
    polling agent's own endpoint closed before it polled, or when the agent (a node, or a restarted agent) took no
    part in the ended cycle."""
    incarnation = _incarnation(env)
    if incarnation not in job.agents:
        return False
    closed_ns = job.agents[incarnation]
    return closed_ns is None or env.ts <= closed_ns


class JobTracker:
    kinds = frozenset({"ras", "ras_event", "ras_diagnostics"})

    def __init__(self, forget_after_s: float = 3600.0) -> None:
        self.forget_after_ns = int(forget_after_s * NS)
        self.jobs: dict[tuple[str, str], JobState] = {}
        self.parts = PartAssembler()  # a status published in parts is judged whole

    @staticmethod
    def job_key(record: RasRecord | RasEventRecord | RasDiagnosticsRecord, node: str) -> str:
        return record.job_id or f"{node}:{record.endpoint}"

    def observe(self, env: Envelope, recv_ns: int) -> None:
        if env.kind == "ras_diagnostics":
            for record in env.records:
                self._diagnostics(env, record)
            return
        if env.kind != "ras":
            for record in env.records:
                self._event(env, record, recv_ns)
            return
        for record in env.records:
            whole = self.parts.add(env, record, recv_ns)
            if whole is not None:
                status, received_ns = whole
                self._status(env, status, received_ns)  # type: ignore[arg-type]

    def _status(self, env: Envelope, rec: RasRecord, recv_ns: int) -> None:
        key = (env.cluster, self.job_key(rec, env.node))
        job = self.jobs.get(key)
        if job is not None and job.last_poll_ns is not None and job.last_poll_ns > recv_ns:
            return  # an older poll never replaces a newer one
        if job is not None and job.state == "ended" and _of_ended_cycle(job, env):
            return  # polled before its own endpoint closed, arriving after another's close: the ended cycle's
        if job is None or job.state == "ended":  # a new job, or a new cycle under the same id
            job = self.jobs[key] = JobState(
                env.cluster, key[1], rec.endpoint, env.node, first_seen_ns=recv_ns
            )
        job.agents.setdefault(_incarnation(env), None)
        comms = {}
        for c in rec.communicators:
            op_total = sum(c.op_counts.values()) if c.op_counts else None
            comm = CommState(c.hash, c.size, c.status, list(c.errors), list(c.missing_ranks), dict(c.rank_status),
                             op_total, recv_ns, list(c.unknown_ranks), c.complete, list(c.evidence),
                             list(c.lagging_ranks))  # fmt: skip
            comms[c.hash] = _advance(job.comms.get(c.hash), comm)
        if (
            not rec.all_communicators
        ):  # text lists flagged communicators only: the others are unflagged, counts stand
            for comm_hash, prev in job.comms.items():
                if comm_hash not in comms:
                    comms[comm_hash] = replace(prev, errors=[], missing_ranks=[], unknown_ranks=[], complete=True,
                                         evidence=[], mismatch_polls=0)  # fmt: skip
        job.comms = comms
        listed = {process_key(p.host, p.pid) for p in [*rec.missing_processes, *rec.dead_processes]}
        for peer, pending in list(job.peers_dead.items()):
            pending.statuses_since += 1
            if peer in listed or pending.statuses_since > MAX_STATUSES_PENDING:
                del job.peers_dead[peer]
        job.node, job.endpoint, job.health, job.version = env.node, rec.endpoint, rec.health, rec.version
        job.missing_processes, job.dead_processes = list(rec.missing_processes), list(rec.dead_processes)
        job.ranks = rec.gpus
        job.last_poll_ns, job.expires_ns, job.polls = recv_ns, recv_ns + int(env.ttl * NS), job.polls + 1
        job.state = "running"

    def _diagnostics(self, env: Envelope, rec: RasDiagnosticsRecord) -> None:
        """A completed run replaces the job's previous one; a busy, unsupported or failed attempt changes nothing."""
        job = self.jobs.get((env.cluster, self.job_key(rec, env.node)))
        if job is not None and rec.status in ("ok", "incomplete"):
            job.diagnostics = rec

    def _event(self, env: Envelope, rec: RasEventRecord, recv_ns: int) -> None:
        job = self.jobs.get((env.cluster, self.job_key(rec, env.node)))
        if job is None:
            return  # events before any status: kept in history (ras_event table), not in live state
        job.events.append(rec)
        if rec.event == ENDPOINT_CLOSED:
            job.agents[_incarnation(env)] = env.ts
            if job.state != "ended":
                job.state, job.ended_ns = "ended", recv_ns
                job.normal_end = job.health in ("ok", "warning") and job.failure_events == 0
            return
        job.agents.setdefault(_incarnation(env), None)
        if any(word in rec.event.upper() for word in FAILURE_EVENT_WORDS):
            job.failure_events += 1
            peer = process_key(rec.host, rec.pid, rec.addr)
            if rec.event == PEER_DEAD and (peer in job.peers_dead or len(job.peers_dead) < MAX_PENDING_PEERS):
                job.peers_dead.setdefault(peer, PendingPeer(rec, recv_ns))

    def tick(self, now_ns: int) -> None:
        for key, job in list(self.jobs.items()):
            if job.state == "running" and now_ns >= job.expires_ns:
                job.state = "stale"
            last = job.ended_ns or job.last_poll_ns or job.first_seen_ns
            if job.state != "running" and now_ns - last > self.forget_after_ns:
                del self.jobs[key]

    def forget(self, nodes: set[NodeKey]) -> None:
        """Drop the jobs these nodes polled last (silent that long, they are not running)."""
        self.jobs = {key: job for key, job in self.jobs.items() if (job.cluster, job.node) not in nodes}
        self.parts.forget(nodes)

    def live(self) -> list[JobState]:
        """Jobs polled recently and not ended: their facts are fresh."""
        return [j for j in self.jobs.values() if j.state == "running"]

    def current(self) -> list[JobState]:
        """Jobs not ended: live, or stale (a late poll says nothing new, so their last facts stand)."""
        return [j for j in self.jobs.values() if j.state != "ended"]
