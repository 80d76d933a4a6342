"""Every query endpoint, declared once as its callers see it: name, parameter model and CLI presentation.

From :data:`SPECS` come the ``ranksight`` query commands (:mod:`ranksight.api.cli`), the API reference
(``docs/api.md``, generated) and, with the handler the aggregator binds to each (:mod:`aggregator.api.endpoints`),
the NATS micro endpoints, the HTTP routes and the OpenAPI document. Nothing here imports the aggregator.
"""

from __future__ import annotations

import argparse
import getpass
import math
import statistics
from typing import Any

from ranksight.api import forensics
from ranksight.api.contract import (
    ClusterParams,
    Command,
    DeviceParams,
    EndpointSpec,
    Flag,
    Rows,
    ago,
    duration,
    timestamp,
)
from ranksight.api.follow import add_follow_flag, follow_if_asked
from ranksight.api.params import (
    ActionAuditParams,
    ActionDecisionParams,
    ActionPlanParams,
    ActionsParams,
    ActionUndoParams,
    AlertsParams,
    DrainParams,
    DrainsParams,
    ExportParams,
    IncidentsParams,
    JobDumpParams,
    JobParams,
    MarkersParams,
    NodesParams,
    SeriesParams,
    SilenceAddParams,
    SilenceExpireParams,
    SilencesParams,
    SqlParams,
    StatusParams,
)
from ranksight.core.cliutil import human
from ranksight.schemas.api import ApiResponse

NODE_COLUMNS = ["node", "cluster", "state", "health", "last_seen", "version", "clock_skew_s"]
ALERT_COLUMNS = ["updated_at", "state", "severity", "rule", "node", "job", "rank", "summary"]
GPU_COLUMNS = ["node", "index", "name", "utilization_pct", "memory_used_bytes", "memory_total_bytes", "power_w",
               "temperature_c", "sclk_hz", "ecc_uncorrectable", "throttled", "freshness"]  # fmt: skip
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
ACTION_COLUMNS = ["id", "status", "at", "policy", "action", "node", "rule", "why", "result"]
AUDIT_COLUMNS = ["step_at", "step", "id", "who", "action", "node", "rule", "why", "result"]
INCIDENT_COLUMNS = ["fired", "resolved", "state", "severity", "rule", "node", "entity", "duration_s", "flaps",
                    "summary"]  # fmt: skip
DEFAULT_SILENCE_S = 3600.0
# Commands with sub-actions (``ranksight node drain``): the group's help.
COMMAND_GROUPS = {
    "node": "planned changes to a node (drain: its silence raises nothing)",
    "silence": "maintenance windows: alerts matching a silence are not announced",
    "action": "acting on findings: plans, approvals, undo and the audit trail (docs/actions.md)",
    "job": "hang forensics of a job: its ranks' Flight Recorder and Python stacks, matched; an evidence file",
}
SINCE_AGO = Flag(type=ago, metavar="AGO", help="only what happened within AGO (e.g. 1h)")


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


# A series' unit (``meta.unit``) as the column suffix that makes :func:`~ranksight.core.cliutil.human` print it.
_UNIT_SUFFIX = {"s": "_s", "us": "_us", "%": "_pct", "Hz": "_hz", "W": "_w", "C": "_c", "B": "_bytes",
                "bit/s": "_bps", "1/s": "_per_s", "GB/s": "_gbs"}  # fmt: skip


def _gpu_table(rows: Rows) -> Rows:
    """The temperature the web page and the series show: junction (the hottest die sensor, what throttles), else
    edge where the GPU has no junction sensor."""
    return [{**r, "temperature_c": r.get("temperature_junction_c") if r.get("temperature_junction_c") is not None
             else r.get("temperature_edge_c")} for r in rows]  # fmt: skip


