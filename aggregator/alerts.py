"""Alert lifecycle: rules state what is true now; the engine turns that into firing/resolved transitions.

A rule returns the :class:`Condition` list it currently sees. The engine fingerprints each (rule + where), fires the new
ones, resolves those that vanished, and keeps the active set. Active alerts are persisted and reloaded at start, so a
restart (which replays history into live state) re-fires nothing that is already firing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from aggregator.state import LiveState
from aggregator.timefmt import iso
from schemas.alerts import Alert, Severity


@dataclass(frozen=True)
class Condition:
    rule: str
    severity: Severity
    cluster: str
    summary: str
    node: str | None = None
    job: str | None = None
    comm: str | None = None
    rank: int | None = None
    key: str = ""  # extra identity beyond node/job/comm/rank (e.g. a GPU index or a link)
    evidence: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def fingerprint(self) -> str:
        ident = "\x1f".join(
            str(v) for v in (self.rule, self.cluster, self.node, self.job, self.comm, self.rank, self.key)
        )
        return hashlib.sha256(ident.encode()).hexdigest()[:16]


class Rule(Protocol):
    name: str

    def evaluate(self, state: LiveState, now_ns: int) -> Iterable[Condition]: ...


class AlertEngine:
    def __init__(self, active: Iterable[Alert] = ()) -> None:
        self.active: dict[str, Alert] = {a.fingerprint: a for a in active}

    def evaluate(self, rules: Iterable[Rule], state: LiveState, now_ns: int) -> list[Alert]:
        """Run every rule; return the transitions (new firing alerts and resolutions) to store and publish."""
        transitions: list[Alert] = []
        evaluated: set[str] = set()
        seen: set[str] = set()
        for rule in rules:
            evaluated.add(rule.name)
            for cond in rule.evaluate(state, now_ns):
                fp = cond.fingerprint
                seen.add(fp)
                if fp in self.active:
                    continue
                alert = Alert(
                    rule=cond.rule, severity=cond.severity, fingerprint=fp, state="firing", cluster=cond.cluster,
                    node=cond.node, job=cond.job, comm=cond.comm, rank=cond.rank, summary=cond.summary,
                    evidence=cond.evidence, started_at=iso(now_ns) or "", updated_at=iso(now_ns) or "",
                )  # fmt: skip
                self.active[fp] = alert
                transitions.append(alert)
        for fp, alert in list(self.active.items()):
            if alert.rule in evaluated and fp not in seen:
                resolved = alert.model_copy(update={"state": "resolved", "resolved_at": iso(now_ns),
                                                    "updated_at": iso(now_ns)})  # fmt: skip
                del self.active[fp]
                transitions.append(resolved)
        return transitions
