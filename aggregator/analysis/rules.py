"""``default_rules()``: every rule the aggregator evaluates each tick."""

from __future__ import annotations

from aggregator.alerts import Rule
from aggregator.analysis.app import RankHeartbeatOverdueRule, RankSectionOverdueRule
from aggregator.analysis.gpu_probe import GpuUnderperformingRule
from aggregator.analysis.hardware import hardware_rules
from aggregator.analysis.links import LinkDegradedRule
from aggregator.analysis.nodes import NodeSilentRule
from aggregator.analysis.ras import ras_rules
from aggregator.analysis.straggler_live import CollectiveHangRule, StragglerRule
from ranksight.config import Settings


def default_rules(settings: Settings | None = None) -> list[Rule]:
    """Every rule, configured from ``settings`` where a rule has knobs (defaults otherwise)."""
    settings = settings or Settings()
    return [
        NodeSilentRule(),
        *ras_rules(settings.aggregator.ras),
        StragglerRule(),
        CollectiveHangRule(),
        *hardware_rules(settings.aggregator.hardware),
        LinkDegradedRule(settings.aggregator.probes),
        GpuUnderperformingRule(),
        RankHeartbeatOverdueRule(),
        RankSectionOverdueRule(),
    ]
