"""Analysis rules; ``RULES`` lists every rule the aggregator evaluates each tick."""

from __future__ import annotations

from aggregator.alerts import Rule
from aggregator.analysis.nodes import NodeSilentRule
from aggregator.analysis.straggler_live import StragglerRule


def default_rules() -> list[Rule]:
    return [NodeSilentRule(), StragglerRule()]
