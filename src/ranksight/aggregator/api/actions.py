"""Action endpoints (docs/actions.md): the plan, the actions and their audit trail, approve, reject and undo.

``action_approve``, ``action_reject`` and ``action_undo`` change state, so they are NATS endpoints only (like
``drain``); the others read, and are on the HTTP API too.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Literal

from ranksight.aggregator.actions.desk import action_row, cluster_sizes
from ranksight.aggregator.api.endpoint import handles
from ranksight.aggregator.api.merge import Merge
from ranksight.aggregator.api.queries import history_rows
from ranksight.api.contract import RequestError
from ranksight.api.params import (
    ActionAuditParams,
    ActionDecisionParams,
    ActionPlanParams,
    ActionsParams,
    ActionUndoParams,
)
from ranksight.schemas.api import ApiResponse

if TYPE_CHECKING:
    from ranksight.aggregator.runtime import Aggregator

PLAN_STATUSES = ("planned", "awaiting_approval", "breaker_open")


def _meta(agg: Aggregator) -> dict[str, object]:
    planner = agg.actions.planner
    return {"mode": agg.settings.aggregator.actions.mode, "policies": [p.name for p in planner.settings.policies],
            "breaker_open": sorted(planner.breaker.open_since_ns), "queue": agg.actions.runner.queue.qsize(),
            "refused_queue_full": agg.actions.runner.stats.refused_full}  # fmt: skip


@handles("action_plan", merge=Merge(key=("id",), order=("-at",)))
async def action_plan(agg: Aggregator, p: ActionPlanParams) -> ApiResponse:
    """What the policies decided and did not do (yet): dry-run plans, actions awaiting approval, and what the circuit
    breaker stopped; meta: the mode, the policies and the clusters whose breaker is open."""
    rows = [action_row(a) for a in agg.actions.planner.actions.values()
            if a.status in PLAN_STATUSES and p.cluster in (None, a.cluster)]  # fmt: skip
    return ApiResponse.success(sorted(rows, key=lambda r: r["at"], reverse=True), meta=_meta(agg))


@handles("actions", merge=Merge(key=("id",), order=("-at",), limit="limit"))
async def actions(agg: Aggregator, p: ActionsParams) -> ApiResponse:
    """Actions the aggregator knows now (this run's and those reloaded at start), newest first."""
    rows = [action_row(a) for a in agg.actions.planner.actions.values()
            if p.cluster in (None, a.cluster) and p.status in (None, a.status)]  # fmt: skip
    rows.sort(key=lambda r: r["at"], reverse=True)
    return ApiResponse.success(rows[: p.limit], truncated=len(rows) > p.limit, meta=_meta(agg))


_AUDIT_SQL = """SELECT step_at, step, id, who, policy, action, mode, cluster, node, rule, why, result, attempts
FROM action_audit WHERE {where} ORDER BY step_at DESC, seq DESC LIMIT ?"""


@handles("action_audit", merge=Merge(key=("id", "step", "step_at"), order=("-step_at",), limit="limit"))
async def action_audit(agg: Aggregator, p: ActionAuditParams) -> ApiResponse:
    """The audit trail from history: every step of every action (who, what, why, result), newest first."""
    cap = agg.settings.aggregator.actions.max_audit_rows
    limit = min(p.limit or cap, cap)
    where, args = ("id = ?", [p.id]) if p.id else ("TRUE", [])
    rows = await agg.sandbox.run(history_rows, _AUDIT_SQL.format(where=where), [*args, limit + 1])
    return ApiResponse.success(rows[:limit], truncated=len(rows) > limit)


@handles("action_approve")
async def action_approve(agg: Aggregator, p: ActionDecisionParams) -> ApiResponse:
    """Approve an action awaiting approval: it runs (unless the circuit breaker has no room)."""
    desk = agg.actions
    try:
        state = agg.analysis_state or agg.state  # sharded: the lead's cluster-wide view
        moved = desk.planner.approve(p.id, p.who or "unknown", cluster_sizes(state), time.time_ns())
    except ValueError as exc:
        raise RequestError(str(exc)) from None
    desk.runner.submit([moved])
    return ApiResponse.success([action_row(moved)])


@handles("action_reject")
async def action_reject(agg: Aggregator, p: ActionDecisionParams) -> ApiResponse:
    """Reject an action awaiting approval: it never runs."""
    try:
        moved = agg.actions.planner.reject(p.id, p.who or "unknown", time.time_ns())
    except ValueError as exc:
        raise RequestError(str(exc)) from None
    agg.actions.runner.submit([moved])
    return ApiResponse.success([action_row(moved)])


UNDOABLE: tuple[Literal["done", "undo_failed"], ...] = ("done", "undo_failed")


@handles("action_undo")
async def action_undo(agg: Aggregator, p: ActionUndoParams) -> ApiResponse:
    """Undo a done action: resume the Slurm node, uncordon, remove the exclusion, or tell the webhook or command."""
    action = agg.actions.planner.actions.get(p.id)
    if action is None:
        raise RequestError(f"no action {p.id!r}")
    if action.status not in UNDOABLE:
        raise RequestError(f"action {p.id} is {action.status}: only a done action can be undone")
    who = p.who or "unknown"
    moved = agg.actions.runner.request_undo(action, who, p.reason or f"undone by {who}")
    return ApiResponse.success([action_row(moved)])
