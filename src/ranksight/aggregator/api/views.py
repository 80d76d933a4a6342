"""Read endpoints for the web page's views: ``cluster_map`` (live node and GPU health) and ``series`` (time series
from the DuckDB history, bounded by time range, point count and series count).

A node's health comes from :mod:`aggregator.api.health` (the vocabulary ``status`` and ``nodes`` use too), so a node
with an alert is never shown healthy whatever its heartbeat says. Each series is declared once in :data:`SERIES`
(table, time, value, what one line is, which filters apply).
"""

from __future__ import annotations

import dataclasses
import datetime
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ranksight.aggregator.alerts import LIFECYCLE_RULES
from ranksight.aggregator.api.endpoint import handles
from ranksight.aggregator.api.health import (
    HEALTH_RANK,
    HEALTH_WORDS,
    NODE_STATE_HEALTH,
    alert_gpu,
    alert_severity,
    gpu_alert_severity,
    gpu_health,
    node_health,
    worst,
)
from ranksight.aggregator.api.merge import Merge
from ranksight.aggregator.api.sql import jsonable
from ranksight.aggregator.device_jobs import device_jobs
from ranksight.aggregator.timefmt import utc
from ranksight.api.contract import ClusterParams, RequestError
from ranksight.api.params import SeriesParams
from ranksight.schemas.api import ApiResponse

if TYPE_CHECKING:
    import duckdb

    from ranksight.aggregator.runtime import Aggregator

MAX_NODE_ALERTS = 5  # alerts listed per node in the map (the count is always given)
US = 1_000_000
EPOCH = datetime.datetime(1970, 1, 1)


@handles("cluster_map", merge=Merge(key=("cluster", "node"), order=("cluster", "node")))
async def cluster_map(agg: Aggregator, p: ClusterParams) -> ApiResponse:
    """Every node with its health (from state and firing alerts) and its GPUs' health and utilization. A GPU's health
    counts the alerts about it alone; ``node_wide`` is what concerns the whole node (its state and the alerts about
    no single GPU): a straggling GPU marks that GPU, not its node's others. ``meta.health_words``: the vocabulary,
    best first."""
    active = [a for a in agg.engine.active.values() if p.cluster in (None, a.cluster)]
    by_node, whole_node, by_gpu = (
        alert_severity(active),
        alert_severity(active, node_wide=True),
        gpu_alert_severity(active),
    )
    node_alerts: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for a in sorted(active, key=lambda a: -HEALTH_RANK.get(a.severity, 0)):
        if a.node is not None:
            node_alerts.setdefault((a.cluster, a.node), []).append(
                {
                    "rule": a.rule,
                    "severity": a.severity,
                    "summary": a.summary,
                    "rank": a.rank,
                    "gpu": alert_gpu(a),
                }
            )
    gpus: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for (cluster, node, _), dev in sorted(agg.state.gpus.devices.items(), key=lambda kv: kv[1].record.index):
        g = dev.record
        gpus.setdefault((cluster, node), []).append(
            {
                "gpu": g.index,
                "health": worst(gpu_health(dev), by_gpu.get((cluster, node, g.index), "ok")),
                "utilization_pct": g.utilization_pct,
                "name": g.name,
            }
        )
    rows = []
    for (cluster, node), n in sorted(agg.state.nodes.nodes.items()):
        if p.cluster not in (None, cluster):
            continue
        devices = gpus.get((cluster, node), [])
        state, health = node_health(n.state, (cluster, node) in agg.engine.drained,
                                    by_node.get((cluster, node), "ok"), (d["health"] for d in devices))  # fmt: skip
        node_wide = worst(NODE_STATE_HEALTH[state], whole_node.get((cluster, node), "ok"))
        listed = node_alerts.get((cluster, node), [])
        rows.append({"cluster": cluster, "node": node, "state": state, "health": health, "severity": health,
                     "node_wide": "ok" if state == "drained" else node_wide, "alerts": len(listed),
                     "alert_rules": listed[:MAX_NODE_ALERTS], "gpus": devices})  # fmt: skip
    return ApiResponse.success(rows, meta={"health_words": list(HEALTH_WORDS)})


