"""Live job / communicator state from ``ras`` polls and ``ras_event`` MONITOR events (design §5 "Jobs and cycles").

Facts are keyed by (cluster, job id), so a new job or restart cycle is never judged with the previous one: a status
that arrives for a job that had ended starts a new cycle. Per communicator the tracker counts consecutive polls with
a MISMATCH (routinely transient, so rules wait for it to persist) and consecutive polls whose op counts did not advance
while every rank was RUNNING (a hang). A job ends when its endpoint closes (``ENDPOINT_CLOSED``); the end is normal
when the last poll had no ERROR/DEAD/ABORT and no peer died. Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from schemas.envelope import Envelope
from schemas.records.ras import RasEventRecord, RasLaggingRank, RasProcess, RasRecord

NS = 1_000_000_000
JobStateName = Literal["running", "stale", "ended"]
ENDPOINT_CLOSED = "ENDPOINT_CLOSED"
FAILURE_EVENT_WORDS = ("DEAD", "ABORT", "ERROR")


@dataclass
class CommState:
    hash: str
    size: int | None
    status: str | None
    errors: list[str]
    missing_ranks: list[int]
    rank_status: dict[str, int]
    op_total: int | None  # sum over collectives of the highest count; None when the format does not say
    lagging: list[RasLaggingRank] = field(default_factory=list)
    mismatch_polls: int = 0  # consecutive polls with MISMATCH
    stalled_polls: int = 0  # consecutive polls with all ranks RUNNING and op counts not advancing
    lag_polls: int = 0  # consecutive polls with the same ranks behind the same counts and nothing advancing


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
    normal_end: bool | None = None
    polls: int = 0
    ranks: int | None = None
    comms: dict[str, CommState] = field(default_factory=dict)
    missing_processes: list[RasProcess] = field(default_factory=list)
    dead_processes: list[RasProcess] = field(default_factory=list)
    failure_events: int = 0
    events: deque[RasEventRecord] = field(default_factory=lambda: deque(maxlen=50))


def _advance(prev: CommState | None, comm: CommState) -> CommState:
    all_running = set(comm.rank_status) == {"RUNNING"} and not comm.missing_ranks
    if prev is not None:
        comm.mismatch_polls = prev.mismatch_polls + 1 if "MISMATCH" in comm.errors else 0
        stalled = all_running and comm.op_total is not None and comm.op_total == prev.op_total
        comm.stalled_polls = prev.stalled_polls + 1 if stalled else 0
        same_lag = comm.lagging and _lag(comm) == _lag(prev) and comm.op_total == prev.op_total
        comm.lag_polls = prev.lag_polls + 1 if same_lag else int(bool(comm.lagging))
    else:
        comm.mismatch_polls = 1 if "MISMATCH" in comm.errors else 0
        comm.lag_polls = int(bool(comm.lagging))
    return comm


def _lag(comm: CommState) -> set[tuple[int, str, int]]:
    return {(r.rank, r.collective, r.count) for r in comm.lagging}


class JobTracker:
    kinds = frozenset({"ras", "ras_event"})

    def __init__(self, forget_after_s: float = 3600.0) -> None:
        self.forget_after_ns = int(forget_after_s * NS)
        self.jobs: dict[tuple[str, str], JobState] = {}

    @staticmethod
    def job_key(record: RasRecord | RasEventRecord, node: str) -> str:
        return record.job_id or f"{node}:{record.endpoint}"

    def observe(self, env: Envelope, recv_ns: int) -> None:
        handle = self._status if env.kind == "ras" else self._event
        for record in env.records:
            handle(env, record, recv_ns)

    def _status(self, env: Envelope, rec: RasRecord, recv_ns: int) -> None:
        key = (env.cluster, self.job_key(rec, env.node))
        job = self.jobs.get(key)
        if job is not None and job.last_poll_ns is not None and job.last_poll_ns > recv_ns:
            return  # an older poll never replaces a newer one
        if job is None or job.state == "ended":  # a new job, or a new cycle under the same id
            job = self.jobs[key] = JobState(
                env.cluster, key[1], rec.endpoint, env.node, first_seen_ns=recv_ns
            )
        comms = {}
        for c in rec.communicators:
            op_total = sum(c.op_counts.values()) if c.op_counts else None
            comm = CommState(c.hash, c.size, c.status, list(c.errors), list(c.missing_ranks), dict(c.rank_status),
                             op_total, list(c.lagging_ranks))  # fmt: skip
            comms[c.hash] = _advance(job.comms.get(c.hash), comm)
        job.comms = comms
        job.node, job.endpoint, job.health, job.version = env.node, rec.endpoint, rec.health, rec.version
        job.missing_processes, job.dead_processes = list(rec.missing_processes), list(rec.dead_processes)
        job.ranks = rec.gpus
        job.last_poll_ns, job.expires_ns, job.polls = recv_ns, recv_ns + int(env.ttl * NS), job.polls + 1
        job.state = "running"

    def _event(self, env: Envelope, rec: RasEventRecord, recv_ns: int) -> None:
        job = self.jobs.get((env.cluster, self.job_key(rec, env.node)))
        if job is None:
            return  # events before any status: kept in history (ras_event table), not in live state
        job.events.append(rec)
        if rec.event == ENDPOINT_CLOSED:
            if job.state != "ended":
                job.state, job.ended_ns = "ended", recv_ns
                job.normal_end = job.health in ("ok", "warning") and job.failure_events == 0
        elif any(word in rec.event.upper() for word in FAILURE_EVENT_WORDS):
            job.failure_events += 1

    def tick(self, now_ns: int) -> None:
        for key, job in list(self.jobs.items()):
            if job.state == "running" and now_ns >= job.expires_ns:
                job.state = "stale"
            last = job.ended_ns or job.last_poll_ns or job.first_seen_ns
            if job.state != "running" and now_ns - last > self.forget_after_ns:
                del self.jobs[key]

    def live(self) -> list[JobState]:
        """Jobs being judged: polled recently and not ended."""
        return [j for j in self.jobs.values() if j.state == "running"]
