"""RAS commands: ``ranksight parse ras FILE [--json]`` (offline) and ``ranksight jobs`` / ``ranksight comms`` (ask the
running aggregator)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agent.collectors.ras.capture import parse_capture
from agent.collectors.ras.errors import RasParseError
from aggregator.api.cli import call_api
from ranksight.cliutil import EXIT_FAILED, add_config_flags, print_json, print_table

JOB_COLUMNS = ["job", "state", "health", "endpoint", "ranks", "comms", "last_poll", "version"]
COMM_COLUMNS = ["job", "hash", "size", "status", "errors", "missing_ranks", "op_count", "stalled_polls"]


def register_parse(sources: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sources.add_parser("ras", help="a captured RAS status (text or JSON) or MONITOR output")
    p.add_argument("file", type=Path, metavar="FILE")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(func=parse_ras)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for name, helptext, func in (("jobs", "RCCL/NCCL jobs seen through RAS", jobs),
                                 ("comms", "communicators of the live jobs", comms)):  # fmt: skip
        p = sub.add_parser(name, help=f"{helptext}, from the running aggregator")
        add_config_flags(p)
        p.add_argument("--json", action="store_true", help="one JSON object on stdout")
        p.set_defaults(func=func)


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
    return 0


def _query_rows(args: argparse.Namespace, endpoint: str, key: str, columns: list[str]) -> int:
    response = call_api(args, endpoint)
    if response is None:
        return EXIT_FAILED
    if args.json:
        print_json({key: response.rows})
    else:
        print_table(response.rows, columns)
    return 0


def jobs(args: argparse.Namespace) -> int:
    return _query_rows(args, "jobs", "jobs", JOB_COLUMNS)


def comms(args: argparse.Namespace) -> int:
    return _query_rows(args, "comms", "comms", COMM_COLUMNS)
