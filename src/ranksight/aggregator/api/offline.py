"""``--db FILE`` on the history commands (``sql``, ``alerts``, ``incidents``, ``series``): the same endpoint handler,
answered from a DuckDB history file without the service (after a demo, on a copy of an aggregator's database).

The file is attached read-only (nothing is migrated or written; DuckDB refuses while an aggregator holds it) and
locked down by the same :class:`~ranksight.aggregator.api.sql.SqlSandbox` as the live database: read-only statements
only, no file or network access, the time limit and row cap of ``aggregator.query``. What live state would say is
empty offline (the firing alerts are the history's: each alert's latest transition). DuckDB and the aggregator are
imported only when ``--db`` is given, so the commands stay light without it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ranksight.core.cliutil import EXIT_FAILED, EXIT_OK, settings_from_args

if TYPE_CHECKING:
    from ranksight.aggregator.api.endpoint import Endpoint
    from ranksight.core.config import Settings
    from ranksight.schemas.api import ApiResponse

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
        from ranksight.aggregator.api.cli import command_params, print_rows
        from ranksight.aggregator.api.endpoints import ENDPOINTS

        endpoint = ENDPOINTS[name]
        response = asyncio.run(answer_offline(settings_from_args(args), args.db, endpoint,
                                              command_params(endpoint, args)))  # fmt: skip
        if not response.ok:
            print(f"ranksight: {response.error}", file=sys.stderr)
            return EXIT_FAILED
        print_rows(args, response, endpoint)
        return EXIT_OK

    return instead


async def answer_offline(
    settings: Settings, path: Path, endpoint: Endpoint[Any], params: dict[str, Any]
) -> ApiResponse:
    """``endpoint``'s answer from the history file at ``path``; a failure response (never an exception) when the
    file cannot be read or the query is refused or fails."""
    import duckdb

    from ranksight.aggregator.api.endpoint import answer
    from ranksight.schemas.api import ApiResponse

    history = OfflineHistory(settings, path)
    try:
        await history.open()
    except (OSError, duckdb.Error) as exc:
        reason = str(exc).strip().splitlines()[0]
        if "lock" in reason.lower():
            reason = f"{path} is in use by a running aggregator (ask it: drop --db): {reason}"
        return ApiResponse.failure(f"cannot read the history file: {reason}")
    try:
        response, _ = await answer(endpoint.name, lambda: endpoint.call(history, params))  # type: ignore[arg-type]
        return response
    finally:
        await history.close()


class OfflineHistory:
    """What a history endpoint handler reads of an aggregator, from a file: settings, the sandbox, empty live state,
    and the alerts firing at the end of the history."""

    def __init__(self, settings: Settings, path: Path) -> None:
        from ranksight.aggregator.api.sql import SqlSandbox
        from ranksight.aggregator.state import LiveState
        from ranksight.aggregator.store import Store

        self.settings = settings
        self.store = Store(path)
        self.sandbox = SqlSandbox(self.store, settings.aggregator.query)
        self.state = LiveState()
        self.engine = types.SimpleNamespace(active={}, drained=set())
        self.lead = None

    async def open(self) -> None:
        await self.store.call(self.store.open_read_only)
        self.engine.active = {a.fingerprint: a for a in await self.store.call(self.store.active_alerts)}
        await self.sandbox.open()

    async def close(self) -> None:
        await self.sandbox.close()
        await self.store.call(self.store.close_connection)
        self.store.shutdown()
