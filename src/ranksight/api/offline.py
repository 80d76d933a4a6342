"""``--db FILE`` on the history commands (``sql``, ``alerts``, ``incidents``, ``series``): the command's answer from a
DuckDB history file without the service (after a demo, on a copy of an aggregator's database), by the aggregator's
own handler (:mod:`ranksight.aggregator.api.offline`: read-only, the same SQL sandbox). DuckDB and the aggregator
are imported only when ``--db`` is given, so the commands stay light without it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from ranksight.core.cliutil import EXIT_FAILED, EXIT_OK, settings_from_args

Instead = Callable[[argparse.Namespace], int | None]


def add_db_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", metavar="FILE", type=Path,
                        help="answer offline from this DuckDB history file (read-only, the same SQL sandbox; "
                             "not while an aggregator holds it)")  # fmt: skip


def offline_if_asked(name: str, then: Instead | None = None) -> Instead:
    """The ``instead`` of a history command: with ``--db``, answer from the file and return the exit code; otherwise
    ``then`` (another ``instead``, e.g. ``--follow``), or None (ask the aggregator)."""

    def instead(args: argparse.Namespace) -> int | None:
        if getattr(args, "db", None) is None:
            return then(args) if then is not None else None
        import asyncio

        # the one import of the aggregator from the contract floor, and only with --db (tests/unit/test_layering.py)
        from ranksight.aggregator.api.offline import answer_offline
        from ranksight.api.cli import command_params, print_rows
        from ranksight.api.endpoints import SPECS

        spec = SPECS[name]
        response = asyncio.run(
            answer_offline(settings_from_args(args), args.db, name, command_params(spec, args))
        )
        if not response.ok:
            print(f"ranksight: {response.error}", file=sys.stderr)
            return EXIT_FAILED
        print_rows(args, response, spec)
        return EXIT_OK

    return instead
