"""``default_rules()``: the rules over live state the aggregator evaluates each tick (with the action breaker's:
:mod:`aggregator.rulebook`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

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
from ranksight.aggregator.component_settings import (
    HardwareAlertSettings,
    ProbePlannerSettings,
    RasAlertSettings,
)

if TYPE_CHECKING:
    from ranksight.aggregator.settings import AggregatorView


def default_rules(settings: AggregatorView | None = None) -> list[Rule]:
    """Every rule, configured from ``settings`` where a rule has knobs (defaults otherwise)."""
    return [
        NodeSilentRule(),
        *ras_rules(settings.aggregator.ras if settings else RasAlertSettings()),
        *diagnostics_rules(),
        StragglerRule(),
        CollectiveHangRule(),
        *hardware_rules(settings.aggregator.hardware if settings else HardwareAlertSettings()),
        LinkDegradedRule(settings.aggregator.probes if settings else ProbePlannerSettings()),
        GpuUnderperformingRule(),
        RankHeartbeatOverdueRule(),
        RankSectionOverdueRule(),
        GpuXidRule(settings.aggregator.actions.xid if settings else None),
        FlightRecorderHangRule(),
    ]
