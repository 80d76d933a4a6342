"""Live state: a pure function of the events seen and the clock (design §5 "Reconcile").

Each fact expires at *receipt* time + its TTL, so a skewed agent clock can neither keep a stale fact alive nor kill a
fresh one; the skew itself is measured (agent ``ts`` minus receipt) and reported. ``tick(now)`` derives states from the
facts; nothing here reads a clock or does I/O, so replaying the stored events rebuilds exactly the same state.

Trackers each own one area (nodes here; jobs, GPUs, links... in their modules) and are listed in ``LiveState``.
A node silent (no event of any kind) for ``forget_after_s`` is forgotten by every tracker at once: ``LiveState.tick``
calls each tracker's ``forget`` with the nodes to drop, so fake or decommissioned nodes leave no state behind (history
keeps their rows).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from ranksight.aggregator.forgetting import NodeKey, without_nodes
from ranksight.aggregator.gpu_probes import GpuProbeTracker
from ranksight.aggregator.hardware import HardwareTracker
from ranksight.aggregator.jobs import JobTracker
from ranksight.aggregator.linkmap import LinkTracker
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import HeartbeatRecord
from ranksight.schemas.structs import to_builtins

NodeStateName = Literal["alive", "stale", "gone"]
NS = 1_000_000_000


class Tracker(Protocol):
    kinds: frozenset[str]

    def observe(self, env: Envelope, recv_ns: int) -> None: ...

    def tick(self, now_ns: int) -> None: ...

    def forget(self, nodes: set[NodeKey]) -> None:
        """Drop everything kept about these (cluster, node) pairs."""


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
    """Node liveness from heartbeats: ``alive`` until the TTL passes, then ``stale``, ``gone`` after ``gone_after_s``."""

    kinds = frozenset({"heartbeat"})

    def __init__(self, gone_after_s: float = 300.0) -> None:
        self.gone_after_ns = int(gone_after_s * NS)
        self.nodes: dict[NodeKey, NodeState] = {}

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
        for node in self.nodes.values():
            if now_ns < node.expires_ns:
                node.state = "alive"
            elif now_ns < node.expires_ns + self.gone_after_ns:
                node.state = "stale"
            else:
                node.state = "gone"

    def forget(self, nodes: set[NodeKey]) -> None:
        self.nodes = without_nodes(self.nodes, nodes)


class LiveState:
    def __init__(self, gone_after_s: float = 300.0, forget_after_s: float = 86400.0) -> None:
        self.forget_after_ns = int(forget_after_s * NS)
        self.last_seen_ns: dict[NodeKey, int] = {}  # receipt time of each node's latest event, any kind
        self.nodes = NodeTracker(gone_after_s)
        self.trackers: list[Tracker] = [self.nodes]
        self.jobs = JobTracker()
        self.trackers.append(self.jobs)
        self.trackers.append(HardwareTracker())
        self.trackers.append(LinkTracker())
        self.trackers.append(GpuProbeTracker())
        from ranksight.aggregator.analysis.app import (
            AppTracker,  # here: the analysis package imports this module
        )

        self.app = AppTracker.attach(self)
        # imported here: the analysis package imports this module
        from ranksight.aggregator.analysis.straggler_live import StragglerTracker

        self.stragglers = StragglerTracker()
        self.trackers.append(self.stragglers)
        self.now_ns = 0

    @property
    def kinds(self) -> set[str]:
        return set().union(*(t.kinds for t in self.trackers))

    def observe(self, env: Envelope, recv_ns: int) -> None:
        key = (env.cluster, env.node)
        self.last_seen_ns[key] = max(recv_ns, self.last_seen_ns.get(key, recv_ns))
        for tracker in self.trackers:
            if env.kind in tracker.kinds:
                tracker.observe(env, recv_ns)

    def tick(self, now_ns: int) -> None:
        self.now_ns = now_ns
        horizon = now_ns - self.forget_after_ns
        forgotten = {key for key, seen in self.last_seen_ns.items() if seen < horizon}
        if forgotten:
            self.last_seen_ns = without_nodes(self.last_seen_ns, forgotten)
            for tracker in self.trackers:
                tracker.forget(forgotten)
        for tracker in self.trackers:
            tracker.tick(now_ns)
