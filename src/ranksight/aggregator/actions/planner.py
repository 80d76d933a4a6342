"""Which policy acts on which incident, and what the guard rails allow: pure, the clock and the alerts given.

Per tick, :meth:`ActionPlanner.plan` sees every firing alert. For each policy that matches it (rule, severity, cluster
and node patterns, Xid resolution class) it waits until the alert has fired ``for_s`` and its confidence and
corroboration reach the policy's minimum, then decides the incident once:

1. ``skipped``: the node was acted on less than ``cooldown_s`` ago, or an operator drained it in ranksight.
2. ``planned`` in dry-run mode, ``awaiting_approval`` in approve mode (the breaker is checked when it is approved),
   else the circuit breaker: at most ``max_nodes_per_window`` nodes and ``max_cluster_fraction`` of the cluster's
   nodes acted on within ``window_s``; over that the action is ``breaker_open`` (and the breaker alert fires), under it
   ``queued``.

A ``planned`` decision is decided again when the mode is no longer dry-run (the operator switched to enforce): the plan
showed what would happen, and now it happens. Resolutions of incidents whose action is done and whose policy says
``resume_on_resolve`` come back as undo requests.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass, field

from ranksight.aggregator.actions.model import ACTED, FINAL, Action, action_id
from ranksight.aggregator.actions.settings import ActionPolicy, ActionSettings
from ranksight.aggregator.alerts import Condition, RuleDoc
from ranksight.aggregator.analysis.xid import resolution
from ranksight.aggregator.state import NS, LiveState
from ranksight.aggregator.timefmt import iso, ns_of
from ranksight.schemas.alerts import Alert


def confidence(alert: Alert) -> float:
    """The alert's own confidence (straggler findings carry one); a rule without one is certain of what it saw."""
    value = alert.evidence.get("confidence")
    return float(value) if isinstance(value, int | float) else 1.0


def corroboration(alert: Alert, firing: Iterable[Alert]) -> int:
    """Other signals that agree: the alert's corroborating notes, plus other rules firing on the same node."""
    notes = alert.evidence.get("corroboration")
    own = len(notes) if isinstance(notes, list) else 0
    others = {
        a.rule for a in firing if a.node == alert.node and a.cluster == alert.cluster and a.rule != alert.rule
    }
    return own + (len(others) if alert.node is not None else 0)


@dataclass
class Breaker:
    """The nodes acted on per cluster within the window, and whether the breaker opened (it closes once the window has
    room again)."""

    open_since_ns: dict[str, int] = field(default_factory=dict)  # cluster -> when it opened
    refused: dict[str, int] = field(default_factory=dict)  # cluster -> actions it stopped while open


