"""Every rule the aggregator evaluates: those over live state (:func:`analysis.rules.default_rules`) and the action
circuit breaker's; each rule's default hold-down as the rule declares it; and the check that the settings name only
these rules."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ranksight.aggregator.actions.planner import ActionBreakerRule, ActionPlanner
from ranksight.aggregator.alerts import Rule
from ranksight.aggregator.analysis.rules import default_rules
from ranksight.core.config import ConfigError

if TYPE_CHECKING:
    from ranksight.aggregator.settings import AggregatorView


def every_rule(settings: AggregatorView, planner: ActionPlanner) -> list[Rule]:
    return [*default_rules(settings), ActionBreakerRule(planner)]


def rule_timings() -> dict[str, tuple[float, float]]:
    """Every rule's name and its declared (for_s, clear_s)."""
    timings = {rule.name: (rule.for_s, rule.clear_s) for rule in default_rules()}
    timings[ActionBreakerRule.name] = (ActionBreakerRule.for_s, ActionBreakerRule.clear_s)
    return timings


def check_rule_names(settings: AggregatorView) -> None:
    """A :class:`ConfigError` naming each rule that a hold-down override or an action policy names but no rule is:
    a misspelt name would otherwise never match anything, silently."""
    known = rule_timings()
    named = [(f"aggregator.alerts.rules.{name}", name) for name in settings.aggregator.alerts.rules]
    named += [(f"aggregator.actions.policies ({policy.name}).rules", name)
              for policy in settings.aggregator.actions.policies for name in policy.rules]  # fmt: skip
    unknown = [f"{where}: unknown rule {name!r}" for where, name in named if name not in known]
    if unknown:
        raise ConfigError(f"{'; '.join(unknown)}; known: {', '.join(sorted(known))}")
