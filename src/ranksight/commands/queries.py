"""The query commands: one per endpoint declared in :mod:`ranksight.api.endpoints` (:mod:`ranksight.api.cli`), and
``--db FILE`` on the history commands (those declared ``history=True``: ``sql``, ``alerts``, ``incidents``,
``series``): the command's answer from a DuckDB history file without the service (after a demo, on a copy of an
aggregator's database), by the aggregator's own handler (:mod:`ranksight.aggregator.api.offline`: read-only, the same
SQL sandbox). DuckDB and the aggregator are imported only when ``--db`` is given, so the commands stay light without
it.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from typing import Any

from ranksight.api import cli as api_cli
from ranksight.api.contract import EndpointSpec
from ranksight.api.endpoints import SPECS
from ranksight.core.cliutil import EXIT_FAILED, EXIT_OK, settings_from_args
from ranksight.settings import Settings


def register(sub: api_cli.SubParsers) -> None:
    api_cli.register(sub)
    for endpoint in SPECS.values():
        if endpoint.command.history:
            parser = _parser(sub, endpoint.command_path)
            add_db_flag(parser)
            parser.set_defaults(func=functools.partial(run_history_command, endpoint))


def _parser(sub: api_cli.SubParsers, path: tuple[str, ...]) -> argparse.ArgumentParser:
    """The parser of the command at ``path`` (``("node", "drain")``: ``ranksight node drain``)."""
    parser = sub.choices[path[0]]
    for word in path[1:]:
        [group] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        parser = group.choices[word]
    return parser


def add_db_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", metavar="FILE", type=Path,
                        help="answer offline from this DuckDB history file (read-only, the same SQL sandbox; "
                             "not while an aggregator holds it)")  # fmt: skip


def run_history_command(endpoint: EndpointSpec[Any], args: argparse.Namespace) -> int:
    """With ``--db``, the answer from the file; otherwise the command as the endpoint declares it (ask the
    aggregator)."""
    if args.db is None:
        return api_cli.run_command(endpoint, args)
    import asyncio

    from ranksight.aggregator.api.offline import answer_offline

    response = asyncio.run(
        answer_offline(
            settings_from_args(args, Settings), args.db, endpoint.name, api_cli.command_params(endpoint, args)
        )
    )
    if not response.ok:
        print(f"ranksight: {response.error}", file=sys.stderr)
        return EXIT_FAILED
    api_cli.print_rows(args, response, endpoint)
    return EXIT_OK
