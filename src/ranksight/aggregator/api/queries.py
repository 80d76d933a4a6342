"""The aggregator's own query handlers (nodes, alerts, SQL, export, live devices, links, stragglers): each takes its
validated parameter model; they are declared as endpoints in :mod:`aggregator.api.endpoints`."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ranksight.aggregator.alerts import LIFECYCLE_RULES
from ranksight.aggregator.api.endpoint import Forbidden, handles
from ranksight.aggregator.api.health import nodes_health
from ranksight.aggregator.api.merge import Merge
from ranksight.aggregator.api.sql import jsonable
from ranksight.aggregator.history import export_parquet, exported_until
from ranksight.aggregator.state.devices import DeviceState
from ranksight.aggregator.state.links import link_rows
from ranksight.aggregator.timefmt import iso, utc
from ranksight.api.contract import ClusterParams, DeviceParams, RequestError
from ranksight.api.params import AlertsParams, ExportParams, NodesParams, SqlParams, StatusParams
from ranksight.schemas.api import ApiResponse
from ranksight.schemas.structs import to_builtins

if TYPE_CHECKING:
    from ranksight.aggregator.runtime import Aggregator
    from ranksight.aggregator.state import NodeState


# How sharded aggregators' answers join (aggregator.api.merge): node rows by node, the newest report winning.
BY_NODE: Merge[Any] = Merge(key=("cluster", "node"), order=("cluster", "node"), newest="last_seen")
ALERTS = Merge[AlertsParams](
    key=lambda p: ("fingerprint",) if p.state == "firing" else ("fingerprint", "state", "updated_at"),
    order=lambda p: ("-started_at",) if p.state == "firing" else ("-updated_at",),
    newest="updated_at", limit="limit")  # fmt: skip


def _sorted_nodes(agg: Aggregator) -> list[NodeState]:
    return sorted(agg.state.nodes.nodes.values(), key=lambda n: (n.cluster, n.node))


def _node_alerts(agg: Aggregator) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Firing alerts (lifecycle ``info`` aside) by (cluster, node): what makes a node degraded."""
    found: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for a in sorted(agg.engine.active.values(), key=lambda a: a.started_at):
        if a.node is not None and a.severity != "info":
            found.setdefault((a.cluster, a.node), []).append(
                {"rule": a.rule, "severity": a.severity, "entity": a.entity, "summary": a.summary,
                 "fingerprint": a.fingerprint, "started_at": a.started_at}
            )  # fmt: skip
    return found


def _node_rows(agg: Aggregator) -> list[dict[str, Any]]:
    rows = []
    alerts = _node_alerts(agg)
    healths = nodes_health(agg.state, agg.engine.active.values(), agg.engine.drained)
    for n in _sorted_nodes(agg):
        key = (n.cluster, n.node)
        mine = alerts.get(key, [])
        state, health = healths[key]
        rows.append({
            "node": n.node,
            "cluster": n.cluster,
            "state": state,
            "last_seen": iso(n.last_seen_ns),
            "expires": iso(n.expires_ns),
            "agent": n.agent,
            "hostname": n.hostname,
            "version": n.version,
            "clock_skew_s": round(n.clock_skew_s, 3),
            "collectors": n.collectors,
            "jobs": n.jobs,
            "health": health,
            "severity": health,  # the same word (health.py); kept for scripts that read it
            "alerts": mine,
        })  # fmt: skip
    return rows


@handles("status", merge=BY_NODE)
async def status(agg: Aggregator, p: StatusParams) -> ApiResponse:
    """Nodes and their state; ``meta``: the aggregator's own status."""
    rows = [r for r in _node_rows(agg) if p.cluster in (None, r["cluster"])]
    return ApiResponse.success(rows, meta=agg.status_meta())


@handles("nodes", merge=BY_NODE)
async def nodes(agg: Aggregator, p: NodesParams) -> ApiResponse:
    """Every node the aggregator knows, with its agent's health and publisher counters."""
    rows = []
    for row, n in zip(_node_rows(agg), _sorted_nodes(agg), strict=True):
        wanted = (p.cluster, p.node, p.state, p.health)
        have = (n.cluster, n.node, row["state"], row["health"])
        if any(w not in (None, h) for w, h in zip(wanted, have, strict=True)):
            continue
        rows.append({**row, "started": iso(n.started_ns), "publisher": n.publisher})
    return ApiResponse.success(rows)


