"""Query commands: ``ranksight nodes|alerts|sql|export``, and the helper every query command is built with.

A query command asks the running aggregator's NATS service and prints rows as a table (default) or, with ``--json``,
the one response shape ``{"ok", "rows", "truncated", "error", "meta"}``. Data goes to stdout, errors to stderr; exit 0 on
success, 1 when the aggregator refuses or fails the query (or does not answer), 2 on usage errors.

Another component adds its own command in a few lines::

    add_query_command(sub, "jobs", "jobs and their state", columns=["job", "state", ...],
                      params=lambda args: {"cluster": args.cluster})
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeAlias

from ranksight.aggregator.api.client import ApiUnavailable, query
from ranksight.cliutil import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    add_config_flags,
    interrupted_exit,
    print_csv,
    print_json,
    print_table,
    run_until_signalled,
    settings_from_args,
)
from ranksight.config import Settings
from ranksight.natsconn import connect, disconnect
from ranksight.schemas.alerts import Alert
from ranksight.schemas.api import ApiResponse
from ranksight.schemas.subjects import Subjects

Params = Callable[[argparse.Namespace], dict[str, Any]]
SubParsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

NODE_COLUMNS = ["node", "cluster", "state", "health", "last_seen", "version", "clock_skew_s"]
ALERT_COLUMNS = ["updated_at", "state", "severity", "rule", "node", "job", "rank", "summary"]


def add_query_command(sub: SubParsers, name: str, help: str, columns: Sequence[str],
                      params: Params | None = None, endpoint: str | None = None) -> argparse.ArgumentParser:  # fmt: skip
    """Register ``ranksight <name> [--json]``: ask ``endpoint`` (default: ``name``), print ``columns`` of the rows."""
    p = sub.add_parser(name, help=help)
    add_config_flags(p)
    p.add_argument("--json", action="store_true", help='print {"ok", "rows", "truncated", "error", "meta"}')

    def run(args: argparse.Namespace) -> int:
        response = call_api(args, endpoint or name, params(args) if params else {})
        if response is None:
            return EXIT_FAILED
        print_rows(args, response, columns)
        return EXIT_OK

    p.set_defaults(func=run)
    return p


def call_api(
    args: argparse.Namespace, endpoint: str, params: dict[str, Any] | None = None
) -> ApiResponse | None:
    """The aggregator's answer, or None after printing why there is none (unreachable, refused, failed)."""
    settings = settings_from_args(args)
    try:
        response = asyncio.run(
            query(settings, endpoint, params, timeout=_request_timeout(settings, endpoint))
        )
    except ApiUnavailable as exc:
        print(f"ranksight: {exc}", file=sys.stderr)
        return None
    if not response.ok:
        print(f"ranksight: {response.error}", file=sys.stderr)
        return None
    return response


def _request_timeout(settings: Settings, endpoint: str) -> float:
    """A SQL query may use its whole time limit on the server: wait a little longer than that."""
    return settings.aggregator.query.sql_time_limit_s + 5 if endpoint == "sql" else 10.0


def print_rows(args: argparse.Namespace, response: ApiResponse, columns: Sequence[str]) -> None:
    if getattr(args, "json", False):
        print_json(response.model_dump())
    elif getattr(args, "csv", False):
        print_csv(response.rows, columns)
    else:
        print_table(response.rows, columns)
    if response.truncated and not getattr(args, "json", False):
        print(f"ranksight: output truncated at {len(response.rows)} rows", file=sys.stderr)


def register(sub: SubParsers) -> None:
    nodes = add_query_command(sub, "nodes", "nodes, their state and agent health", NODE_COLUMNS,
                              params=lambda a: given(a, "cluster", "state", "health"))  # fmt: skip
    nodes.add_argument("--cluster", help="only this cluster")
    nodes.add_argument("--state", choices=["alive", "stale", "gone"], help="only nodes in this state")
    nodes.add_argument("--health", choices=["alive", "degraded", "drained", "stale", "gone"],
                       help="only nodes of this health (degraded: alive with firing alerts)")  # fmt: skip

    a = sub.add_parser("alerts", help="firing alerts; --follow prints each alert as it fires or resolves")
    add_config_flags(a)
    a.add_argument("--json", action="store_true", help="JSON (with --follow: one alert object per line)")
    a.add_argument("--follow", action="store_true", help="subscribe to the alert subjects until interrupted")
    a.add_argument("--cluster", help="only this cluster")
    a.add_argument("--state", choices=["firing", "resolved", "all"], default="firing",
                   help="firing (default: now), or transitions from history: resolved, all")  # fmt: skip
    a.add_argument("--since", type=duration, metavar="AGO", help="history: transitions within AGO (e.g. 1h)")
    a.add_argument("--rule", help="only this rule")
    a.add_argument("--node", help="only this node")
    a.set_defaults(func=alerts)

    s = sub.add_parser("sql", help="a read-only SQL query over the history")
    add_config_flags(s)
    s.add_argument(
        "query", metavar="SQL", help='one SELECT statement, e.g. "SELECT * FROM node_timeline LIMIT 10"'
    )
    fmt = s.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help='print {"ok", "rows", "truncated", "error", "meta"}')
    fmt.add_argument("--csv", action="store_true", help="CSV with a header line")
    s.add_argument(
        "--max-rows", type=int, help="at most this many rows (capped by aggregator.query.sql_max_rows)"
    )
    s.add_argument(
        "--time-limit", type=float, metavar="S", help="seconds (capped by aggregator.query.sql_time_limit_s)"
    )
    s.set_defaults(func=sql)

    e = sub.add_parser(
        "export", help="write history to Parquet, partitioned by day (on the aggregator's host)"
    )
    add_config_flags(e)
    e.add_argument(
        "--since", required=True, type=_timestamp, help="ISO date or time (UTC unless an offset is given)"
    )
    e.add_argument("--until", required=True, type=_timestamp, help="end, exclusive")
    e.add_argument(
        "dir",
        type=Path,
        help="output folder on the aggregator's host, under aggregator.query.export_root "
        "(a relative one is taken relative to that root)",
    )
    e.add_argument("--json", action="store_true", help="print the per-table summary as JSON")
    e.set_defaults(func=export)


DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def duration(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``1h``, ``2d``, ``1h30m`` -> seconds (an argparse type)."""
    text = text.strip()
    if not re.fullmatch(r"(\d+(\.\d+)?[smhdw]?)+", text):
        raise argparse.ArgumentTypeError(f"not a duration (e.g. 90s, 15m, 1h, 2d): {text!r}")
    seconds = sum(
        float(n) * DURATION_UNITS[u or "s"] for n, u in re.findall(r"(\d+(?:\.\d+)?)([smhdw]?)", text)
    )
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"the duration must be positive: {text!r}")
    return seconds


def since_param(args: argparse.Namespace) -> dict[str, str]:
    """``--since AGO`` (seconds, from :func:`duration`) as the endpoints' ``since`` timestamp."""
    if getattr(args, "since", None) is None:
        return {}
    return {
        "since": (datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=args.since)).isoformat()
    }


def given(args: argparse.Namespace, *names: str) -> dict[str, Any]:
    return {n: getattr(args, n) for n in names if getattr(args, n) is not None}


def _timestamp(text: str) -> str:
    try:
        return datetime.datetime.fromisoformat(text).isoformat()
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO-8601 date or time: {text!r}") from None


def sql(args: argparse.Namespace) -> int:
    if not args.query.strip():
        print("ranksight sql: the query is empty", file=sys.stderr)
        return EXIT_USAGE
    params = {"sql": args.query, **given(args, "max_rows")}
    if args.time_limit is not None:
        params["time_limit_s"] = args.time_limit
    response = call_api(args, "sql", params)
    if response is None:
        return EXIT_FAILED
    print_rows(
        args, response, response.meta.get("columns") or list(response.rows[0] if response.rows else [])
    )
    return EXIT_OK


def export(args: argparse.Namespace) -> int:
    params = {"since": args.since, "until": args.until, "dir": str(args.dir)}
    response = call_api(args, "export", params)
    if response is None:
        return EXIT_FAILED
    print_rows(args, response, ["table", "rows", "days", "path"])
    return EXIT_OK


def alerts(args: argparse.Namespace) -> int:
    if not args.follow:
        params = {**given(args, "cluster", "rule", "node"), **since_param(args), "state": args.state}
        response = call_api(args, "alerts", params)
        if response is None:
            return EXIT_FAILED
        print_rows(args, response, ALERT_COLUMNS)
        return EXIT_OK
    settings = settings_from_args(args)
    signum = run_until_signalled(
        lambda stop: _follow(settings, args.cluster, args.json, stop), settings.shutdown_timeout_s
    )
    return interrupted_exit(signum)


async def _follow(settings: Settings, cluster: str | None, as_json: bool, stop: asyncio.Event) -> None:
    """Print every alert published on the alert subjects until ``stop``; one JSON object per line with ``as_json``."""
    subject = Subjects(settings.subject_prefix).alerts_filter(cluster)
    nc = await connect(settings.nats, name="ranksight-alerts-follow")
    try:
        sub = await nc.subscribe(subject)
        await nc.flush()
        print(f"ranksight: following alerts on {subject}", file=sys.stderr, flush=True)
        while not stop.is_set():
            try:
                msg = await sub.next_msg(timeout=0.5)
            except TimeoutError:
                continue
            try:
                alert = Alert.model_validate_json(msg.data)
            except ValueError as exc:
                print(f"ranksight: skipping a malformed alert on {msg.subject}: {exc}", file=sys.stderr)
                continue
            if as_json:
                print(json.dumps(alert.model_dump()), flush=True)
            else:
                print(_alert_line(alert), flush=True)
    finally:
        await disconnect(nc, settings.nats.connect_timeout_s)


def _alert_line(alert: Alert) -> str:
    where = " ".join(
        f"{k}={v}" for k in ("cluster", "node", "job", "comm", "rank") if (v := getattr(alert, k))
    )
    return f"{alert.updated_at}  {alert.state.upper():8}  {alert.severity:8}  {alert.rule}  {where}  {alert.summary}"
