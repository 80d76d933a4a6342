"""Every query endpoint, declared once: name, parameter model, handler and CLI presentation.

From :data:`ENDPOINTS` come the NATS micro endpoints (:mod:`aggregator.api.service`), the HTTP routes and the OpenAPI
document (:mod:`aggregator.http`), and the ``ranksight`` query commands (:mod:`aggregator.api.cli`); the docs test
checks that each is in the README. Adding an endpoint is its handler and parameter model beside the data it reads, and
one :class:`~aggregator.api.endpoint.Endpoint` here.
"""

from __future__ import annotations

import argparse
import getpass
from typing import Any

from ranksight.aggregator.api import alerting, queries, ras_queries, views
from ranksight.aggregator.api.endpoint import (
    ClusterParams,
    Command,
    DeviceParams,
    Endpoint,
    Flag,
    Rows,
    ago,
    duration,
    timestamp,
)
from ranksight.aggregator.api.follow import add_follow_flag, follow_if_asked
from ranksight.aggregator.api.gpu_probes import gpu_probes
from ranksight.aggregator.api.markers import MarkersParams, markers
from ranksight.aggregator.api.merge import Merge
from ranksight.schemas.api import ApiResponse

NODE_COLUMNS = ["node", "cluster", "state", "health", "last_seen", "version", "clock_skew_s"]
ALERT_COLUMNS = ["updated_at", "state", "severity", "rule", "node", "job", "rank", "summary"]
GPU_COLUMNS = ["node", "index", "name", "utilization_pct", "memory_used_bytes", "memory_total_bytes", "power_w",
               "temperature_edge_c", "sclk_hz", "ecc_uncorrectable", "throttled", "freshness"]  # fmt: skip
NIC_COLUMNS = ["node", "name", "kind", "state", "speed_bps", "tx_bps", "rx_bps", "errors_per_s", "link_flaps",
               "freshness"]  # fmt: skip
LINK_COLUMNS = ["cluster", "src", "dst", "transport", "dst_addr", "upload_bps", "download_bps", "rtt_us", "jitter_us",
                "measured", "expires", "state", "error"]  # fmt: skip
STRAGGLER_COLUMNS = [
    "cluster",
    "hostname",
    "pid",
    "kind",
    "comm",
    "rank",
    "slowdown",
    "confidence",
    "evidence",
]
DRAIN_COLUMNS = ["cluster", "node", "since", "reason"]
SILENCE_COLUMNS = ["id", "state", "matchers", "starts_at", "ends_at", "created_by", "comment"]
INCIDENT_COLUMNS = ["fired", "resolved", "state", "severity", "rule", "node", "entity", "duration_s", "flaps",
                    "summary"]  # fmt: skip
DEFAULT_SILENCE_S = 3600.0
# Commands with sub-actions (``ranksight node drain``): the group's help.
COMMAND_GROUPS = {
    "node": "planned changes to a node (drain: its silence raises nothing)",
    "silence": "maintenance windows: alerts matching a silence are not announced",
}
SINCE_AGO = Flag(type=ago, metavar="AGO", help="only what happened within AGO (e.g. 1h)")
# How sharded aggregators' answers join (aggregator.api.merge). Not merged: sql (an aggregate or a LIMIT does not
# union; SQL across shards reads their Parquet exports), series (a rank's lateness needs every rank of its
# communicator, and a line can be split between two shards by a takeover), incidents (per-alert aggregates of one
# shard's history), and the endpoints that write (export, drain, silence_add, silence_expire).
BY_NODE: Merge[Any] = Merge(key=("cluster", "node"), order=("cluster", "node"), newest="last_seen")
ALERTS = Merge[queries.AlertsParams](
    key=lambda p: ("fingerprint",) if p.state == "firing" else ("fingerprint", "state", "updated_at"),
    order=lambda p: ("-started_at",) if p.state == "firing" else ("-updated_at",),
    newest="updated_at", limit="limit")  # fmt: skip


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        return ""


