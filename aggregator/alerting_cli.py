"""Planned changes and maintenance windows from the command line, and the incidents view:

``ranksight node drain NODE [--undrain]``, ``ranksight node drains``, ``ranksight silence add|list|expire``,
``ranksight incidents``. Each asks the running aggregator (:mod:`aggregator.api.alerting`); ``--json`` prints the one
response shape; exit 0 done, 1 refused or no aggregator, 2 usage.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

from ranksight.aggregator.api.cli import (
    SubParsers,
    add_query_command,
    call_api,
    duration,
    print_rows,
    since_param,
)
from ranksight.cliutil import EXIT_FAILED, EXIT_OK, add_config_flags

DEFAULT_SILENCE_S = 3600.0
DRAIN_COLUMNS = ["cluster", "node", "since", "reason"]
SILENCE_COLUMNS = ["id", "state", "matchers", "starts_at", "ends_at", "created_by", "comment"]
INCIDENT_COLUMNS = [
    "fired",
    "resolved",
    "state",
    "severity",
    "rule",
    "node",
    "entity",
    "duration_s",
    "flaps",
    "summary",
]


def _flags(p: argparse.ArgumentParser) -> None:
    add_config_flags(p)
    p.add_argument("--json", action="store_true", help='print {"ok", "rows", "truncated", "error", "meta"}')


def register(sub: SubParsers) -> None:
    node = sub.add_parser("node", help="planned changes to a node (drain: its silence raises nothing)")
    node_sub = node.add_subparsers(dest="node_command", required=True, metavar="ACTION")
    d = node_sub.add_parser(
        "drain", help="expect NODE to go silent (maintenance, removal); --undrain ends it"
    )
    _flags(d)
    d.add_argument("nodes", metavar="NODE", nargs="+")
    d.add_argument("--undrain", action="store_true", help="the node is back in service: alert on it again")
    d.add_argument("--cluster", help="default: the configured cluster")
    d.add_argument("--reason", default="", help="why (kept with the drain)")
    d.set_defaults(func=drain)
    add_query_command(node_sub, "drains", "the nodes drained now", DRAIN_COLUMNS)  # type: ignore[arg-type]

    s = sub.add_parser("silence", help="maintenance windows: alerts matching a silence are not announced")
    s_sub = s.add_subparsers(dest="silence_command", required=True, metavar="ACTION")
    a = s_sub.add_parser("add", help="mute alerts matching every --matcher for --duration (or until --until)")
    _flags(a)
    a.add_argument("--matcher", "-m", action="append", required=True, metavar="LABEL=VALUE",
                   help="label (rule, severity, cluster, node, job, entity) =, !=, =~ or !~ value; repeatable")  # fmt: skip
    when = a.add_mutually_exclusive_group()
    when.add_argument("--duration", type=duration, help="e.g. 30m, 1h, 2d (default 1h, as amtool's)")
    when.add_argument("--until", help="ISO-8601 end (UTC unless an offset is given)")
    a.add_argument("--comment", default="", help="why (shown in Alertmanager too)")
    a.add_argument("--created-by", default=_user(), help="default: your user name")
    a.set_defaults(func=silence_add)
    ls = add_query_command(s_sub, "list", "active and pending silences", SILENCE_COLUMNS, endpoint="silences",  # type: ignore[arg-type]
                           params=lambda args: {"state": "all"} if args.all else {})  # fmt: skip
    ls.add_argument("--all", action="store_true", help="expired ones too")
    e = s_sub.add_parser("expire", help="end a silence now")
    _flags(e)
    e.add_argument("id", metavar="ID")
    e.set_defaults(func=silence_expire)

    i = add_query_command(sub, "incidents", "one row per alert: fired, resolved, duration, flaps", INCIDENT_COLUMNS,
                          params=lambda args: {**since_param(args), **({"rule": args.rule} if args.rule else {})})  # fmt: skip
    i.add_argument("--since", type=duration, metavar="AGO", help="only incidents active within AGO (e.g. 1h)")
    i.add_argument("--rule", help="only this rule")


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        return ""


def _answer(args: argparse.Namespace, endpoint: str, params: dict[str, Any], columns: list[str]) -> int:
    response = call_api(args, endpoint, params)
    if response is None:
        return EXIT_FAILED
    print_rows(args, response, columns)
    return EXIT_OK


def drain(args: argparse.Namespace) -> int:
    params = {"nodes": args.nodes, "undrain": args.undrain, "reason": args.reason}
    if args.cluster:
        params["cluster"] = args.cluster
    code = _answer(args, "drain", params, DRAIN_COLUMNS)
    if code == EXIT_OK and not args.json:
        print(
            f"ranksight: {' '.join(args.nodes)} {'undrained' if args.undrain else 'drained'}", file=sys.stderr
        )
    return code


def silence_add(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {
        "matchers": args.matcher,
        "comment": args.comment,
        "created_by": args.created_by,
    }
    if args.until is not None:
        params["ends_at"] = args.until
    else:
        params["duration_s"] = args.duration if args.duration is not None else DEFAULT_SILENCE_S
    return _answer(args, "silence_add", params, SILENCE_COLUMNS)


def silence_expire(args: argparse.Namespace) -> int:
    return _answer(args, "silence_expire", {"id": args.id}, SILENCE_COLUMNS)