def _series_table(rows: Rows) -> Rows:
    """One row per line: its last and mean values in the series' unit, and its mean against the median of the lines'
    means; the line furthest from the others first (the outlier is what a reader looks for)."""
    means = {r["series"]: statistics.fmean(vs) for r in rows if (vs := [v for v in r["v"] if v is not None])}
    typical = statistics.median(means.values()) if means else None
    table = []
    for r in rows:
        suffix = _UNIT_SUFFIX.get(r.get("unit", ""), "")
        mean = means.get(r["series"])
        ratio = mean / typical if mean is not None and typical else None
        table.append({"series": r["series"], "points": len(r["v"]), "last": human(f"last{suffix}", r["v"][-1] if r["v"] else None),
                      "mean": human(f"mean{suffix}", mean), "vs_median": None if ratio is None else f"{ratio:.2f}x",
                      "_off": abs(math.log(ratio)) if ratio and ratio > 0 else -1.0})  # fmt: skip
    table.sort(key=lambda t: -t["_off"])
    return table


def _problems(args: argparse.Namespace, response: ApiResponse) -> list[str]:
    return [f"error: {line}" for line in response.meta.get("problems", [])]


MAX_NAMED_NODES = 5  # nodes named in a one-line note


def _skipped(args: argparse.Namespace, response: ApiResponse) -> list[str]:
    """One line per reason heavy probes are skipped, naming its first nodes (a job covers many: not a line each)."""
    by_reason: dict[str, list[str]] = {}
    for skipped in response.meta.get("skipped", []):
        by_reason.setdefault(skipped["reason"], []).append(skipped["node"])
    lines = []
    for reason, nodes in by_reason.items():
        more = len(nodes) - MAX_NAMED_NODES
        lines.append(
            f"{', '.join(sorted(nodes)[:MAX_NAMED_NODES])}{f' and {more} more' if more > 0 else ''}: {reason}"
        )
    return lines


def _drained(args: argparse.Namespace, response: ApiResponse) -> list[str]:
    return [f"{' '.join(args.nodes)} {'undrained' if args.undrain else 'drained'}"]


def _rows_as(key: str) -> Any:
    """The key a command's ``--json`` held its rows under before every command printed the one response shape."""
    return lambda response: {key: response.rows}


