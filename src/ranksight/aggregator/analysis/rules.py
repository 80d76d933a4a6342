"""``default_rules()``: the rules over live state the aggregator evaluates each tick (with the action breaker's:
:mod:`aggregator.rulebook`)."""

from __future__ import annotations

from ranksight.aggregator.alerts import Rule
from ranksight.aggregator.analysis.app import RankHeartbeatOverdueRule, RankSectionOverdueRule
from ranksight.aggregator.analysis.forensics import FlightRecorderHangRule
from ranksight.aggregator.analysis.gpu_probe import GpuUnderperformingRule
from ranksight.aggregator.analysis.hardware import hardware_rules
from ranksight.aggregator.analysis.links import LinkDegradedRule
from ranksight.aggregator.analysis.nodes import NodeSilentRule
from ranksight.aggregator.analysis.ras import ras_rules
from ranksight.aggregator.analysis.ras_diagnostics import diagnostics_rules
from ranksight.aggregator.analysis.straggler_live import CollectiveHangRule, StragglerRule
from ranksight.aggregator.analysis.xid import GpuXidRule
from ranksight.core.config import Settings


def default_rules(settings: Settings | None = None) -> list[Rule]:
    """Every rule, configured from ``settings`` where a rule has knobs (defaults otherwise)."""
    settings = settings or Settings()
    return [
        NodeSilentRule(),
        *ras_rules(settings.aggregator.ras),
        *diagnostics_rules(),
        StragglerRule(),
        CollectiveHangRule(),
        *hardware_rules(settings.aggregator.hardware),
        LinkDegradedRule(settings.aggregator.probes),
        GpuUnderperformingRule(),
        RankHeartbeatOverdueRule(),
        RankSectionOverdueRule(),
        GpuXidRule(settings.aggregator.actions.xid),
        FlightRecorderHangRule(),
    ]