_ALERT_FILTERS = ("cluster", "rule", "severity", "node")


@handles("alerts", merge=ALERTS)
async def alerts(agg: Aggregator, p: AlertsParams) -> ApiResponse:
    """Firing alerts from live state (job lifecycle events aside unless asked), or (state=resolved|all) alert transitions from history, newest first."""
    if p.state == "firing":
        events = p.lifecycle or p.rule in LIFECYCLE_RULES
        taken = agg.actions.by_fingerprint()  # what the action policies did about each (docs/actions.md)
        found = [a.model_dump() | {"actions": taken.get(a.fingerprint, [])} for a in agg.engine.active.values()
                 if all(getattr(p, k) in (None, getattr(a, k)) for k in _ALERT_FILTERS)
                 and (events or a.rule not in LIFECYCLE_RULES)]  # fmt: skip
        found.sort(key=lambda a: a["started_at"], reverse=True)
        return ApiResponse.success(found[: p.limit], truncated=len(found) > p.limit)
    where, args = ["TRUE"], []
    for key in _ALERT_FILTERS:
        if getattr(p, key) is not None:
            where.append(f"{key} = ?")
            args.append(getattr(p, key))
    if p.state == "resolved":
        where.append("state = 'resolved'")
    if p.since is not None:
        where.append("updated_at >= ?")
        args.append(utc(p.since))
    sql = f"SELECT * FROM alert_history WHERE {' AND '.join(where)} ORDER BY updated_at DESC LIMIT ?"
    rows = await agg.sandbox.run(history_rows, sql, [*args, p.limit + 1])
    return ApiResponse.success(rows[: p.limit], truncated=len(rows) > p.limit)


def history_rows(cursor: Any, sql: str, args: list[Any]) -> list[dict[str, Any]]:
    """Rows of a parameterized history query (on a sandbox reader cursor) as JSON-ready dicts."""
    cur = cursor.execute(sql, args)
    names = [d[0] for d in cur.description]
    return [{n: jsonable(v) for n, v in zip(names, r, strict=True)} for r in cur.fetchall()]


# not merged: an aggregate or a LIMIT does not union; SQL across shards reads their Parquet exports
@handles("sql")
async def sql(agg: Aggregator, p: SqlParams) -> ApiResponse:
    """A read-only query over the history (the sandbox refuses anything else); capped rows, limited time."""
    cfg = agg.settings.aggregator.query
    max_rows = min(p.max_rows or cfg.sql_max_rows, cfg.sql_max_rows)
    limit_s = min(p.time_limit_s or cfg.sql_time_limit_s, cfg.sql_time_limit_s)
    exports = agg.settings.aggregator.shards.export_dir if p.shards else None
    if p.shards and exports is None:
        raise RequestError(
            "SQL across shards reads the shards' Parquet exports: set aggregator.shards.export_dir"
        )
    result = await agg.sandbox.query(p.sql, max_rows, limit_s, exports)
    meta: dict[str, Any] = {
        "columns": result.columns,
        "elapsed_s": round(result.elapsed_s, 6),
        "max_rows": max_rows,
    }
    if exports is not None:
        meta["exported_until"] = await asyncio.to_thread(exported_until, exports)
    return ApiResponse.success(result.rows, truncated=result.truncated, meta=meta)


@handles("export")
async def export(agg: Aggregator, p: ExportParams) -> ApiResponse:
    """Parquet of [since, until) under ``dir`` on the aggregator host, partitioned by day; one row per table."""
    if not agg.settings.aggregator.query.export_enabled:
        raise RequestError("export is disabled on this aggregator (aggregator.query.export_enabled)")
    since, until = utc(p.since), utc(p.until)
    if since >= until:
        raise RequestError("since must be before until")
    out = await asyncio.to_thread(export_dir, agg.settings.export_root(), p.dir)
    rows = await agg.sandbox.run(export_parquet, since, until, out)
    return ApiResponse.success(rows)