@dataclass(frozen=True)
class Series:
    """One time series family: ``value`` aggregated per bucket of ``time_us`` (epoch microseconds), one line per
    ``line``; ``node`` is the column a node filter applies to; ``job`` says how a job filter applies (``app``: the
    ``job_id`` column; ``comms``: Inspector rows of the job's communicators; None: no job filter)."""

    table: str  # a table, or a query over one in parentheses
    time_us: str
    value: str
    line: str
    node: str
    unit: str
    where: str = "TRUE"
    job: Literal["app", "comms"] | None = None
    computed: str = ""  # columns computed over the rows of the range (window functions), for ``value``
    fallback: str | None = None  # the series asked instead when this one has no line in the range


_EPOCH_US = "epoch_us(recv_ts)"
_GPU = "node || ' gpu ' || \"index\""
_NIC = "node || ' ' || name"
# A rank's lateness in a communicator's collectives: how long after the first rank of its group it arrived. Every rank
# leaves a collective together, so each rank's own kernel time holds its wait: the longest mean time of the window's
# ranks minus its own is its lateness. From the agents' per-window summaries, which cover every record (raw records
# are only a sample); a window's parts (each agent's own, at its own times) are added up per rank first.
_MEAN_EXEC = "exec_sum_us / timed"
_LATENESS = (f"max({_MEAN_EXEC}) OVER (PARTITION BY comm_id, op, size_bucket, window_start_us) - {_MEAN_EXEC} "
             "AS lateness_us")  # fmt: skip
_RANK_WINDOWS = ("(SELECT cluster, comm_id, op, op_kind, size_bucket, window_start_us, hostname, pid, rank, "
                 "sum(exec_sum_us) AS exec_sum_us, sum(timed) AS timed FROM inspector_summary GROUP BY ALL)")  # fmt: skip

# A rank's iteration period from Inspector, for jobs that do not report steps (no ranksight.client): per window, the
# window's length over how often the rank ran its largest collective (a training step issues its largest gradient
# collective a fixed number of times, usually once).
_PERIODS = ("(SELECT *, max(size_bucket) OVER (PARTITION BY comm_id, rank, window_start_us) AS largest FROM "
            "(SELECT cluster, comm_id, op, op_kind, size_bucket, window_start_us, window_us, hostname, pid, rank, "
            "sum(count) AS count FROM inspector_summary WHERE op_kind = 'coll' GROUP BY ALL))")  # fmt: skip

SERIES: dict[str, Series] = {
    "step_time_s": Series("app", "client_ts // 1000", "avg(step_time_s)", "'rank ' || coalesce(rank::VARCHAR, node || ' pid ' || pid)",
                          "node", "s", "event = 'heartbeat' AND step_time_s IS NOT NULL", job="app",
                          fallback="step_period_s"),
    "step_period_s": Series(_PERIODS, "window_start_us", "avg(window_us / count) / 1e6", "hostname || ' pid ' || pid",
                            "hostname", "s", "size_bucket = largest AND count > 0", job="comms"),
    "busbw_gbs": Series("inspector_summary", "window_start_us", "avg(busbw_gbs)", "coalesce(comm_name, comm_id)",
                        "hostname", "GB/s", "op_kind = 'coll' AND busbw_gbs IS NOT NULL", job="comms"),
    "lateness_us": Series(_RANK_WINDOWS, "window_start_us", "avg(lateness_us)", "hostname || ' pid ' || pid",
                          "hostname", "us", "op_kind = 'coll' AND timed > 0", job="comms", computed=_LATENESS),
    "gpu_utilization_pct": Series("gpu", _EPOCH_US, "avg(utilization_pct)", _GPU, "node", "%"),
    "gpu_clock_hz": Series("gpu", _EPOCH_US, "avg(sclk_hz)", _GPU, "node", "Hz"),
    "gpu_power_w": Series("gpu", _EPOCH_US, "avg(power_w)", _GPU, "node", "W"),
    "gpu_temperature_c": Series("gpu", _EPOCH_US, "max(coalesce(temperature_junction_c, temperature_edge_c))", _GPU,
                                "node", "C"),
    "gpu_memory_used_bytes": Series("gpu", _EPOCH_US, "max(memory_used_bytes)", _GPU, "node", "B"),
    "gpu_ecc_uncorrectable": Series("gpu", _EPOCH_US, "max(ecc_uncorrectable)", _GPU, "node", "errors"),
    "nic_rate_bps": Series("nic", _EPOCH_US, "avg(coalesce(tx_bps, 0) + coalesce(rx_bps, 0))", _NIC, "node", "bit/s",
                           "tx_bps IS NOT NULL OR rx_bps IS NOT NULL"),
    "nic_errors_per_s": Series("nic", _EPOCH_US, "avg(errors_per_s)", _NIC, "node", "1/s"),
    "nic_link_flaps": Series("nic", _EPOCH_US, "sum(link_flaps)", _NIC, "node", "flaps"),
}  # fmt: skip
_COMM = "'0x' || ltrim(lower(regexp_replace(comm_id, '^0[xX]', '')), '0')"  # as RAS hashes are normalized


