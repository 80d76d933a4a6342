"""RAS commands: ``ranksight parse ras FILE [--json]`` (offline) and ``ranksight ras status|monitor`` (live, straight
from a job's RAS endpoint, as ``ncclras`` but normalized and with health). (``ranksight jobs`` / ``ranksight comms``
ask the running aggregator: :mod:`aggregator.api.endpoints`.)

``ranksight ras`` exit status: 0 the job is healthy (ok or warning), 1 degraded or failed (or the endpoint refused the
request), 2 usage, 3 no RAS endpoint answers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from ranksight.agent.collectors.ras.capture import parse_capture, status_summary
from ranksight.agent.collectors.ras.client import MONITOR_GROUPS
from ranksight.agent.collectors.ras.errors import (
    RasClientError,
    RasParseError,
    RasReplyError,
)
from ranksight.agent.collectors.ras.poll import client_for, poll_status
from ranksight.core.cliutil import (
    EXIT_FAILED,
    EXIT_USAGE,
    add_config_flags,
    print_json,
    print_table,
    settings_from_args,
)
from ranksight.errors import exit_status
from ranksight.schemas.structs import to_builtins


def register_parse(sources: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sources.add_parser("ras", help="a captured RAS status (text or JSON) or MONITOR output")
    p.add_argument("file", type=Path, metavar="FILE")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(func=parse_ras)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ras = sub.add_parser("ras", help="query a job's RAS endpoint directly (status, monitor)")
    commands = ras.add_subparsers(dest="ras_command", required=True, metavar="COMMAND")
    status = commands.add_parser(
        "status", help="the job's RAS status, normalized, with health (exit 1: not healthy)"
    )
    monitor = commands.add_parser("monitor", help="RAS MONITOR events as they come (NCCL 2.29+)")
    for p in (status, monitor):
        add_config_flags(p)
        p.add_argument(
            "--addr", metavar="HOST:PORT", help="RAS endpoint (default $NCCL_RAS_ADDR or localhost:28028)"
        )
        p.add_argument("--json", action="store_true", help="JSON (status: the shape of `parse ras --json`)")
    status.add_argument(
        "--verbose", action="store_true", help="VERBOSE STATUS, and the status lines behind each fact"
    )
    status.set_defaults(func=ras_status)
    monitor.add_argument(
        "--groups", default="lifecycle", help="event groups: lifecycle, trace, all (comma-separated)"
    )
    monitor.set_defaults(func=ras_monitor)


def parse_ras(args: argparse.Namespace) -> int:
    try:
        result = parse_capture(args.file.read_bytes())
    except OSError as exc:
        print(f"ranksight: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAILED
    except RasParseError as exc:
        print(f"ranksight: {args.file}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        print_json(result)
        return 0
    print_result(result)
    return 0


def print_result(result: dict[str, Any], verbose: bool = False) -> None:
    summary = result["summary"]
    print(f"format {result['format']}  version {result['version'] or '-'}  health {result['health']}  "
          f"nodes {summary['nodes'] or '-'}  processes {summary['processes'] or '-'}  gpus {summary['gpus'] or '-'}  "
          f"timeouts {result['timeouts']}")  # fmt: skip
    if result["communicators"]:
        print()
        print_table(result["communicators"], ["hash", "size", "status", "errors", "missing_ranks"])
    for title, key in (("missing processes", "missing_processes"), ("dead processes", "dead_processes")):
        if result[key]:
            print(f"\n{title}:")
            print_table(result[key], ["host", "pid", "gpus"])
    if result["mismatches"]:
        print("\nmismatches:")
        print_table(result["mismatches"], ["hash", "kind", "collective"])
    if result["events"]:
        print()
        print_table(result["events"], ["time", "event", "host", "pid", "details"])
    if verbose:
        for item in [*result["missing_processes"], *result["dead_processes"], *result["communicators"]]:
            if item.get("evidence"):
                name = item.get("hash") or f"process {item['pid']} on {item['host']}"
                print(f"\n{name}:")
                print("\n".join(item["evidence"]))


def _client(args: argparse.Namespace) -> Any:
    settings = settings_from_args(args)
    try:
        return client_for(settings.agent.collectors.ras, args.addr)
    except ValueError as exc:
        print(f"ranksight ras: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None


def _failed(exc: Exception) -> int:
    print(f"ranksight ras: {exc}", file=sys.stderr)
    return exit_status(exc)


def ras_status(args: argparse.Namespace) -> int:
    client = _client(args)
    try:
        status = asyncio.run(poll_status(client, verbose=args.verbose))
    except (RasClientError, RasParseError) as exc:
        return _failed(exc)
    result = status_summary(status)
    if args.json:
        print_json(result)
    else:
        print(f"endpoint {client.endpoint}")
        print_result(result, verbose=args.verbose)
    return 0 if status.health in ("ok", "warning") else EXIT_FAILED


def ras_monitor(args: argparse.Namespace) -> int:
    groups = [g for g in args.groups.split(",") if g]
    if not groups or any(g.lower() not in MONITOR_GROUPS for g in groups):
        print(
            f"ranksight ras monitor: --groups takes {', '.join(MONITOR_GROUPS)}, not {args.groups!r}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    client = _client(args)

    async def follow() -> None:
        async for event in client.monitor(",".join(groups)):
            if args.json:
                print(json.dumps(to_builtins(event)), flush=True)
            else:
                peer = (
                    event.addr or f"process {event.pid} on {event.host} GPU {','.join(map(str, event.gpus))}"
                )
                print(f"[{event.time}] {event.event_group or '-'} {event.event}: {peer} {event.details}".rstrip(),
                      flush=True)  # fmt: skip

    try:
        asyncio.run(follow())
    except RasReplyError as exc:
        hint = " (MONITOR needs NCCL 2.29 or later)" if exc.unknown_command else ""
        print(f"ranksight ras monitor: {exc}{hint}", file=sys.stderr)
        return EXIT_FAILED
    except (RasClientError, RasParseError) as exc:
        return _failed(exc)
    return 0
