"""Job-side signals (``app`` records from :mod:`ranksight.client`): per-rank liveness and open sections.

:class:`AppTracker` keeps, per rank, the facts: when the rank was announced, its last heartbeat, step and step time,
the sections open now, and the timeouts its agent or the process chose (recorded with the facts, like a TTL). All
times are *receipt* times, so a skewed node clock changes nothing. A new pid for a rank is a new restart cycle and
replaces the old one; ``end`` (sent at a normal exit) forgets the rank. The rules are in ``aggregator.analysis.app``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ranksight.aggregator.forgetting import NodeKey
from ranksight.aggregator.timefmt import NS
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import AppRecord

# A rank silent this long is forgotten (its alerts resolve): memory stays bounded when processes die unannounced.
FORGET_AFTER_S = 24 * 3600


@dataclass(frozen=True)
class RankKey:
    """A rank of a job when the launcher said which; else the process on its node."""

    cluster: str
    job: str | None
    rank: int | None
    node: str | None  # only when rank is unknown
    pid: int | None  # only when rank is unknown


@dataclass
class OpenSection:
    name: str
    section_id: int
    opened_ns: int
    timeout_s: float


@dataclass(frozen=True)
class HeartbeatDeadline:
    since_ns: int  # the start (or the last heartbeat) the timeout runs from
    timeout_s: float
    first: bool  # no heartbeat yet: the initial timeout

    @property
    def at_ns(self) -> int:
        return self.since_ns + int(self.timeout_s * NS)


@dataclass
class RankState:
    cluster: str
    node: str
    agent: str
    job: str | None
    rank: int | None
    local_rank: int | None
    world_size: int | None
    pid: int
    first_seen_ns: int
    last_seen_ns: int
    announced_ns: int | None = None  # client.start(): heartbeats expected from then on
    last_heartbeat_ns: int | None = None
    heartbeat_timeout_s: float | None = None
    initial_timeout_s: float | None = None
    step: int | None = None
    step_time_s: float | None = None
    dropped: int = 0
    sections: dict[int, OpenSection] = field(default_factory=dict)

    def heartbeat_deadline(self) -> HeartbeatDeadline | None:
        """What the rank's next heartbeat is awaited against; None while none is expected. Timeouts are bounded at
        decode (``schemas.records.quantities.Seconds``), so a deadline always fits in nanoseconds."""
        if self.last_heartbeat_ns is not None and self.heartbeat_timeout_s is not None:
            return HeartbeatDeadline(self.last_heartbeat_ns, self.heartbeat_timeout_s, first=False)
        if self.announced_ns is not None and self.initial_timeout_s is not None:
            return HeartbeatDeadline(
                self.announced_ns, self.initial_timeout_s, first=self.last_heartbeat_ns is None
            )
        return None

    @property
    def label(self) -> str:
        who = f"rank {self.rank}" if self.rank is not None else f"pid {self.pid}"
        return f"{who} of job {self.job}" if self.job else who


def rank_key(cluster: str, node: str, rec: AppRecord) -> RankKey:
    if rec.rank is not None:
        return RankKey(cluster, rec.job_id, rec.rank, None, None)
    return RankKey(cluster, rec.job_id, None, node, rec.pid)


class AppTracker:
    kinds = frozenset({"app"})

    def __init__(self) -> None:
        self.ranks: dict[RankKey, RankState] = {}

    def observe(self, env: Envelope, recv_ns: int) -> None:
        for rec in env.records:
            self._observe_one(env, rec, recv_ns)

    def _observe_one(self, env: Envelope, rec: AppRecord, recv_ns: int) -> None:
        key = rank_key(env.cluster, env.node, rec)
        st = self.ranks.get(key)
        if rec.event == "end":
            if st is not None and st.pid == rec.pid:
                del self.ranks[key]
            return
        if st is None or st.pid != rec.pid:  # first sight, or a restarted process: a new cycle
            st = self.ranks[key] = RankState(
                cluster=env.cluster, node=env.node, agent=env.agent, job=rec.job_id, rank=rec.rank,
                local_rank=rec.local_rank, world_size=rec.world_size, pid=rec.pid,
                first_seen_ns=recv_ns, last_seen_ns=recv_ns,
            )  # fmt: skip
        st.node, st.agent, st.last_seen_ns, st.dropped = env.node, env.agent, recv_ns, rec.dropped
        if rec.event == "start":
            st.announced_ns = recv_ns
            st.heartbeat_timeout_s, st.initial_timeout_s = rec.timeout_s, rec.initial_timeout_s
        elif rec.event == "heartbeat":
            st.last_heartbeat_ns = recv_ns
            st.heartbeat_timeout_s = rec.timeout_s
            if rec.step is not None:
                st.step, st.step_time_s = rec.step, rec.step_time_s
            # A section the process no longer has open lost its close packet: close it here.
            still_open = set(rec.open_sections)
            for sid in [s for s in st.sections if s not in still_open]:
                del st.sections[sid]
        elif rec.event == "section_open" and rec.section_id is not None:
            st.sections[rec.section_id] = OpenSection(
                rec.section or "?", rec.section_id, recv_ns, rec.timeout_s or float("inf")
            )
        elif rec.event == "section_close" and rec.section_id is not None:
            st.sections.pop(rec.section_id, None)

    def tick(self, now_ns: int) -> None:
        horizon = now_ns - FORGET_AFTER_S * NS
        for key in [k for k, st in self.ranks.items() if st.last_seen_ns < horizon]:
            del self.ranks[key]

    def forget(self, nodes: set[NodeKey]) -> None:
        self.ranks = {key: st for key, st in self.ranks.items() if (st.cluster, st.node) not in nodes}