class ActionPlanner:
    def __init__(self, settings: ActionSettings, known: Iterable[Action] = ()) -> None:
        self.settings = settings
        self.actions: dict[str, Action] = {a.id: a for a in known}
        self.breaker = Breaker()

    def mode(self, policy: ActionPolicy) -> str:
        return policy.mode or self.settings.mode

    def matches(self, policy: ActionPolicy, alert: Alert) -> bool:
        if alert.rule not in policy.rules or alert.severity not in policy.severities:
            return False
        if not any(fnmatch.fnmatchcase(alert.cluster, p) for p in policy.clusters):
            return False
        if not any(fnmatch.fnmatchcase(alert.node or "", p) for p in policy.nodes):
            return False
        if policy.xid_resolutions:
            code = alert.evidence.get("xid")
            return isinstance(code, int) and resolution(code, self.settings.xid) in policy.xid_resolutions
        return True

    def acted_nodes(self, cluster: str, now_ns: int, dry_run: bool = False) -> set[str]:
        """Nodes of ``cluster`` acted on within the breaker's window (queued counts: it is about to be); ``dry_run``:
        also those a dry-run plan would have acted on, so that the plan shows where the breaker would stop."""
        since = now_ns - int(self.settings.window_s * NS)
        counted = ACTED | {"planned"} if dry_run else ACTED
        return {a.node for a in self.actions.values() if a.cluster == cluster and a.node is not None
                and a.status in counted and a.detail.get("acted_at_ns", a.at_ns) >= since
                and not (a.status == "planned" and a.result)}  # fmt: skip

    def limit(self, cluster_nodes: int) -> int:
        """Nodes of a cluster of ``cluster_nodes`` that may be acted on per window: ``max_nodes_per_window``, and
        ``max_cluster_fraction`` of the cluster rounded down but at least one (else a small cluster could never be
        acted on)."""
        share = max(1, int(self.settings.max_cluster_fraction * cluster_nodes))
        return min(self.settings.max_nodes_per_window, share)

    def breaker_allows(self, cluster: str, node: str | None, cluster_nodes: int, now_ns: int,
                       dry_run: bool = False) -> str | None:  # fmt: skip
        """None if acting on ``node`` stays within the breaker's limits, else why not."""
        acted = self.acted_nodes(cluster, now_ns, dry_run)
        if node is None or node in acted:
            return None
        limit = self.limit(cluster_nodes)
        if len(acted) + 1 > limit:
            return (f"circuit breaker open: {len(acted)} of {cluster_nodes} nodes acted on within "
                    f"{self.settings.window_s:g} s, limit {limit} (max_nodes_per_window "
                    f"{self.settings.max_nodes_per_window}, max_cluster_fraction {self.settings.max_cluster_fraction:g})")  # fmt: skip
        return None

    def _cooling(self, alert: Alert, policy: ActionPolicy, now_ns: int) -> bool:
        since = now_ns - int(self.settings.cooldown_s * NS)
        return any(a.cluster == alert.cluster and a.node == alert.node and a.status in ACTED
                   and a.fingerprint != alert.fingerprint and a.detail.get("acted_at_ns", a.at_ns) >= since
                   for a in self.actions.values())  # fmt: skip

    def plan(
        self,
        firing: Iterable[Alert],
        cluster_nodes: dict[str, int],
        drained: set[tuple[str, str]],
        now_ns: int,
    ) -> list[Action]:
        """Decisions taken this tick (new actions, or planned ones decided again); each is recorded here at once, so
        a second call never decides the same incident twice."""
        firing = list(firing)
        decided: list[Action] = []
        for alert in firing:
            for policy in self.settings.policies:
                if not self.matches(policy, alert):
                    continue
                aid = action_id(policy.name, alert.fingerprint, alert.started_at)
                known = self.actions.get(aid)
                mode = self.mode(policy)
                if known is not None and not (known.status == "planned" and mode != "dry_run"):
                    continue
                if now_ns - ns_of(alert.started_at) < policy.for_s * NS:
                    continue
                if confidence(alert) < policy.min_confidence:
                    continue
                if corroboration(alert, firing) < policy.min_corroboration:
                    continue
                action = self._decide(policy, alert, aid, mode, cluster_nodes, drained, now_ns)
                self.actions[aid] = action
                decided.append(action)
        self._close_breakers(cluster_nodes, now_ns)
        self._forget(firing, now_ns)
        return decided

    def _forget(self, firing: list[Alert], now_ns: int) -> None:
        """Drop finished actions that no guard rail needs any more (older than the breaker's window, the cooldown and
        the approval timeout, and not about an incident still firing), so memory stays bounded."""
        horizon = now_ns - int(max(self.settings.window_s, self.settings.cooldown_s,
                                   self.settings.approval_timeout_s) * NS)  # fmt: skip
        live = {(a.fingerprint, a.started_at) for a in firing}
        for aid in [aid for aid, a in self.actions.items() if a.status in FINAL and a.at_ns < horizon
                    and a.detail.get("acted_at_ns", 0) < horizon and (a.fingerprint, a.incident_started) not in live]:  # fmt: skip
            del self.actions[aid]

    def _decide(self, policy: ActionPolicy, alert: Alert, aid: str, mode: str, cluster_nodes: dict[str, int],
                drained: set[tuple[str, str]], now_ns: int) -> Action:  # fmt: skip
        base = Action(
            id=aid, policy=policy.name, action=policy.action, mode=mode, cluster=alert.cluster, node=alert.node,
            job=alert.job, rule=alert.rule, severity=alert.severity, fingerprint=alert.fingerprint,
            incident_started=alert.started_at, summary=alert.summary, status="planned", at_ns=now_ns,
            detail={"evidence": alert.evidence, "signal": policy.signal, "entity": alert.entity},
        )  # fmt: skip
        if alert.node is not None and (alert.cluster, alert.node) in drained:
            return base.moved(
                "skipped", now_ns, why="the node is drained in ranksight (ranksight node drain)"
            )
        if alert.node is not None and self._cooling(alert, policy, now_ns):
            return base.moved(
                "skipped", now_ns, why=f"node acted on within cooldown_s ({self.settings.cooldown_s:g} s)"
            )
        why = f"policy {policy.name}: {alert.rule} ({alert.severity}) on {alert.node or alert.cluster}"
        if mode == "dry_run":
            blocked = self.breaker_allows(alert.cluster, alert.node, cluster_nodes.get(alert.cluster, 0), now_ns,
                                          dry_run=True)  # fmt: skip
            return base.moved(
                "planned", now_ns, why=why, result=f"would be stopped: {blocked}" if blocked else ""
            )
        if mode == "approve":
            return base.moved("awaiting_approval", now_ns, why=why)
        blocked = self.breaker_allows(alert.cluster, alert.node, cluster_nodes.get(alert.cluster, 0), now_ns)
        if blocked:
            self.breaker.open_since_ns.setdefault(alert.cluster, now_ns)
            self.breaker.refused[alert.cluster] = self.breaker.refused.get(alert.cluster, 0) + 1
            return base.moved("breaker_open", now_ns, why=blocked)
        return base.moved("queued", now_ns, why=why, detail={**base.detail, "acted_at_ns": now_ns})

    def _close_breakers(self, cluster_nodes: dict[str, int], now_ns: int) -> None:
        for cluster in list(self.breaker.open_since_ns):
            if len(self.acted_nodes(cluster, now_ns)) < self.limit(cluster_nodes.get(cluster, 0)):
                del self.breaker.open_since_ns[cluster]
                self.breaker.refused.pop(cluster, None)

    def approve(self, aid: str, who: str, cluster_nodes: dict[str, int], now_ns: int) -> Action:
        """An operator's approval: ``queued``, or ``breaker_open`` if the breaker has no room (ValueError if there is
        nothing to approve)."""
        action = self._awaiting(aid, now_ns)
        blocked = self.breaker_allows(
            action.cluster, action.node, cluster_nodes.get(action.cluster, 0), now_ns
        )
        if blocked:
            raise ValueError(blocked)
        moved = action.moved("queued", now_ns, who=who, why=f"approved by {who}",
                             detail={**action.detail, "acted_at_ns": now_ns})  # fmt: skip
        self.actions[aid] = moved
        return moved

    def reject(self, aid: str, who: str, now_ns: int) -> Action:
        moved = self._awaiting(aid, now_ns).moved("rejected", now_ns, who=who, why=f"rejected by {who}")
        self.actions[aid] = moved
        return moved

    def _awaiting(self, aid: str, now_ns: int) -> Action:
        action = self.actions.get(aid)
        if action is None:
            raise ValueError(f"no action {aid!r}")
        if action.status != "awaiting_approval":
            raise ValueError(f"action {aid} is {action.status}, not awaiting approval")
        return action

    def expire(self, now_ns: int) -> list[Action]:
        """Actions that awaited approval longer than ``approval_timeout_s``: never taken."""
        limit = int(self.settings.approval_timeout_s * NS)
        gone = [a.moved("expired", now_ns, why=f"not approved within {self.settings.approval_timeout_s:g} s")
                for a in self.actions.values() if a.status == "awaiting_approval" and now_ns - a.at_ns > limit]  # fmt: skip
        for action in gone:
            self.actions[action.id] = action
        return gone

    def resolved(self, alerts: Iterable[Alert]) -> list[Action]:
        """Done actions whose incident just resolved and whose policy resumes on resolve: to be undone."""
        resume = {p.name for p in self.settings.policies if p.resume_on_resolve}
        ended = {(a.fingerprint, a.started_at) for a in alerts if a.state == "resolved"}
        return [a for a in self.actions.values()
                if a.status == "done" and a.policy in resume and (a.fingerprint, a.incident_started) in ended]  # fmt: skip

    def record(self, action: Action) -> None:
        """A step the runner reached (running, done, failed, undone, ...)."""
        self.actions[action.id] = action


