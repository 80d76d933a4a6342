"""Rule knobs come from the aggregator's settings, not from constructor defaults alone."""

from __future__ import annotations

from ranksight.aggregator.analysis.links import LinkDegradedRule
from ranksight.aggregator.analysis.rules import default_rules
from ranksight.settings import load_settings


def test_link_rule_uses_configured_thresholds() -> None:
    settings = load_settings(None, aggregator={"probes": {"degraded_ratio": 0.8, "min_history": 7}})
    [rule] = [r for r in default_rules(settings) if isinstance(r, LinkDegradedRule)]
    assert (rule.ratio, rule.min_history) == (0.8, 7)
    [default] = [r for r in default_rules() if isinstance(r, LinkDegradedRule)]
    assert (default.ratio, default.min_history) == (0.5, 3)
