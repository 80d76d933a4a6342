"""``ranksight markers [--job J] [--json]``: the timeline markers jobs posted with ``client.marker``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ranksight.aggregator.api.cli import call_api
from ranksight.cliutil import EXIT_FAILED, add_config_flags, print_json, print_table

COLUMNS = ["time", "job", "rank", "node", "text"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("markers", help="timeline markers posted by jobs, oldest first")
    add_config_flags(p)
    p.add_argument("--job", metavar="J", help="only this job id")
    p.add_argument(
        "--json", action="store_true", help='one JSON object on stdout: {"markers": [...], "truncated"}'
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"job": args.job} if args.job else {}
    response = call_api(args, "markers", params)
    if response is None:
        return EXIT_FAILED
    if args.json:
        print_json({"markers": response.rows, "truncated": response.truncated})
    else:
        print_table(response.rows, COLUMNS)
        if response.truncated:
            print(f"ranksight: showing the first {len(response.rows)} markers", file=sys.stderr)
    return 0