class ActionBreakerRule:
    """The alert of an open circuit breaker: actions of the policies stopped in a cluster (critical: a storm of
    findings, or a bad signal, wants a person now). It resolves once the breaker's window has room again."""

    name = "action_breaker_open"
    # hold-down: the planner's own state: it opens and closes once, with its window
    for_s, clear_s = 0.0, 0.0
    doc = RuleDoc(
        "critical",
        "the action circuit breaker stopped actions in a cluster",
        "`aggregator.actions.max_nodes_per_window`, `max_cluster_fraction`, `window_s` (Acting on findings)",
    )

    def __init__(self, planner: ActionPlanner) -> None:
        self.planner = planner

    def evaluate(self, state: LiveState, now_ns: int) -> Iterable[Condition]:
        limit = self.planner.settings
        for cluster, since_ns in self.planner.breaker.open_since_ns.items():
            stopped = self.planner.breaker.refused.get(cluster, 0)
            yield Condition(
                rule=self.name, severity="critical", cluster=cluster, entity="actions",
                summary=f"action circuit breaker open: {stopped} action(s) not taken (more than "
                        f"{limit.max_nodes_per_window} nodes or {limit.max_cluster_fraction:.0%} of the cluster "
                        f"within {limit.window_s:g} s); see ranksight action plan",
                evidence={"stopped": stopped, "open_since": iso(since_ns)},
            )  # fmt: skip
