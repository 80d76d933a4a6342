"""What every subcommand shares: config flags, settings, running a coroutine with clean signal handling, output."""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import logging
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from ranksight.config import ConfigError, Settings, load_settings
from ranksight.redact import redact_logs

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="TOML config file (default: $RANKSIGHT_CONFIG)")
    parser.add_argument("--nats", metavar="URL", help="NATS server URL (overrides nats.url)")


def settings_from_args(args: argparse.Namespace, **overrides: Any) -> Settings:
    """Load settings or exit 2 with the config error on stderr."""
    if getattr(args, "nats", None):
        overrides.setdefault("nats", {})["url"] = args.nats
    try:
        settings = load_settings(getattr(args, "config", None), **overrides)
    except ConfigError as exc:
        print(f"ranksight: configuration error: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None
    logging.basicConfig(
        level=settings.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    redact_logs()
    return settings


def run_until_signalled(main: Callable[[asyncio.Event], Coroutine[Any, Any, None]]) -> None:
    """Run ``main(stop)``; SIGINT and SIGTERM set ``stop`` so that everything shuts down in order."""

    async def runner() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await main(stop)

    asyncio.run(runner())


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, default=str)
    sys.stdout.write("\n")


def print_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    """A plain aligned table on stdout."""
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    print("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


def print_csv(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    writer = csv.writer(sys.stdout)
    writer.writerow(columns)
    for r in rows:
        writer.writerow([_cell(r.get(c)) for c in columns])


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, dict | list):
        return json.dumps(value, default=str)
    return str(value)
