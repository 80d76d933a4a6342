"""Node liveness from heartbeats (design §5 "Reconcile"): alive until receipt + TTL, then stale, then gone."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ranksight.aggregator.forgetting import NodeKey, without_nodes
from ranksight.aggregator.timefmt import NS
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import HeartbeatRecord
from ranksight.schemas.structs import to_builtins

NodeStateName = Literal["alive", "stale", "gone"]


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

    def collector_success_ns(self, cluster: str, node: str, collector: str) -> int | None:
        """When the node's ``collector`` last succeeded, as its latest heartbeat says (None: not known)."""
        state = self.nodes.get((cluster, node))
        for health in state.collectors if state is not None else []:
            if health.get("name") == collector:
                value = health.get("last_success_ns")
                return value if isinstance(value, int) else None
        return None

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
