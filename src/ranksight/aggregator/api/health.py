"""The one health vocabulary, declared here and used by every face: ``status``, ``nodes``, ``jobs``, ``comms``,
``cluster_map``, ``gpus``, the web page (it reads :data:`HEALTH_WORDS` from ``cluster_map``'s ``meta``) and
``/metrics`` (``ranksight_node_health``, ``ranksight_job_health``).

Health is one of three words, from best to worst (:data:`HEALTH_WORDS`); what a thing *is doing* is its ``state``
(a node ``alive``/``stale``/``gone``/``drained``, a job ``running``/``stale``/``ended``), never a health word:

| health | a node | a job (its last RAS status) | a GPU |
|---|---|---|---|
| ``ok`` | alive, no firing alert, its GPUs ok; or drained | ok | fresh, not throttled, no uncorrectable ECC |
| ``warning`` | a warning alert names it, or stale, or a GPU warns | warning, or degraded (ranks missing) | stale or throttled |
| ``critical`` | a critical alert names it, or gone, or a GPU is critical | failed (errors, dead processes) | vanished, uncorrectable ECC |
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ranksight.api.params import HEALTH_WORDS, Health, NodeStateWord

if TYPE_CHECKING:
    from ranksight.aggregator.state import LiveState
    from ranksight.aggregator.state.devices import DeviceState
    from ranksight.schemas.alerts import Alert
    from ranksight.schemas.records import GpuRecord

HEALTH_RANK: dict[str, int] = {word: rank for rank, word in enumerate(HEALTH_WORDS)}
NODE_STATE_HEALTH: dict[str, Health] = {
    "alive": "ok",
    "stale": "warning",
    "gone": "critical",
    "drained": "ok",
}
# RAS's own words for a job (schemas.records.ras.RasHealth) in the one vocabulary
RAS_HEALTH: dict[str, Health] = {
    "ok": "ok",
    "warning": "warning",
    "degraded": "warning",
    "failed": "critical",
}


def worst(*levels: Health) -> Health:
    return max(levels, key=HEALTH_RANK.__getitem__)


def alert_severity(alerts: Iterable[Alert], node_wide: bool = False) -> dict[tuple[str, str], Health]:
    """Per (cluster, node), the worst severity of its firing alerts (info alerts change nothing); ``node_wide``: only
    those about no single GPU (what concerns the whole node)."""
    found: dict[tuple[str, str], Health] = {}
    for a in alerts:
        if a.node is None or a.severity == "info" or (node_wide and alert_gpu(a) is not None):
            continue
        key = (a.cluster, a.node)
        found[key] = worst(found.get(key, "ok"), a.severity)
    return found


def alert_gpu(alert: Alert) -> int | None:
    """The one GPU an alert is about (``evidence.gpu``, or a single ``evidence.gpus``), if it names one."""
    gpu, gpus = alert.evidence.get("gpu"), alert.evidence.get("gpus")
    if isinstance(gpu, int) and not isinstance(gpu, bool):
        return gpu
    if isinstance(gpus, list) and len(gpus) == 1 and isinstance(gpus[0], int):
        return int(gpus[0])
    return None


def gpu_alert_severity(alerts: Iterable[Alert]) -> dict[tuple[str, str, int], Health]:
    """Per (cluster, node, GPU), the worst severity of the firing alerts about that GPU alone (info aside)."""
    found: dict[tuple[str, str, int], Health] = {}
    for a in alerts:
        if a.node is None or a.severity == "info" or (gpu := alert_gpu(a)) is None:
            continue
        key = (a.cluster, a.node, gpu)
        found[key] = worst(found.get(key, "ok"), a.severity)
    return found


def gpu_health(dev: DeviceState[GpuRecord]) -> Health:
    """A vanished GPU or one with uncorrectable ECC errors is critical; throttled or stale is a warning."""
    if dev.state == "vanished" or (dev.record.ecc_uncorrectable or 0) > 0:
        return "critical"
    if dev.state == "stale" or dev.record.throttled:
        return "warning"
    return "ok"


def node_health(
    state: str, drained: bool, alerts: Health = "ok", gpus: Iterable[Health] = ()
) -> tuple[NodeStateWord, Health]:
    """(state, health) of a node in liveness ``state`` with the worst of its firing alerts and its GPUs' health; a
    drained node is expected to be silent: ``drained``, ok."""
    if drained:
        return "drained", "ok"
    node_state: NodeStateWord = state if state in ("alive", "stale", "gone") else "alive"  # type: ignore[assignment]
    return node_state, worst(NODE_STATE_HEALTH[node_state], alerts, *gpus)


def job_health(ras_health: str | None) -> Health | None:
    """A job's health from its last RAS status (None before any); an ended job keeps the health it ended with."""
    return RAS_HEALTH.get(ras_health) if ras_health else None


def nodes_health(
    state: LiveState, alerts: Iterable[Alert], drained: set[tuple[str, str]]
) -> dict[tuple[str, str], tuple[NodeStateWord, Health]]:
    """(state, health) of every node the live state knows, by (cluster, node): what ``status``, ``nodes`` and
    ``/metrics`` show."""
    by_node = alert_severity(alerts)
    gpus: dict[tuple[str, str], list[Health]] = {}
    for (cluster, node, _), dev in state.gpus.devices.items():
        gpus.setdefault((cluster, node), []).append(gpu_health(dev))
    return {key: node_health(n.state, key in drained, by_node.get(key, "ok"), gpus.get(key, ()))
            for key, n in state.nodes.nodes.items()}  # fmt: skip