def _statement(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("the query is empty")
    return text


def _status_table(rows: Rows) -> Rows:
    return [{**r, "alerts": ", ".join(a["rule"] for a in r.get("alerts", []))} for r in rows]


def _series_table(rows: Rows) -> Rows:
    return [
        {"series": r["series"], "points": len(r["v"]), "last": r["v"][-1] if r["v"] else None} for r in rows
    ]


def _problems(args: argparse.Namespace, response: ApiResponse) -> list[str]:
    return [f"error: {line}" for line in response.meta.get("problems", [])]


def _skipped(args: argparse.Namespace, response: ApiResponse) -> list[str]:
    return [f"{s['node']}: {s['reason']}" for s in response.meta.get("skipped", [])]


def _drained(args: argparse.Namespace, response: ApiResponse) -> list[str]:
    return [f"{' '.join(args.nodes)} {'undrained' if args.undrain else 'drained'}"]


def _rows_as(key: str) -> Any:
    """The key a command's ``--json`` held its rows under before every command printed the one response shape."""
    return lambda response: {key: response.rows}


_ENDPOINTS: list[Endpoint[Any]] = [
    Endpoint("status", queries.StatusParams, queries.status, Command(
        "nodes and their state, from the running aggregator",
        ["node", "state", "health", "last_seen", "version", "clock_skew_s", "alerts"], table_rows=_status_table,
        json_keys=lambda r: {"nodes": r.rows, "aggregator": r.meta}, notes=_problems), merge=BY_NODE),
    Endpoint("nodes", queries.NodesParams, queries.nodes, Command(
        "nodes, their state and agent health", NODE_COLUMNS,
        flags={"health": Flag(help="only nodes of this health (degraded: alive with firing alerts)")}),
        merge=BY_NODE),
    Endpoint("alerts", queries.AlertsParams, queries.alerts, Command(
        "firing alerts; --follow prints each alert as it fires or resolves", ALERT_COLUMNS,
        flags={"since": SINCE_AGO, "state": Flag(help="firing (default: now), or transitions from history: "
                                                      "resolved, all")},
        extend=add_follow_flag, instead=follow_if_asked), merge=ALERTS),
    Endpoint("sql", queries.SqlParams, queries.sql, Command(
        "a read-only SQL query over the history", csv=True,
        flags={"sql": Flag(positional=True, metavar="SQL", type=_statement,
                           help='one SELECT statement, e.g. "SELECT * FROM node_timeline LIMIT 10"'),
               "max_rows": Flag(help="at most this many rows (capped by aggregator.query.sql_max_rows)"),
               "time_limit_s": Flag(names=("--time-limit",), metavar="S",
                                    help="seconds (capped by aggregator.query.sql_time_limit_s)"),
               "shards": Flag(help="over every shard's Parquet export (aggregator.shards.export_dir), not this "
                                   "aggregator's database")}),
        sql_time=True),
    Endpoint("export", queries.ExportParams, queries.export, Command(
        "write history to Parquet, partitioned by day (on the aggregator's host)", ["table", "rows", "days", "path"],
        flags={"since": Flag(type=timestamp, help="ISO date or time (UTC unless an offset is given)"),
               "until": Flag(type=timestamp, help="end, exclusive"),
               "dir": Flag(positional=True, help="output folder on the aggregator's host, under "
                           "aggregator.query.export_root (a relative one is taken relative to that root)")}),
        http=False),
    Endpoint("jobs", ras_queries.JobParams, ras_queries.jobs, Command(
        "RCCL/NCCL jobs seen through RAS, from the running aggregator",
        ["job", "state", "health", "endpoint", "ranks", "comms", "last_poll", "version"], json_keys=_rows_as("jobs")),
        merge=Merge(key=("cluster", "job"), order=("cluster", "first_seen"), newest="last_poll")),
    Endpoint("comms", ras_queries.JobParams, ras_queries.comms, Command(
        "communicators of the live jobs, from the running aggregator",
        ["job", "hash", "size", "status", "errors", "missing_ranks", "op_count", "stalled_polls"],
        json_keys=_rows_as("comms")), merge=Merge(key=("cluster", "job", "hash"), order=("cluster", "job", "hash"))),
    Endpoint("gpus", DeviceParams, queries.gpus, Command(
        "live GPU state per node: utilization, memory, power, temperature, clocks, ECC", GPU_COLUMNS),
        merge=Merge(key=("cluster", "node", "index"), order=("cluster", "node", "index"), newest="last_seen")),
    Endpoint("nics", DeviceParams, queries.nics, Command(
        "live NIC state per node: link, speed, rates, errors, flaps", NIC_COLUMNS),
        merge=Merge(key=("cluster", "node", "name"), order=("cluster", "node", "name"), newest="last_seen")),
    Endpoint("links", ClusterParams, queries.links, Command(
        "the link map: measured bandwidth, RTT and jitter between nodes", LINK_COLUMNS, notes=_skipped,
        json_keys=lambda r: {"links": r.rows, "skipped": r.meta.get("skipped", [])}),
        merge=Merge(key=("cluster", "src", "dst", "transport", "dst_addr"), order=("cluster", "src", "dst"),
                    newest="measured")),
    Endpoint("gpu_probes", DeviceParams, gpu_probes, Command(
        "the latest GPU probe results, with underperforming GPUs marked",
        ["node", "index", "name", "tflops_bf16", "tflops_fp16", "mem_bandwidth_bps", "underperforming", "measured"]),
        merge=Merge(key=("cluster", "node", "index"), order=("cluster", "node", "index"), newest="measured",
                    counts=("discarded_busy",))),
    Endpoint("markers", MarkersParams, markers, Command(
        "timeline markers posted by jobs, oldest first", ["time", "job", "rank", "node", "text"],
        flags={"job": Flag(metavar="J", help="only this job id")}, json_keys=_rows_as("markers")),
        merge=Merge(key=("cluster", "node", "pid", "time", "text"), order=("time", "node", "pid"), limit="limit")),
    Endpoint("stragglers", ClusterParams, queries.stragglers, Command(
        "current straggler findings, from the running aggregator", STRAGGLER_COLUMNS,
        json_keys=_rows_as("stragglers")),
        merge=Merge(key=("cluster", "hostname", "pid", "kind", "comm", "rank"), order=("cluster", "-slowdown"),
                    newest="last_seen", counts=("records",))),
    Endpoint("cluster_map", ClusterParams, views.cluster_map, Command(
        "every node's health (from its state and alerts) and its GPUs' health",
        ["cluster", "node", "state", "health", "alerts"]), merge=Merge(key=("cluster", "node"), order=("cluster", "node"))),
    Endpoint("series", views.SeriesParams, views.series, Command(
        "a metric over time from history, one line per GPU, port, rank or communicator",
        ["series", "points", "last"], table_rows=_series_table,
        flags={"since": Flag(type=timestamp, help="ISO start (default: until minus 15 minutes)"),
               "until": Flag(type=timestamp, help="ISO end (default: now)")}),
        sql_time=True),
    Endpoint("drain", alerting.DrainParams, alerting.drain, Command(
        "expect NODE to go silent (maintenance, removal); --undrain ends it", DRAIN_COLUMNS, path=("node", "drain"),
        flags={"nodes": Flag(positional=True, metavar="NODE"),
               "undrain": Flag(help="the node is back in service: alert on it again"),
               "cluster": Flag(help="default: the configured cluster"),
               "reason": Flag(help="why (kept with the drain)")},
        notes=_drained), http=False),
    Endpoint("drains", alerting.DrainsParams, alerting.drains, Command(
        "the nodes drained now", DRAIN_COLUMNS, path=("node", "drains")),
        merge=Merge(key=("cluster", "node"), order=("cluster", "node"), newest="since")),
    Endpoint("silence_add", alerting.SilenceAddParams, alerting.silence_add, Command(
        "mute alerts matching every --matcher for --duration (or until --until)", SILENCE_COLUMNS,
        path=("silence", "add"), exclusive=("duration_s", "ends_at"),
        flags={"matchers": Flag(names=("--matcher", "-m"), metavar="LABEL=VALUE", help="label (rule, severity, "
                                "cluster, node, job, entity) =, !=, =~ or !~ value; repeatable"),
               "duration_s": Flag(names=("--duration",), type=duration, default=DEFAULT_SILENCE_S,
                                  help="e.g. 30m, 1h, 2d (default 1h, as amtool's)"),
               "ends_at": Flag(names=("--until",), type=str, help="ISO-8601 end (UTC unless an offset is given)"),
               "comment": Flag(help="why (shown in Alertmanager too)"),
               "created_by": Flag(default=_user(), help="default: your user name")}),
        http=False),
    Endpoint("silences", alerting.SilencesParams, alerting.silences, Command(
        "active and pending silences", SILENCE_COLUMNS, path=("silence", "list"),
        flags={"state": Flag(names=("--all",), const="all", help="expired ones too")}),
        merge=Merge(key=("id",), order=("-starts_at",))),
    Endpoint("silence_expire", alerting.SilenceExpireParams, alerting.silence_expire, Command(
        "end a silence now", SILENCE_COLUMNS, path=("silence", "expire"),
        flags={"id": Flag(positional=True, metavar="ID")}), http=False),
    Endpoint("incidents", alerting.IncidentsParams, alerting.incidents, Command(
        "one row per alert: fired, resolved, duration, flaps", INCIDENT_COLUMNS,
        flags={"since": SINCE_AGO})),
]  # fmt: skip
ENDPOINTS: dict[str, Endpoint[Any]] = {e.name: e for e in _ENDPOINTS}
