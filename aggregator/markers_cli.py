"""``ranksight markers [--job J] [--json]``: the timeline markers jobs posted with ``client.marker``."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from aggregator.api.client import ApiUnavailable, query
from ranksight.cliutil import EXIT_FAILED, add_config_flags, print_json, print_table, settings_from_args

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
    settings = settings_from_args(args)
    params: dict[str, Any] = {"job": args.job} if args.job else {}
    try:
        response = asyncio.run(query(settings, "markers", params))
    except ApiUnavailable as exc:
        print(f"ranksight: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if not response.ok:
        print(f"ranksight: {response.error}", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        print_json({"markers": response.rows, "truncated": response.truncated})
    else:
        print_table(response.rows, COLUMNS)
        if response.truncated:
            print(f"ranksight: showing the first {len(response.rows)} markers", file=sys.stderr)
    return 0
