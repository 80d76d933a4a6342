"""Live state: a pure function of the events seen and the clock (design §5 "Reconcile").

Each fact expires at *receipt* time + its TTL, so a skewed agent clock can neither keep a stale fact alive nor kill a
fresh one; the skew itself is measured (agent ``ts`` minus receipt) and reported. ``tick(now)`` derives states from the
facts; nothing here reads a clock or does I/O, so replaying the stored events rebuilds exactly the same state.

One tracker per module of this package, each owning one area, and one typed attribute of ``LiveState`` per tracker:
the one way to find one (``state.nics``, ``state.jobs``...). Each record kind names its tracker in the kind registry
(``schemas.records.RECORD_KINDS``); a tracker may observe other kinds too (``kinds``). The analysis modules hold only
rules, reading these trackers. A node silent (no event of any kind) for ``forget_after_s`` is forgotten by every
tracker at once: ``LiveState.tick`` calls each tracker's ``forget`` with the nodes to drop, so fake or decommissioned
nodes leave no state behind (history keeps their rows).
"""

from __future__ import annotations

from typing import Protocol

from ranksight.aggregator.component_settings import HardwareAlertSettings
from ranksight.aggregator.forgetting import NodeKey, without_nodes
from ranksight.aggregator.models.hangs import Hang
from ranksight.aggregator.state.app import AppTracker
from ranksight.aggregator.state.devices import GpuTracker, NicTracker
from ranksight.aggregator.state.forensics import ForensicsTracker
from ranksight.aggregator.state.gpu_probes import GpuProbeTracker
from ranksight.aggregator.state.inspector_drops import InspectorDropTracker
from ranksight.aggregator.state.jobs import JobTracker
from ranksight.aggregator.state.links import LinkTracker
from ranksight.aggregator.state.nodes import NodeState, NodeTracker
from ranksight.aggregator.state.stragglers import StragglerTracker
from ranksight.aggregator.state.xids import XidTracker
from ranksight.aggregator.timefmt import NS
from ranksight.schemas.envelope import Envelope

__all__ = ["NS", "LiveState", "NodeState", "Tracker"]


class Tracker(Protocol):
    kinds: frozenset[str]

    def observe(self, env: Envelope, recv_ns: int) -> None: ...

    def tick(self, now_ns: int) -> None: ...

    def forget(self, nodes: set[NodeKey]) -> None:
        """Drop everything kept about these (cluster, node) pairs."""


class LiveState:
    def __init__(
        self,
        gone_after_s: float = 300.0,
        forget_after_s: float = 86400.0,
        hardware: HardwareAlertSettings | None = None,
    ) -> None:
        self.forget_after_ns = int(forget_after_s * NS)
        self.last_seen_ns: dict[NodeKey, int] = {}  # receipt time of each node's latest event, any kind
        self.nodes = NodeTracker(gone_after_s)
        self.jobs = JobTracker()
        self.gpus = GpuTracker()
        self.nics = NicTracker(hardware)
        self.links = LinkTracker()
        self.gpu_probes = GpuProbeTracker()
        self.app = AppTracker()
        self.stragglers = StragglerTracker()
        self.xids = XidTracker()
        self.inspector_drops = InspectorDropTracker()
        self.trackers: list[Tracker] = [self.nodes, self.jobs, self.gpus, self.nics, self.links, self.gpu_probes,
                                        self.app, self.stragglers, self.xids, self.inspector_drops]  # fmt: skip
        self.forensics = (
            ForensicsTracker()
        )  # hang reports: made by aggregator.hang_forensics, not fed by records
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

    def forget(self, nodes: set[NodeKey]) -> None:
        """Drop every tracker's state of ``nodes`` (silent too long, or of a partition another shard ingests now)."""
        self.last_seen_ns = without_nodes(self.last_seen_ns, nodes)
        for tracker in self.trackers:
            tracker.forget(nodes)
        self.forensics.forget(nodes)

    def hangs(self, cluster: str, now_ns: int) -> list[Hang]:
        """The cluster's stalled collectives, judging only ranks whose agents' heartbeats say they have read their dump
        files past the stall (:meth:`HangFinder.hangs`)."""
        return self.stragglers.hangs(
            cluster, now_ns, lambda node: self.nodes.collector_success_ns(cluster, node, "inspector")
        )

    def tick(self, now_ns: int) -> None:
        self.now_ns = now_ns
        horizon = now_ns - self.forget_after_ns
        forgotten = {key for key, seen in self.last_seen_ns.items() if seen < horizon}
        if forgotten:
            self.forget(forgotten)
        for tracker in self.trackers:
            tracker.tick(now_ns)
        self.forensics.tick(now_ns)
