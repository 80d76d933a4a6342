"""What an action is, its statuses and the errors executors raise."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from ranksight.errors import RanksightError

Status = Literal[
    "planned",  # dry-run: what enforce would do
    "awaiting_approval",
    "queued",
    "running",
    "retrying",
    "done",
    "failed",
    "refused",  # the executor found it must not act (drained by someone else, 403)
    "rejected",
    "expired",  # awaited approval longer than approval_timeout_s
    "skipped",  # cooldown, a node drained in ranksight by an operator
    "breaker_open",
    "undoing",
    "undone",
    "undo_failed",
]
# Statuses after which nothing more happens to an action by itself.
FINAL = frozenset({"done", "failed", "refused", "rejected", "expired", "skipped", "breaker_open", "undone",
                   "undo_failed"})  # fmt: skip
# Statuses that count as having acted on the node (circuit breaker, cooldown).
ACTED = frozenset({"queued", "running", "retrying", "done", "undoing", "undone", "undo_failed"})


class ActionFailed(RanksightError):
    """A try failed in a way another try may fix (scontrol unreachable, HTTP 5xx, a timeout)."""


class ActionRefused(RanksightError):
    """The executor must not act, and retrying cannot change that (a node drained by someone else, HTTP 403)."""


def action_id(policy: str, fingerprint: str, incident_started: str) -> str:
    """One id per policy and incident: the same after a restart or on another analysis lead."""
    return hashlib.sha256(f"{policy}\x1f{fingerprint}\x1f{incident_started}".encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Action:
    """One decision of a policy about one incident, and where it stands."""

    id: str
    policy: str
    action: str  # the ActionKind
    mode: str
    cluster: str
    node: str | None
    job: str | None
    rule: str
    severity: str
    fingerprint: str
    incident_started: str  # ISO: the alert's started_at
    summary: str
    status: Status
    at_ns: int  # when the status was reached
    who: str = "ranksight"
    why: str = ""
    result: str = ""
    attempts: int = 0
    detail: dict[str, Any] = field(default_factory=dict)  # the alert's evidence, the signal asked for, ...

    def moved(self, status: Status, at_ns: int, **changes: Any) -> Action:
        return replace(self, status=status, at_ns=at_ns, **changes)

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), default=str).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Action:
        """An action :meth:`to_json` wrote; ValueError or TypeError if it is not one."""
        doc = json.loads(data)
        if not isinstance(doc, dict):
            raise ValueError("not an action")
        return cls(**doc)

    def finding(self) -> dict[str, Any]:
        """The finding as executors hand it on (webhook body, a command's stdin): JSON-ready."""
        return json.loads(json.dumps(asdict(self), default=str))
