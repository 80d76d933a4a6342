"""Alert lifecycle: rules state what is true now; the engine turns that into firing/resolved transitions.

A rule returns the :class:`Condition` list it currently sees. The engine fingerprints each (rule + where) and applies,
in this order (docs/alerts.md describes the rules):

1. **Planned changes**: a condition on a drained node raises nothing; a firing alert of a drained node resolves.
2. **Inhibition** (:data:`INHIBITIONS`, as Alertmanager's ``inhibit_rules``): a condition explained by a firing source
   alert with equal labels (a silent node explains its GPU, NIC, rank and straggler conditions) does not fire; an alert
   already firing stays, quietly, until its own condition goes.
3. **Ingest behind**: while the aggregator's ingest is more than ``max_ingest_behind_s`` behind its stream, the
   rules that judge silence (:data:`SILENCE_RULES`) see the aggregator's own lag, not the nodes': their conditions do
   not fire, and what already fires stays, quietly, as under inhibition.
4. **Job end**: the alerts of a job that ended resolve at once (lifecycle alerts aside).
5. **Hold-down** per rule (``aggregator.alerts.rules``, Prometheus ``for`` / ``keep_firing_for``): a condition fires once
   it has held for ``for_s`` (pending resets when it vanishes) and a firing alert resolves once its condition has been
   absent for ``clear_s``, so a flapping condition is one alert, not a stream of them.

Active alerts are persisted and reloaded at start, so a restart (which replays history into live state) re-fires nothing
that is already firing. Silences do not change the lifecycle: they mark transitions (``silenced_by``) so that the
publisher mutes them.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ranksight.aggregator.component_settings import AlertSettings
from ranksight.aggregator.state import NS, LiveState
from ranksight.aggregator.timefmt import iso, ns_of
from ranksight.schemas.alerts import Alert, Severity, Silence

log = logging.getLogger(__name__)

LIFECYCLE_RULES = frozenset({"job_started", "job_ended"})
# Rules that judge silence (no heartbeat, no progress, no data by receipt time): an aggregator behind its own ingest
# would see every node and job fall silent at once.
SILENCE_RULES = frozenset({"node_silent", "comm_hang", "collective_hang", "rank_heartbeat_overdue",
                           "rank_section_overdue"})  # fmt: skip
INGEST_BEHIND = "ingest behind"  # what holds a silence rule's conditions while ingest lags


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
    # what it is about, when ``key`` does not say it well (not identity: the fingerprint ignores it)
    entity: str | None = field(default=None, compare=False)
    # the rank it is about when that is not part of its identity (a straggler's rank may differ per communicator):
    # shown in the alert's ``rank``, never moving its fingerprint
    about_rank: int | None = field(default=None, compare=False)

    @property
    def fingerprint(self) -> str:
        ident = "\x1f".join(
            str(v) for v in (self.rule, self.cluster, self.node, self.job, self.comm, self.rank, self.key)
        )
        return hashlib.sha256(ident.encode()).hexdigest()[:16]

    @property
    def where(self) -> str | None:
        """The entity label: given, else the extra identity, else the communicator and rank."""
        if self.entity or self.key:
            return self.entity or self.key
        parts = [
            f"comm {self.comm}" if self.comm else "",
            f"rank {self.rank}" if self.rank is not None else "",
        ]
        return " ".join(p for p in parts if p) or None


@dataclass(frozen=True)
class RuleDoc:
    """What a rule means to an operator: its row of the alert rules page (docs/reference/alert-rules.md, generated)."""

    severity: str
    fires_when: str
    settings: str = ""  # the settings that tune it


class Rule(Protocol):
    """An alert rule: what is true now (:meth:`evaluate`), and beside it its default hold-down, ``for_s`` (how long a
    condition must hold before it fires) and ``clear_s`` (how long it must be absent before the alert resolves), which
    ``[aggregator.alerts.rules.<name>]`` overrides, and its ``doc``."""

    name: str

    @property
    def for_s(self) -> float: ...

    @property
    def clear_s(self) -> float: ...

    @property
    def doc(self) -> RuleDoc: ...

    def evaluate(self, state: LiveState, now_ns: int) -> Iterable[Condition]: ...


@dataclass(frozen=True)
class Inhibition:
    """While an alert of ``source`` fires (or its condition holds), conditions of other rules whose ``equal`` labels
    have the same values raise nothing. ``spare`` rules are never inhibited (lifecycle, and the source itself)."""

    source: str
    equal: tuple[str, ...]
    spare: frozenset[str]

    def key(self, item: Condition | Alert) -> tuple[Any, ...] | None:
        values = tuple(getattr(item, name) for name in self.equal)
        return None if None in values else values


INHIBITIONS = (
    # A node that stopped sending heartbeats explains what its GPUs, NICs, ranks and processes stop saying.
    Inhibition("node_silent", ("cluster", "node"), frozenset({"node_silent"}) | LIFECYCLE_RULES),
)


class AlertEngine:
    """Without ``settings`` every rule fires and resolves at once (the rule's raw truth, as the rule tests use it)."""

    def __init__(self, active: Iterable[Alert] = (), settings: AlertSettings | None = None) -> None:
        self.active: dict[str, Alert] = {a.fingerprint: a for a in active}
        self.settings = settings
        self.pending: dict[str, int] = {}  # fingerprint -> when its condition was first seen (hold-down)
        self.last_seen: dict[str, int] = {}  # firing fingerprint -> when its condition was last seen
        self.drained: set[tuple[str, str]] = set()  # (cluster, node) expected to be silent
        self.silences: dict[str, Silence] = {}
        self.transitions: Counter[tuple[str, str, str]] = Counter()  # (cluster, rule, state) since start
        self.inhibited: dict[str, str] = {}  # fingerprint -> the rule inhibiting it, this round
        self.rule_errors: Counter[str] = Counter()  # rule -> evaluations that raised, since start
        self.hold_downs: dict[str, tuple[float, float]] = {}  # rule -> its declared (for_s, clear_s)

    def _timing_ns(self, rule: str) -> tuple[int, int]:
        if self.settings is None:
            return 0, 0
        for_s, clear_s = self.settings.timing(rule, self.hold_downs.get(rule, (0.0, 0.0)))
        return int(for_s * NS), int(clear_s * NS)

    def silenced_by(self, alert: Alert, now_ns: int) -> list[str]:
        return [s.id for s in self.silences.values()
                if ns_of(s.starts_at) <= now_ns < ns_of(s.ends_at) and s.matches(alert)]  # fmt: skip

    def evaluate(
        self, rules: Iterable[Rule], state: LiveState, now_ns: int, ingest_behind_s: float = 0.0
    ) -> list[Alert]:
        """Run every rule; return the transitions (new firing alerts and resolutions) to store and publish.
        ``ingest_behind_s``: how far the aggregator's ingest is behind its stream now."""
        for sid in [sid for sid, s in self.silences.items() if ns_of(s.ends_at) <= now_ns]:
            del self.silences[sid]  # over: Alertmanager expires its copy at the same time
        evaluated: set[str] = set()
        seen: dict[str, Condition] = {}
        for rule in rules:
            self.hold_downs[rule.name] = (rule.for_s, rule.clear_s)
            try:
                conditions = list(rule.evaluate(state, now_ns))
            except Exception:  # one rule's bug must not stop the others, nor the aggregator: told, not fatal
                self.rule_errors[rule.name] += 1
                log.exception("rule %s failed; its alerts stay as they are", rule.name)
                continue
            evaluated.add(rule.name)
            for cond in conditions:
                seen[cond.fingerprint] = cond
        planned = self._drop_planned(seen)
        behind = self.settings is not None and ingest_behind_s > self.settings.max_ingest_behind_s
        self._inhibit(seen, held=SILENCE_RULES if behind else frozenset())
        ended = {(j.cluster, j.job_id) for j in state.jobs.jobs.values() if j.state == "ended"}
        transitions: list[Alert] = []
        for fp, cond in seen.items():
            if fp in self.active:
                self.last_seen[fp] = now_ns
                active = self.active[fp]
                if active.rank is None and cond.about_rank is not None:
                    active.rank = cond.about_rank  # learnt later (a MONITOR PEER_DEAD names no rank)
                # evidence learnt later (a straggler's GPU, once its training client has reported its local rank)
                learnt = {
                    k: v
                    for k, v in cond.evidence.items()
                    if v is not None and active.evidence.get(k, v) is None
                }
                if learnt:
                    active.evidence = {**active.evidence, **learnt}
                continue
            for_ns, _ = self._timing_ns(cond.rule)
            first = self.pending.setdefault(fp, now_ns)
            if now_ns - first < for_ns:
                continue
            del self.pending[fp]
            alert = Alert(
                rule=cond.rule, severity=cond.severity, fingerprint=fp, state="firing", cluster=cond.cluster,
                node=cond.node, job=cond.job, comm=cond.comm, rank=cond.rank if cond.rank is not None else cond.about_rank,
                entity=cond.where,
                summary=cond.summary, evidence=cond.evidence, started_at=iso(now_ns) or "",
                updated_at=iso(now_ns) or "",
            )  # fmt: skip
            alert.silenced_by = self.silenced_by(alert, now_ns)
            self.active[fp] = alert
            self.last_seen[fp] = now_ns
            transitions.append(alert)
        for fp in [fp for fp in self.pending if fp not in seen]:
            del self.pending[fp]
        for fp, alert in list(self.active.items()):
            if alert.rule not in evaluated or fp in seen:
                continue
            last = self.last_seen.setdefault(fp, now_ns)  # reloaded at start: counts from now
            job_over = alert.rule not in LIFECYCLE_RULES and (alert.cluster, alert.job) in ended
            why = "drained" if fp in planned else "job ended" if job_over else None
            if fp in self.inhibited:
                self.last_seen[fp] = (
                    now_ns  # explained by its source alert: kept, quietly, until that resolves
                )
                continue
            if why is None and now_ns - last < self._timing_ns(alert.rule)[1]:
                continue
            resolved = alert.model_copy(update={"state": "resolved", "resolved_at": iso(now_ns),
                                                "updated_at": iso(now_ns)})  # fmt: skip
            if why is not None:
                resolved.evidence = {**alert.evidence, "resolved_because": why}
            resolved.silenced_by = self.silenced_by(resolved, now_ns)
            del self.active[fp]
            self.last_seen.pop(fp, None)
            transitions.append(resolved)
        for a in transitions:
            self.transitions[(a.cluster, a.rule, a.state)] += 1
        return transitions

    def _drop_planned(self, seen: dict[str, Condition]) -> set[str]:
        """Remove the conditions of drained nodes; the fingerprints of firing alerts that a drain resolves."""
        for fp in [fp for fp, c in seen.items() if (c.cluster, c.node) in self.drained]:
            del seen[fp]
        return {fp for fp, a in self.active.items() if (a.cluster, a.node) in self.drained}

    def _inhibit(self, seen: dict[str, Condition], held: frozenset[str]) -> None:
        """Inhibition, after the ``held`` rules (ingest behind: their silence is the aggregator's own lag) raise
        nothing and explain nothing; their firing alerts stay as they are."""
        self.inhibited = {}
        for fp in [fp for fp, c in seen.items() if c.rule in held]:
            del seen[fp]
            self.pending.pop(fp, None)
            self.inhibited[fp] = INGEST_BEHIND
        self.inhibited |= {fp: INGEST_BEHIND for fp, a in self.active.items() if a.rule in held}
        if self.settings is not None and not self.settings.inhibit:
            return
        for rule in INHIBITIONS:
            sources = {k for c in seen.values() if c.rule == rule.source and (k := rule.key(c)) is not None}
            sources |= {
                k for a in self.active.values() if a.rule == rule.source and (k := rule.key(a)) is not None
            }
            if not sources:
                continue
            for fp, cond in list(seen.items()):
                if cond.rule not in rule.spare and rule.key(cond) in sources:
                    self.inhibited[fp] = rule.source
                    del seen[fp]
                    self.pending.pop(fp, None)
            for fp, alert in self.active.items():
                if alert.rule not in rule.spare and rule.key(alert) in sources:
                    self.inhibited[fp] = rule.source
