"""The aggregator's side of acting on findings: the planner and the runner, loaded at start, fed each tick.

:meth:`ActionDesk.tick` is all a tick does for actions: plan (pure, in memory) and hand the decisions to the runner's
queue. Nothing here awaits an executor or the store, so alerts go out at the same time with or without actions.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from ranksight.aggregator.actions.executors import AskAgent
from ranksight.aggregator.actions.model import Action
from ranksight.aggregator.actions.planner import ActionPlanner
from ranksight.aggregator.actions.runner import ActionRunner, audit_rows
from ranksight.aggregator.actions.settings import ActionSettings
from ranksight.aggregator.state import NS
from ranksight.aggregator.timefmt import iso, ns_of
from ranksight.schemas.alerts import Alert

if TYPE_CHECKING:
    from ranksight.aggregator.alerts import AlertEngine
    from ranksight.aggregator.state import LiveState
    from ranksight.aggregator.store import Store

log = logging.getLogger(__name__)
AUDIT_FIELDS = ("id", "policy", "action", "mode", "cluster", "node", "job", "rule", "severity", "fingerprint",
                "summary", "who", "why", "result", "attempts")  # fmt: skip


def action_of_row(row: dict[str, Any]) -> Action:
    """An ``action_audit`` row (its latest step) as the action it describes."""
    detail = row.get("detail")
    return Action(**{k: row[k] for k in AUDIT_FIELDS}, status=row["step"], at_ns=ns_of(iso_of(row["step_at"])),
                  incident_started=iso_of(row["incident_started"]),
                  detail=json.loads(detail) if isinstance(detail, str) else detail or {})  # fmt: skip


def iso_of(value: Any) -> str:
    return value if isinstance(value, str) else value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def action_row(action: Action) -> dict[str, Any]:
    """How the API shows an action."""
    return {"id": action.id, "status": action.status, "at": iso(action.at_ns), "policy": action.policy,
            "action": action.action, "mode": action.mode, "cluster": action.cluster, "node": action.node,
            "job": action.job, "rule": action.rule, "severity": action.severity, "fingerprint": action.fingerprint,
            "incident_started": action.incident_started, "summary": action.summary, "who": action.who,
            "why": action.why, "result": action.result, "attempts": action.attempts}  # fmt: skip


def cluster_sizes(state: LiveState) -> dict[str, int]:
    return dict(Counter(n.cluster for n in state.nodes.nodes.values()))


class ActionDesk:
    def __init__(self, settings: ActionSettings, store: Store, claim: Callable[[Action], Awaitable[bool]] | None = None,
                 ask_agent: AskAgent | None = None,
                 share: Callable[[list[Action]], Awaitable[None]] | None = None) -> None:  # fmt: skip
        self.settings, self.store = settings, store
        self.planner = ActionPlanner(settings)
        self.runner = ActionRunner(settings, self.planner, self._audit, claim, ask_agent, share)

    @property
    def enabled(self) -> bool:
        return bool(self.settings.policies)

    async def _audit(self, actions: list[Action]) -> None:
        await self.store.call(self.store.append_audit, audit_rows(actions))

    async def load(self, firing: Iterable[Alert]) -> None:
        """What was decided before this start: every action of an incident still firing, and every action within the
        breaker's window and the cooldown (they count against both)."""
        horizon = max(self.settings.window_s, self.settings.cooldown_s, self.settings.approval_timeout_s)
        since = time.time_ns() - int(horizon * NS)
        rows = await self.store.call(self.store.action_states, since, [a.fingerprint for a in firing])
        for row in rows:
            action = action_of_row(row)
            self.planner.record(action)
            if action.status in ("running", "retrying", "queued"):
                # stopped mid-way: run again (executors are idempotent: a node drained already is left as it is)
                self.runner.submit([action.moved("queued", time.time_ns(), why="run again after a restart")])
            elif action.status == "undoing":
                self.runner.request_undo(action, action.who, "undo again after a restart")
        if rows:
            log.info("actions: %d decisions reloaded", len(rows))

    def tick(
        self, engine: AlertEngine, cluster_nodes: dict[str, int], transitions: list[Alert], now_ns: int
    ) -> None:
        """``cluster_nodes``: nodes per cluster (the circuit breaker's share of a cluster)."""
        if not self.enabled:
            return
        decided = self.planner.plan(engine.active.values(), cluster_nodes, engine.drained, now_ns)
        decided += self.planner.expire(now_ns)
        self.runner.submit(decided)
        for action in self.planner.resolved(transitions):
            self.runner.request_undo(action, "ranksight", "the incident resolved (resume_on_resolve)")

    def by_fingerprint(self) -> dict[str, list[dict[str, Any]]]:
        """The actions of each alert, to show with it."""
        found: dict[str, list[dict[str, Any]]] = {}
        for action in self.planner.actions.values():
            found.setdefault(action.fingerprint, []).append(
                {"id": action.id, "policy": action.policy, "action": action.action, "status": action.status,
                 "result": action.result or action.why})  # fmt: skip
        return found
