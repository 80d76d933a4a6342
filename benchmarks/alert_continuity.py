"""Alert continuity across a failover (issue 22), for ``scaleout.py``: the transitions of an injected fault's alerts
on the alert subjects, followed while the benchmark kills the analysis lead (or a shard and a NATS server).

Continuity holds when each of the fault's alerts (one fingerprint each) fired exactly once and never resolved: no
second firing (a re-fire by the new lead) and no resolve + fire pair (an alert the new lead did not know).

    continuity = AlertContinuity("straggler", node="node0")
    await continuity.follow(nc, Subjects(settings.subject_prefix))
    ...  # onset, wait for continuity.fired_at, kill the lead, run on
    print(continuity.report(killed_at=kill_time))
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from nats.aio.client import Client
from nats.aio.msg import Msg

from ranksight.schemas.alerts import Alert
from ranksight.schemas.subjects import Subjects


@dataclass
class AlertContinuity:
    """The transitions of ``rule``'s alerts (of ``node`` when given), with the ``time.monotonic()`` they arrived at."""

    rule: str
    node: str | None = None
    seen: list[tuple[float, Alert]] = field(default_factory=list)
    unreadable: int = 0

    async def follow(self, nc: Client, subjects: Subjects, cluster: str | None = None) -> None:
        await nc.subscribe(subjects.alerts_filter(cluster), cb=self._on_alert)

    async def _on_alert(self, msg: Msg) -> None:
        try:
            alert = Alert.model_validate_json(msg.data)
        except ValueError:
            self.unreadable += 1
            return
        if alert.rule == self.rule and self.node in (None, alert.node):
            self.seen.append((time.monotonic(), alert))

    def count(self, state: str) -> int:
        return sum(alert.state == state for _, alert in self.seen)

    @property
    def fired_at(self) -> float | None:
        """When the first firing transition arrived (``time.monotonic()``), None before."""
        return next((at for at, alert in self.seen if alert.state == "firing"), None)

    @property
    def fingerprints(self) -> set[str]:
        return {alert.fingerprint for _, alert in self.seen}

    def continuous(self) -> bool:
        """Each alert of the fault fired once and stays firing."""
        return (
            bool(self.seen) and self.count("firing") == len(self.fingerprints) and not self.count("resolved")
        )

    def report(self, killed_at: float | None = None) -> str:
        """One line: transitions, and whether the alert fired before the kill and stayed firing across it."""
        fired = self.fired_at
        before_kill = fired is not None and killed_at is not None and fired < killed_at
        after = sum(at >= killed_at for at, _ in self.seen) if killed_at is not None else 0
        verdict = "fires once, stays firing" if self.continuous() else "NOT continuous"
        across = f", fired before the kill: {'yes' if before_kill else 'no'}, transitions after it: {after}"
        return (f"alert continuity ({self.rule}{' on ' + self.node if self.node else ''}): "
                f"{self.count('firing')} firing / {self.count('resolved')} resolved over "
                f"{len(self.fingerprints)} alert(s){across if killed_at is not None else ''}: {verdict}")  # fmt: skip
