"""``gpu_underperforming``: a GPU well below its peers of the same model on the cluster, or below its own history.

Peers: the live probe results of GPUs with the same model name on the same cluster. A GPU is flagged on a metric when
it is at least ``min_drop`` below the peer median *and* its robust z-score ``(median - value) / (1.4826 * MAD)`` is at
least ``z_threshold``; the MAD is floored at 1% of the median so a cluster of identical GPUs does not turn measurement
noise into alerts. History: the median of the GPU's own earlier results (at least ``history_min``); a drop of
``history_drop`` flags it even when the whole cluster has too few peers. The straggler engine calls
:func:`gpu_evidence` to cite these findings for a slow rank's node.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ranksight.aggregator.alerts import Condition, RuleDoc
from ranksight.aggregator.models.robust import MAD_TO_SIGMA, median_mad
from ranksight.aggregator.state import LiveState
from ranksight.aggregator.state.gpu_probes import METRICS, GpuKey, GpuProbeTracker, ProbeResult
from ranksight.aggregator.timefmt import iso

MAD_FLOOR = 0.01


def robust_outliers(
    values: dict[GpuKey, float], min_drop: float, z_threshold: float
) -> dict[GpuKey, dict[str, Any]]:
    """Members of one peer group that sit far below its median: key -> evidence."""
    median, mad = median_mad(values.values())
    if median <= 0:
        return {}
    scale = max(MAD_TO_SIGMA * mad, MAD_FLOOR * median)
    out = {}
    for key, value in values.items():
        drop, z = 1 - value / median, (median - value) / scale
        if drop >= min_drop and z >= z_threshold:
            out[key] = {"basis": "peers", "value": value, "peer_median": median, "drop": round(drop, 4),
                        "z": round(z, 2), "peers": len(values)}  # fmt: skip
    return out


@dataclass
class GpuUnderperformingRule:
    name = "gpu_underperforming"
    for_s, clear_s = 0.0, 600.0
    doc = RuleDoc("warning", "active probe well below peers or its history", "see Active GPU probes")
    min_peers: int = 4
    min_drop: float = 0.10
    z_threshold: float = 3.5
    history_min: int = 3
    history_drop: float = 0.15

    def findings(self, tracker: GpuProbeTracker) -> dict[GpuKey, list[dict[str, Any]]]:
        found: dict[GpuKey, list[dict[str, Any]]] = defaultdict(list)
        groups: dict[tuple[str, str], list[ProbeResult]] = defaultdict(list)
        for result in tracker.live.values():
            groups[(result.cluster, result.name)].append(result)
        for members in groups.values():
            for metric in METRICS:
                values = {_key(r): v for r in members if (v := r.metric(metric)) is not None}
                if len(values) < self.min_peers:
                    continue
                for key, evidence in robust_outliers(values, self.min_drop, self.z_threshold).items():
                    found[key].append({"metric": metric, **evidence})
        for key, latest in tracker.live.items():
            earlier = [r for r in tracker.history.get(key, ()) if r.recv_ns < latest.recv_ns]
            for metric in METRICS:
                past = [v for r in earlier if (v := r.metric(metric)) is not None]
                value = latest.metric(metric)
                if value is None or len(past) < self.history_min:
                    continue
                median = statistics.median(past)
                if median > 0 and value < median * (1 - self.history_drop):
                    found[key].append({"metric": metric, "basis": "history", "value": value,
                                       "history_median": median, "drop": round(1 - value / median, 4),
                                       "samples": len(past)})  # fmt: skip
        return found

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        tracker = state.gpu_probes
        for key, items in self.findings(tracker).items():
            result = tracker.live[key]
            worst = max(items, key=lambda f: f["drop"])
            yield Condition(
                rule=self.name,
                severity="warning",
                cluster=result.cluster,
                node=result.node,
                key=f"gpu{result.index}",
                entity=f"gpu {result.index}",
                summary=(
                    f"GPU {result.index} ({result.name}) on {result.node}: {worst['metric']} "
                    f"{worst['drop']:.0%} below its {worst['basis']}"
                ),
                evidence={
                    "gpu": result.index,
                    "name": result.name,
                    "uuid": result.uuid,
                    "measured": iso(result.recv_ns),
                    "findings": items,
                },
            )


def gpu_evidence(
    state: LiveState, cluster: str, node: str, rule: GpuUnderperformingRule | None = None
) -> list[dict[str, Any]]:
    """Underperforming GPUs of one node, for other analyses (the straggler engine) to cite as evidence."""
    tracker = state.gpu_probes
    found = (rule or GpuUnderperformingRule()).findings(tracker)
    return [{"gpu": k[2], "name": tracker.live[k].name, "findings": v} for k, v in sorted(found.items())
            if k[0] == cluster and k[1] == node]  # fmt: skip


def _key(result: ProbeResult) -> GpuKey:
    return (result.cluster, result.node, result.index)
