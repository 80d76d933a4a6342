"""One health vocabulary for nodes, declared once and used by ``status``, ``nodes`` and ``cluster_map``.

A node has a ``health`` word and a ``severity`` level that never disagree:

| health | severity | when |
|---|---|---|
| ``alive`` | ``ok`` | heartbeats on time, no firing alert (``info`` aside), its GPUs healthy |
| ``degraded`` | ``warning`` or ``critical`` | alive, but a firing alert names it or one of its GPUs is unhealthy |
| ``stale`` | ``warning`` (``critical`` with a critical alert) | its heartbeat is overdue |
| ``gone`` | ``critical`` | silent past ``aggregator.node_gone_after_s`` |
| ``drained`` | ``ok`` | expected to be silent (``ranksight node drain``, ``deploy --uninstall``) |
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal

from ranksight.api.params import NodeHealth

if TYPE_CHECKING:
    from ranksight.aggregator.state.devices import DeviceState
    from ranksight.schemas.alerts import Alert
    from ranksight.schemas.records import GpuRecord

Severity = Literal["ok", "warning", "critical"]
HEALTH_RANK: dict[str, int] = {"ok": 0, "warning": 1, "critical": 2}
NODE_STATE_SEVERITY: dict[str, Severity] = {"alive": "ok", "stale": "warning", "gone": "critical"}


def worst(*levels: Severity) -> Severity:
    return max(levels, key=HEALTH_RANK.__getitem__)


def alert_severity(alerts: Iterable[Alert]) -> dict[tuple[str, str], Severity]:
    """Per (cluster, node), the worst severity of its firing alerts (info alerts change nothing)."""
    found: dict[tuple[str, str], Severity] = {}
    for a in alerts:
        if a.node is None or a.severity == "info":
            continue
        key = (a.cluster, a.node)
        found[key] = worst(found.get(key, "ok"), a.severity)
    return found


def gpu_health(dev: DeviceState[GpuRecord]) -> Severity:
    """A vanished GPU or one with uncorrectable ECC errors is critical; throttled or stale is a warning."""
    if dev.state == "vanished" or (dev.record.ecc_uncorrectable or 0) > 0:
        return "critical"
    if dev.state == "stale" or dev.record.throttled:
        return "warning"
    return "ok"


def node_health(
    state: str, drained: bool, alerts: Severity = "ok", gpus: Iterable[Severity] = ()
) -> tuple[NodeHealth, Severity]:
    """(health, severity) of a node in ``state`` with the worst of its firing alerts and its GPUs' health."""
    if drained:
        return "drained", "ok"
    severity = worst(NODE_STATE_SEVERITY.get(state, "ok"), alerts, *gpus)
    if state == "alive":
        return ("alive" if severity == "ok" else "degraded"), severity
    return ("gone" if state == "gone" else "stale"), severity