def export_dir(root: Path, requested: str) -> Path:
    """Where ``requested`` (relative to ``root``, or absolute) lands, refused with :class:`Forbidden` unless it stays
    under ``root`` once ``..`` and symbolic links are resolved. Creates ``root`` (0700) if missing."""
    path = Path(requested)
    if ".." in path.parts:
        raise Forbidden(f"dir {requested!r}: '..' is not allowed in an export path")
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    real_root = root.resolve()
    target = (
        real_root / path
    ).resolve()  # an absolute path replaces the root; links resolved where they exist
    if not target.is_relative_to(real_root):
        raise Forbidden(
            f"dir {requested!r} is outside the export root {real_root} (aggregator.query.export_root)"
        )
    return target


def _device_rows(agg: Aggregator, kind: str, p: DeviceParams) -> list[dict[str, Any]]:
    devices: dict[tuple[str, str, str], DeviceState[Any]] = (
        agg.state.gpus.devices if kind == "gpu" else agg.state.nics.devices  # type: ignore[assignment]
    )
    rows = []
    for (cluster, node, _), dev in sorted(devices.items()):
        if p.cluster not in (None, cluster) or p.node not in (None, node):
            continue
        rows.append({"cluster": cluster, "node": node, "freshness": dev.state, "last_seen": iso(dev.last_seen_ns),
                     **to_builtins(dev.record)})  # fmt: skip
    return rows


@handles(
    "gpus",
    merge=Merge(key=("cluster", "node", "index"), order=("cluster", "node", "index"), newest="last_seen"),
)
async def gpus(agg: Aggregator, p: DeviceParams) -> ApiResponse:
    """Live GPU state per node: utilization, memory, power, temperature, clocks, ECC."""
    return ApiResponse.success(_device_rows(agg, "gpu", p))


@handles(
    "nics",
    merge=Merge(key=("cluster", "node", "name"), order=("cluster", "node", "name"), newest="last_seen"),
)
async def nics(agg: Aggregator, p: DeviceParams) -> ApiResponse:
    """Live NIC state per node: link, speed, rates, errors, flaps."""
    return ApiResponse.success(_device_rows(agg, "nic", p))


def _not_lead() -> ApiResponse:
    """Sharded, on a shard that does not lead: the analysis lead answers for the whole cluster."""
    return ApiResponse.success([], meta={"analysis_lead": False})


def _lead_meta(agg: Aggregator) -> dict[str, Any]:
    """Sharded: this answer is the analysis lead's (a front joining the shards' answers sees whose meta it has)."""
    return {} if agg.lead is None else {"analysis_lead": True}


@handles(
    "links",
    merge=Merge(
        key=("cluster", "src", "dst", "transport", "dst_addr"),
        order=("cluster", "src", "dst"),
        newest="measured",
    ),
)
async def links(agg: Aggregator, p: ClusterParams) -> ApiResponse:
    """The link map: measured bandwidth, RTT and jitter between nodes."""
    state = agg.analysis_state
    if state is None:
        return _not_lead()
    rows, skipped = link_rows(state.links, p.cluster)
    return ApiResponse.success(rows, meta={"skipped": skipped, **_lead_meta(agg)})


@handles(
    "stragglers",
    merge=Merge(
        key=("cluster", "hostname", "pid", "kind", "comm", "rank"),
        order=("cluster", "-slowdown"),
        newest="last_seen",
        counts=("records",),
    ),
)
async def stragglers(agg: Aggregator, p: ClusterParams) -> ApiResponse:
    """Current straggler findings of the online engine (confirmed by evidence over a sliding ``aggregator.stragglers.window_s``)."""
    state = agg.analysis_state
    if state is None:
        return _not_lead()
    rows = []
    for cluster, result in sorted(state.stragglers.clusters.items()):
        if p.cluster and cluster != p.cluster:
            continue
        for f in result.findings:
            rows.append({"cluster": cluster, **f.as_dict(), "first_seen": iso(f.first_ts_us * 1000),
                         "last_seen": iso(f.last_ts_us * 1000)})  # fmt: skip
    tracker = state.stragglers
    meta = {"records": tracker.records, "window_s": tracker.settings.window_s,
            "evaluated": {c: iso(r.evaluated_ns) for c, r in tracker.clusters.items()}, **_lead_meta(agg)}  # fmt: skip
    return ApiResponse.success(rows, meta=meta)
