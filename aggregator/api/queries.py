"""Query endpoints: name -> coroutine(aggregator, params) -> ApiResponse. Shared by the NATS and HTTP faces."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aggregator.timefmt import iso
from schemas.api import ApiResponse

if TYPE_CHECKING:
    from aggregator.runtime import Aggregator

Query = Callable[["Aggregator", dict[str, Any]], Awaitable[ApiResponse]]


class RequestError(ValueError):
    """A request the endpoint cannot answer as asked (bad parameter); answered with ok=false and code 400."""


def _node_rows(agg: Aggregator) -> list[dict[str, Any]]:
    rows = []
    for n in sorted(agg.state.nodes.nodes.values(), key=lambda n: (n.cluster, n.node)):
        rows.append({
            "node": n.node,
            "cluster": n.cluster,
            "state": n.state,
            "last_seen": iso(n.last_seen_ns),
            "expires": iso(n.expires_ns),
            "agent": n.agent,
            "hostname": n.hostname,
            "version": n.version,
            "clock_skew_s": round(n.clock_skew_s, 3),
            "collectors": n.collectors,
        })  # fmt: skip
    return rows


async def status(agg: Aggregator, params: dict[str, Any]) -> ApiResponse:
    unknown = set(params) - {"cluster"}
    if unknown:
        raise RequestError(f"unknown parameter(s): {', '.join(sorted(unknown))}")
    rows = _node_rows(agg)
    if params.get("cluster"):
        rows = [r for r in rows if r["cluster"] == params["cluster"]]
    return ApiResponse.success(rows, meta=agg.status_meta())


async def stragglers(agg: Aggregator, params: dict[str, Any]) -> ApiResponse:
    """Current straggler findings of the online engine (confirmed over ``aggregator.stragglers.confirm_windows``)."""
    unknown = set(params) - {"cluster"}
    if unknown:
        raise RequestError(f"unknown parameter(s): {', '.join(sorted(unknown))}")
    rows = []
    for cluster, result in sorted(agg.state.stragglers.clusters.items()):
        if params.get("cluster") and cluster != params["cluster"]:
            continue
        for f in result.findings:
            rows.append({"cluster": cluster, **f.as_dict(), "first_seen": iso(f.first_ts_us * 1000),
                         "last_seen": iso(f.last_ts_us * 1000)})  # fmt: skip
    tracker = agg.state.stragglers
    meta = {"records": len(tracker.records), "window_s": tracker.settings.window_s,
            "evaluated": {c: iso(r.evaluated_ns) for c, r in tracker.clusters.items()}}  # fmt: skip
    return ApiResponse.success(rows, meta=meta)


ENDPOINTS: dict[str, Query] = {
    "status": status,
    "stragglers": stragglers,
}
