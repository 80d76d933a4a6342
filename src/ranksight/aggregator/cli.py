"""``ranksight aggregator``: run the aggregator in the foreground (its query commands: :mod:`ranksight.api.cli`)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from ranksight.aggregator.runtime import Aggregator
from ranksight.aggregator.settings import AggregatorView
from ranksight.core.aio import run_until_signalled
from ranksight.core.cliutil import (
    EXIT_FAILED,
    add_config_flags,
    add_http_port_flag,
    http_port_override,
    ports_in_use,
    settings_from_args,
)
from ranksight.core.private import keep_private


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("aggregator", help="run the aggregator (ingest, state, alerts, query API)")
    add_config_flags(p)
    p.add_argument("--db", type=Path, help="DuckDB file (overrides aggregator.db_path)")
    add_http_port_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    overrides = http_port_override(args)
    if args.db:
        overrides.setdefault("aggregator", {})["db_path"] = args.db
    settings = settings_from_args(args, AggregatorView, **overrides)
    if problem := ports_in_use(settings.aggregator.http):
        print(f"ranksight aggregator: {problem}", file=sys.stderr)
        return EXIT_FAILED
    keep_private(settings.state_dir)

    async def main(stop: asyncio.Event) -> None:
        await Aggregator(settings).run(stop)

    run_until_signalled(main, settings.shutdown_timeout_s)
    return 0