def _epoch_us(t: datetime.datetime) -> int:
    return (t - EPOCH) // datetime.timedelta(microseconds=1)


@dataclass(frozen=True)
class SeriesQuery:
    series: Series
    since_us: int
    until_us: int
    step_us: int
    cluster: str | None
    nodes: list[str]
    job: str | None
    comms: list[str]
    max_lines: int


# not merged: a rank's lateness needs every rank of its communicator, and a takeover can split a line in two shards
@handles("series")
async def series(agg: Aggregator, p: SeriesParams) -> ApiResponse:
    """A metric over time, one line per GPU, port, rank or communicator, with straggler and alert windows."""
    cfg = agg.settings.aggregator.query
    try:
        until = utc(p.until) if p.until else datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
        since = utc(p.since) if p.since else until - datetime.timedelta(minutes=15)
    except OverflowError:
        raise RequestError("since/until out of range") from None
    if since >= until:
        raise RequestError("since must be before until")
    if (until - since).total_seconds() > cfg.series_max_range_s:
        raise RequestError(f"the range is longer than series_max_range_s ({cfg.series_max_range_s:g}s)")
    since_us, until_us = (_epoch_us(t) for t in (since, until))
    points = min(p.points, cfg.series_max_points)
    comms: list[str] = []
    if p.job is not None:
        comms = sorted({h for (c, j), job in agg.state.jobs.jobs.items() if j == p.job and p.cluster in (None, c)
                        for h in job.comms})  # fmt: skip
    nodes = [n for n in (p.node or "").split(",") if n]
    if p.job is not None and SERIES[p.metric].job is None:  # a device series: the nodes the job runs on
        job_nodes = {n for (c, n), jobs in device_jobs(agg.state).nodes.items()
                     if p.job in jobs and p.cluster in (None, c)}  # fmt: skip
        nodes = sorted(job_nodes & set(nodes) if nodes else job_nodes)
        if not nodes:
            return ApiResponse.success(
                [], meta={"metric": p.metric, "unit": SERIES[p.metric].unit, "windows": []}
            )
    q = SeriesQuery(SERIES[p.metric], since_us, until_us, max(1, -(-(until_us - since_us) // points)), p.cluster,
                    nodes, p.job, comms, cfg.series_max_lines)  # fmt: skip
    lines, truncated, windows = await agg.sandbox.run(_series, q, time_limit_s=cfg.sql_time_limit_s)
    source: str = p.metric
    if not lines and (fallback := q.series.fallback) is not None:  # e.g. no step reports: Inspector's periods
        q = dataclasses.replace(q, series=SERIES[fallback])
        lines, truncated, windows = await agg.sandbox.run(_series, q, time_limit_s=cfg.sql_time_limit_s)
        source = fallback
    meta = {"metric": p.metric, "source": source, "unit": q.series.unit, "since": jsonable(since),
            "until": jsonable(until), "step_s": q.step_us / US, "windows": windows}  # fmt: skip
    return ApiResponse.success(lines, truncated=truncated, meta=meta)


def _filters(q: SeriesQuery) -> tuple[list[str], list[Any]]:
    s = q.series
    where = [f"({s.where})", f"{s.time_us} >= ?", f"{s.time_us} < ?"]
    args: list[Any] = [q.since_us, q.until_us]
    if q.cluster is not None:
        where.append("cluster = ?")
        args.append(q.cluster)
    if q.job is not None and s.job == "app":
        where.append("job_id = ?")
        args.append(q.job)
    elif q.job is not None and s.job == "comms":
        where.append(f"{_COMM} IN ({', '.join('?' * len(q.comms))})" if q.comms else "FALSE")
        args += q.comms
    return where, args


def _series(
    cur: duckdb.DuckDBPyConnection, q: SeriesQuery
) -> tuple[list[dict[str, Any]], bool, list[dict[str, Any]]]:
    s = q.series
    where, args = _filters(q)
    # Nodes are picked after the computed columns, so a rank's lateness is still measured against its whole group.
    nodes = f"{s.node} IN ({', '.join('?' * len(q.nodes))})" if q.nodes else "TRUE"
    computed = f", {s.computed}" if s.computed else ""
    # The lines with the most samples first, so the cap keeps the busiest ones.
    sql = f"""WITH picked AS (SELECT {s.line} AS line, {s.time_us} AS t_us{computed}, * FROM {s.table}
            WHERE {" AND ".join(where)}),
        shown AS (SELECT * FROM picked WHERE {nodes}),
        lines AS (SELECT line FROM shown GROUP BY line ORDER BY count(*) DESC, line LIMIT ?)
        SELECT line, (t_us // ?) * ? AS bucket, {s.value} AS v FROM shown WHERE line IN (SELECT line FROM lines)
        GROUP BY ALL ORDER BY line, bucket"""  # fmt: skip
    rows = cur.execute(sql, [*args, *q.nodes, q.max_lines + 1, q.step_us, q.step_us]).fetchall()
    out: dict[str, dict[str, Any]] = {}
    for line, bucket, value in rows:
        entry = out.setdefault(str(line), {"series": str(line), "unit": s.unit, "t": [], "v": []})
        entry["t"].append(bucket / US)
        entry["v"].append(None if value is None else float(value))
    lines = list(out.values())
    return lines[: q.max_lines], len(lines) > q.max_lines, _windows(cur, q)


def _windows(cur: duckdb.DuckDBPyConnection, q: SeriesQuery) -> list[dict[str, Any]]:
    """Straggler runs (consecutive evaluations of one process) and alerts of the job or nodes within the range; the
    job's lifecycle (started, ended) as ``event`` marks, never as alert windows."""
    hosts = list(q.nodes)
    if q.job is not None and q.comms:
        hosts += [r[0] for r in cur.execute(
            f"SELECT DISTINCT hostname FROM inspector_summary WHERE {_COMM} IN ({', '.join('?' * len(q.comms))}) "
            "AND window_start_us >= ? AND window_start_us < ?", [*q.comms, q.since_us, q.until_us]).fetchall()]  # fmt: skip
    if q.job is None and not hosts:
        return []
    since, until = [EPOCH + datetime.timedelta(microseconds=t) for t in (q.since_us, q.until_us)]
    marks = ", ".join("?" * len(hosts)) or "NULL"
    runs = cur.execute(f"""WITH e AS (SELECT hostname, pid, evaluated_at, kind, max(slowdown) AS slowdown
            FROM straggler_finding_history WHERE hostname IN ({marks}) AND evaluated_at >= ? AND evaluated_at < ?
            GROUP BY ALL),
        g AS (SELECT *, coalesce(evaluated_at - lag(evaluated_at) OVER (PARTITION BY hostname, pid ORDER BY evaluated_at)
            > INTERVAL 60 SECOND, TRUE)::INT AS starts FROM e),
        r AS (SELECT *, sum(starts) OVER (PARTITION BY hostname, pid ORDER BY evaluated_at) AS run FROM g)
        SELECT hostname, pid, min(evaluated_at), max(evaluated_at), max(slowdown), any_value(kind) FROM r
        GROUP BY hostname, pid, run ORDER BY 3 LIMIT 200""", [*hosts, since, until]).fetchall()  # fmt: skip
    windows = [{"kind": "straggler", "start": jsonable(a), "end": jsonable(b),
                "label": f"{h} pid {pid} {kind} {slow:.2f}x"} for h, pid, a, b, slow, kind in runs]  # fmt: skip
    alerts = cur.execute(f"""SELECT rule, severity, node, summary, started_at, resolved_at FROM alert_current
        WHERE (job = ? OR node IN ({marks})) AND started_at < ? AND coalesce(resolved_at, ?) >= ?
        ORDER BY started_at LIMIT 200""", [q.job, *hosts, until, until, since]).fetchall()  # fmt: skip
    windows += [{"kind": "event" if rule in LIFECYCLE_RULES else "alert", "start": jsonable(a),
                 "end": jsonable(a) if rule in LIFECYCLE_RULES else jsonable(b), "severity": sev,
                 "label": f"{rule} {node or ''}: {summary}"} for rule, sev, node, summary, a, b in alerts]  # fmt: skip
    return windows
