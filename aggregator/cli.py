"""``ranksight aggregator`` (run it) and ``ranksight status`` (ask a running one)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from ranksight.aggregator.api.cli import call_api
from ranksight.aggregator.runtime import Aggregator
from ranksight.cliutil import (
    EXIT_FAILED,
    add_config_flags,
    print_json,
    print_table,
    run_until_signalled,
    settings_from_args,
)
from ranksight.private import keep_private
from ranksight.up import add_http_port_flag, http_port_override, ports_in_use


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("aggregator", help="run the aggregator (ingest, state, alerts, query API)")
    add_config_flags(p)
    p.add_argument("--db", type=Path, help="DuckDB file (overrides aggregator.db_path)")
    add_http_port_flag(p)
    p.set_defaults(func=run)

    s = sub.add_parser("status", help="nodes and their state, from the running aggregator")
    add_config_flags(s)
    s.add_argument("--json", action="store_true", help="one JSON object on stdout")
    s.set_defaults(func=status)


def run(args: argparse.Namespace) -> int:
    overrides = http_port_override(args)
    if args.db:
        overrides.setdefault("aggregator", {})["db_path"] = args.db
    settings = settings_from_args(args, **overrides)
    if problem := ports_in_use(settings):
        print(f"ranksight aggregator: {problem}", file=sys.stderr)
        return EXIT_FAILED
    keep_private(settings.state_dir)

    async def main(stop: asyncio.Event) -> None:
        await Aggregator(settings).run(stop)

    run_until_signalled(main, settings.shutdown_timeout_s)
    return 0


def status(args: argparse.Namespace) -> int:
    response = call_api(args, "status")
    if response is None:
        return EXIT_FAILED
    if args.json:
        print_json({"nodes": response.rows, "aggregator": response.meta})
    else:
        rows = [{**r, "alerts": ", ".join(a["rule"] for a in r.get("alerts", []))} for r in response.rows]
        print_table(rows, ["node", "state", "health", "last_seen", "version", "clock_skew_s", "alerts"])
    return 0