_SPECS: list[EndpointSpec[Any]] = [
    EndpointSpec("status", StatusParams, Command(
        "nodes and their state, from the running aggregator",
        ["node", "state", "health", "last_seen", "version", "clock_skew_s", "alerts"], table_rows=_status_table,
        json_keys=lambda r: {"nodes": r.rows, "aggregator": r.meta}, notes=_problems)),
    EndpointSpec("nodes", NodesParams, Command(
        "nodes, their state and agent health", NODE_COLUMNS,
        flags={"health": Flag(help="only nodes of this health: ok, warning or critical (the worst of its state, "
                                   "its firing alerts and its GPUs)")})),
    EndpointSpec("alerts", AlertsParams, Command(
        "firing alerts; --follow prints each alert as it fires or resolves", ALERT_COLUMNS,
        flags={"since": SINCE_AGO, "state": Flag(help="firing (default: now), or transitions from history: "
                                                      "resolved, all")},
        extend=add_follow_flag, instead=follow_if_asked, history=True)),
    EndpointSpec("sql", SqlParams, Command(
        "a read-only SQL query over the history", csv=True,
        flags={"sql": Flag(positional=True, metavar="SQL", type=_statement,
                           help='one SELECT statement, e.g. "SELECT * FROM node_timeline LIMIT 10"'),
               "max_rows": Flag(help="at most this many rows (capped by aggregator.query.sql_max_rows)"),
               "time_limit_s": Flag(names=("--time-limit",), metavar="S",
                                    help="seconds (capped by aggregator.query.sql_time_limit_s)"),
               "shards": Flag(help="over every shard's Parquet export (aggregator.shards.export_dir), not this "
                                   "aggregator's database")},
        history=True), sql_time=True),
    EndpointSpec("export", ExportParams, Command(
        "write history to Parquet, partitioned by day (on the aggregator's host)", ["table", "rows", "days", "path"],
        flags={"since": Flag(type=timestamp, help="ISO date or time (UTC unless an offset is given)"),
               "until": Flag(type=timestamp, help="end, exclusive"),
               "dir": Flag(positional=True, help="output folder on the aggregator's host, under "
                           "aggregator.query.export_root (a relative one is taken relative to that root)")}), http=False),
    EndpointSpec("jobs", JobParams, Command(
        "RCCL/NCCL jobs seen through RAS, from the running aggregator",
        ["job", "state", "health", "endpoint", "ranks", "comms", "last_poll", "version"], json_keys=_rows_as("jobs"))),
    EndpointSpec("comms", JobParams, Command(
        "communicators of the live jobs, from the running aggregator",
        ["job", "hash", "size", "status", "errors", "missing_ranks", "op_count", "stalled_polls"],
        json_keys=_rows_as("comms"))),
    EndpointSpec("gpus", DeviceParams, Command(
        "live GPU state per node: utilization, memory, power, temperature, clocks, ECC", GPU_COLUMNS,
        table_rows=_gpu_table)),
    EndpointSpec("nics", DeviceParams, Command(
        "live NIC state per node: link, speed, rates, errors, flaps", NIC_COLUMNS)),
    EndpointSpec("links", ClusterParams, Command(
        "the link map: measured bandwidth, RTT and jitter between nodes", LINK_COLUMNS, notes=_skipped,
        json_keys=lambda r: {"links": r.rows, "skipped": r.meta.get("skipped", [])})),
    EndpointSpec("gpu_probes", DeviceParams, Command(
        "the latest GPU probe results, with underperforming GPUs marked",
        ["node", "index", "name", "tflops_bf16", "tflops_fp16", "mem_bandwidth_bps", "underperforming", "measured"])),
    EndpointSpec("markers", MarkersParams, Command(
        "timeline markers posted by jobs, oldest first", ["time", "job", "rank", "node", "text"],
        flags={"job": Flag(metavar="J", help="only this job id")}, json_keys=_rows_as("markers"))),
    EndpointSpec("stragglers", ClusterParams, Command(
        "current straggler findings, from the running aggregator", STRAGGLER_COLUMNS,
        json_keys=_rows_as("stragglers"))),
    EndpointSpec("cluster_map", ClusterParams, Command(
        "every node's health (from its state and alerts) and its GPUs' health",
        ["cluster", "node", "state", "health", "alerts"])),
    EndpointSpec("series", SeriesParams, Command(
        "a metric over time from history, one line per GPU, port, rank or communicator",
        ["series", "points", "last", "mean", "vs_median"], table_rows=_series_table,
        flags={"since": Flag(type=timestamp, help="ISO start (default: until minus 15 minutes)"),
               "until": Flag(type=timestamp, help="ISO end (default: now)")},
        history=True), sql_time=True),
    EndpointSpec("drain", DrainParams, Command(
        "expect NODE to go silent (maintenance, removal); --undrain ends it", DRAIN_COLUMNS, path=("node", "drain"),
        flags={"nodes": Flag(positional=True, metavar="NODE"),
               "undrain": Flag(help="the node is back in service: alert on it again"),
               "cluster": Flag(help="default: the configured cluster"),
               "reason": Flag(help="why (kept with the drain)")},
        notes=_drained), http=False),
    EndpointSpec("drains", DrainsParams, Command(
        "the nodes drained now", DRAIN_COLUMNS, path=("node", "drains"))),
    EndpointSpec("silence_add", SilenceAddParams, Command(
        "mute alerts matching every --matcher for --duration (or until --until)", SILENCE_COLUMNS,
        path=("silence", "add"), exclusive=("duration_s", "ends_at"),
        flags={"matchers": Flag(names=("--matcher", "-m"), metavar="LABEL=VALUE", help="label (rule, severity, "
                                "cluster, node, job, entity) =, !=, =~ or !~ value; repeatable"),
               "duration_s": Flag(names=("--duration",), type=duration, default=DEFAULT_SILENCE_S,
                                  help="e.g. 30m, 1h, 2d (default 1h, as amtool's)"),
               "ends_at": Flag(names=("--until",), type=str, help="ISO-8601 end (UTC unless an offset is given)"),
               "comment": Flag(help="why (shown in Alertmanager too)"),
               "created_by": Flag(default=_user(), help="default: your user name")}), http=False),
    EndpointSpec("silences", SilencesParams, Command(
        "active and pending silences", SILENCE_COLUMNS, path=("silence", "list"),
        flags={"state": Flag(names=("--all",), const="all", help="expired ones too")})),
    EndpointSpec("silence_expire", SilenceExpireParams, Command(
        "end a silence now", SILENCE_COLUMNS, path=("silence", "expire"),
        flags={"id": Flag(positional=True, metavar="ID")}), http=False),
    EndpointSpec("action_plan", ActionPlanParams, Command(
        "what the action policies would do or wait for: dry-run plans, approvals, breaker stops", ACTION_COLUMNS,
        path=("action", "plan"))),
    EndpointSpec("actions", ActionsParams, Command(
        "actions and where each stands", ACTION_COLUMNS, path=("action", "list"),
        flags={"status": Flag(help="only this status (done, failed, awaiting_approval, ...)")})),
    EndpointSpec("action_audit", ActionAuditParams, Command(
        "every step of every action from history: who, what, why, result", AUDIT_COLUMNS,
        path=("action", "audit"), flags={"id": Flag(help="only this action's steps")})),
    EndpointSpec("action_approve", ActionDecisionParams, Command(
        "approve an action awaiting approval", ACTION_COLUMNS, path=("action", "approve"),
        flags={"id": Flag(positional=True, metavar="ID"), "who": Flag(default=_user(), help="default: your user name")}),
        http=False),
    EndpointSpec("action_reject", ActionDecisionParams, Command(
        "reject an action awaiting approval", ACTION_COLUMNS, path=("action", "reject"),
        flags={"id": Flag(positional=True, metavar="ID"), "who": Flag(default=_user(), help="default: your user name")}),
        http=False),
    EndpointSpec("action_undo", ActionUndoParams, Command(
        "undo a done action (resume, uncordon, remove the exclusion)", ACTION_COLUMNS, path=("action", "undo"),
        flags={"id": Flag(positional=True, metavar="ID"), "who": Flag(default=_user(), help="default: your user name"),
               "reason": Flag(help="why (kept in the audit)")}),
        http=False),
    EndpointSpec("job_dump", JobDumpParams, Command(
        "ask a job's agents for every process's Flight Recorder and Python stacks now and match them across ranks",
        forensics.FINDING_COLUMNS, path=("job", "dump"), notes=forensics.notes,
        flags={"job": forensics.JOB_FLAG, "include_dumps": Flag(help="the dumps too (in meta.dumps)")}),
        http=False, wait_s=forensics.wait_s),
    EndpointSpec("job_evidence", JobDumpParams, Command(
        "write a hang's evidence (dumps, stacks, RAS status, Inspector tail, GPU/NIC state, alerts) to a .tar.gz",
        forensics.FINDING_COLUMNS, path=("job", "evidence"), flags={"job": forensics.JOB_FLAG},
        extend=forensics.add_output_flag, instead=forensics.write_evidence), http=False, wait_s=forensics.wait_s),
    EndpointSpec("incidents", IncidentsParams, Command(
        "one row per alert: fired, resolved, duration, flaps", INCIDENT_COLUMNS,
        flags={"since": SINCE_AGO}, history=True)),
]  # fmt: skip
SPECS: dict[str, EndpointSpec[Any]] = {e.name: e for e in _SPECS}
