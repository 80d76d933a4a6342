"""Live state: a pure function of the events seen and the clock (design §5 "Reconcile").

Each fact expires at *receipt* time + its TTL, so a skewed agent clock can neither keep a stale fact alive nor kill a
fresh one; the skew itself is measured (agent ``ts`` minus receipt) and reported. ``tick(now)`` derives states from the
facts; nothing here reads a clock or does I/O, so replaying the stored events rebuilds exactly the same state.

Trackers each own one area (nodes here; jobs, GPUs, links... in their modules) and are listed in ``LiveState``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from aggregator.gpu_probes import GpuProbeTracker
from aggregator.hardware import HardwareTracker
from aggregator.jobs import JobTracker
from aggregator.linkmap import LinkTracker
from schemas.envelope import Envelope
from schemas.records import HeartbeatRecord
from schemas.structs import to_builtins

NodeStateName = Literal["alive", "stale", "gone"]
NS = 1_000_000_000


class Tracker(Protocol):
    kinds: frozenset[str]

    def observe(self, env: Envelope, recv_ns: int) -> None: ...

    def tick(self, now_ns: int) -> None: ...


@dataclass
class NodeState:
    cluster: str
    node: str
    agent: str
    state: NodeStateName
    last_seen_ns: int  # receipt time of the last heartbeat
    expires_ns: int
    hostname: str | None = None
    version: str | None = None
    started_ns: int | None = None
    clock_skew_s: float = 0.0
    collectors: list[dict[str, Any]] = field(default_factory=list)
    publisher: dict[str, Any] = field(default_factory=dict)
    jobs: list[dict[str, Any]] = field(default_factory=list)  # batch jobs on the node (Slurm prolog files)


class NodeTracker:
    """Node liveness from heartbeats: ``alive`` until the TTL passes, then ``stale``, ``gone`` after ``gone_after_s``;
    forgotten (history keeps them) once silent for ``forget_after_s``."""

    kinds = frozenset({"heartbeat"})

    def __init__(self, gone_after_s: float = 300.0, forget_after_s: float = 86400.0) -> None:
        self.gone_after_ns = int(gone_after_s * NS)
        self.forget_after_ns = int(forget_after_s * NS)
        self.nodes: dict[tuple[str, str], NodeState] = {}

    def observe(self, env: Envelope, recv_ns: int) -> None:
        beat: HeartbeatRecord = env.records[-1]
        key = (env.cluster, env.node)
        current = self.nodes.get(key)
        if current is not None and current.last_seen_ns > recv_ns:
            return  # an older fact never replaces a newer one
        self.nodes[key] = NodeState(
            cluster=env.cluster,
            node=env.node,
            agent=env.agent,
            state="alive",
            last_seen_ns=recv_ns,
            expires_ns=recv_ns + int(env.ttl * NS),
            hostname=beat.hostname,
            version=beat.version,
            started_ns=beat.started_ns,
            clock_skew_s=(env.ts - recv_ns) / NS,
            collectors=to_builtins(beat.collectors),
            publisher=to_builtins(beat.publisher),
            jobs=to_builtins(beat.jobs),
        )

    def tick(self, now_ns: int) -> None:
        forgotten = [
            key for key, node in self.nodes.items() if now_ns - node.last_seen_ns > self.forget_after_ns
        ]
        for key in forgotten:
            del self.nodes[key]
        for node in self.nodes.values():
            if now_ns < node.expires_ns:
                node.state = "alive"
            elif now_ns < node.expires_ns + self.gone_after_ns:
                node.state = "stale"
            else:
                node.state = "gone"


class LiveState:
    def __init__(self, gone_after_s: float = 300.0, forget_after_s: float = 86400.0) -> None:
        self.nodes = NodeTracker(gone_after_s, forget_after_s)
        self.trackers: list[Tracker] = [self.nodes]
        self.jobs = JobTracker()
        self.trackers.append(self.jobs)
        self.trackers.append(HardwareTracker())
        self.trackers.append(LinkTracker())
        self.trackers.append(GpuProbeTracker())
        from aggregator.analysis.app import AppTracker  # here: the analysis package imports this module

        self.app = AppTracker.attach(self)
        # imported here: the analysis package imports this module
        from aggregator.analysis.straggler_live import StragglerTracker

        self.stragglers = StragglerTracker()
        self.trackers.append(self.stragglers)
        self.now_ns = 0

    @property
    def kinds(self) -> set[str]:
        return set().union(*(t.kinds for t in self.trackers))

    def observe(self, env: Envelope, recv_ns: int) -> None:
        for tracker in self.trackers:
            if env.kind in tracker.kinds:
                tracker.observe(env, recv_ns)

    def tick(self, now_ns: int) -> None:
        self.now_ns = now_ns
        for tracker in self.trackers:
            tracker.tick(now_ns)
