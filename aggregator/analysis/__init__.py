"""Analysis rules; ``RULES`` lists every rule the aggregator evaluates each tick."""

from __future__ import annotations

from aggregator.alerts import Rule
from aggregator.analysis.app import RankHeartbeatOverdueRule, RankSectionOverdueRule
from aggregator.analysis.nodes import NodeSilentRule


def default_rules() -> list[Rule]:
    return [
        NodeSilentRule(),
        RankHeartbeatOverdueRule(),
        RankSectionOverdueRule(),
    ]
