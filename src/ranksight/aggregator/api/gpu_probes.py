"""``gpu_probes`` query: the live GPU probe results, each with the ``gpu_underperforming`` findings about it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ranksight.aggregator.analysis.gpu_probe import GpuUnderperformingRule
from ranksight.aggregator.api.endpoint import handles
from ranksight.aggregator.api.merge import Merge
from ranksight.aggregator.timefmt import iso
from ranksight.api.contract import DeviceParams
from ranksight.schemas.api import ApiResponse

if TYPE_CHECKING:
    from ranksight.aggregator.runtime import Aggregator


@handles(
    "gpu_probes",
    merge=Merge(
        key=("cluster", "node", "index"),
        order=("cluster", "node", "index"),
        newest="measured",
        counts=("discarded_busy",),
    ),
)
async def gpu_probes(agg: Aggregator, p: DeviceParams) -> ApiResponse:
    """The live GPU probe results, each with the ``gpu_underperforming`` findings about it."""
    tracker = agg.state.gpu_probes
    rule = next((r for r in agg.rules if isinstance(r, GpuUnderperformingRule)), GpuUnderperformingRule())
    findings = rule.findings(tracker)
    rows = []
    for key, r in sorted(tracker.live.items()):
        if p.cluster not in (None, r.cluster) or p.node not in (None, r.node):
            continue
        rows.append({
            "cluster": r.cluster, "node": r.node, "index": r.index, "name": r.name, "uuid": r.uuid,
            "tflops_bf16": r.tflops_bf16, "tflops_fp16": r.tflops_fp16, "mem_bandwidth_bps": r.mem_bandwidth_bps,
            "measured": iso(r.recv_ns), "expires": iso(r.expires_ns),
            "underperforming": key in findings, "findings": findings.get(key, []),
        })  # fmt: skip
    return ApiResponse.success(rows, meta={"discarded_busy": tracker.discarded_busy})
