"""Node-level rules: a node whose agent stopped sending heartbeats."""

from __future__ import annotations

from collections.abc import Iterator

from ranksight.aggregator.alerts import Condition, RuleDoc
from ranksight.aggregator.state import NS, LiveState
from ranksight.aggregator.timefmt import iso


class NodeSilentRule:
    name = "node_silent"
    # hold-down: a loaded node may miss a heartbeat or two: not yet an incident
    for_s, clear_s = 30.0, 120.0
    doc = RuleDoc(
        "warning (stale), critical (gone)",
        "no heartbeat within its TTL",
        "`aggregator.node_gone_after_s`",
    )

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        for node in state.nodes.nodes.values():
            if node.state == "alive":
                continue
            silent_s = (now_ns - node.last_seen_ns) / NS
            yield Condition(
                rule=self.name,
                severity="critical" if node.state == "gone" else "warning",
                cluster=node.cluster,
                node=node.node,
                summary=f"node {node.node} is {node.state}: no heartbeat for {silent_s:.0f}s",
                evidence={"last_seen": iso(node.last_seen_ns), "agent": node.agent, "state": node.state},
            )
