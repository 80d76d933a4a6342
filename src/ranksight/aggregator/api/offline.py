"""The aggregator's side of ``--db FILE`` (:mod:`ranksight.commands.queries`): the same endpoint handler, answered from
a DuckDB history file without the service.

The file is attached read-only (nothing is migrated or written; DuckDB refuses while an aggregator holds it) and
locked down by the same :class:`~ranksight.aggregator.api.sql.SqlSandbox` as the live database: read-only statements
only, no file or network access, the time limit and row cap of ``aggregator.query``. What live state would say is
empty offline (the firing alerts are the history's: each alert's latest transition).
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ranksight.aggregator.settings import AggregatorView
    from ranksight.schemas.api import ApiResponse


async def answer_offline(
    settings: AggregatorView, path: Path, name: str, params: dict[str, Any]
) -> ApiResponse:
    """Endpoint ``name``'s answer from the history file at ``path``; a failure response (never an exception) when the
    file cannot be read or the query is refused or fails."""
    import duckdb

    from ranksight.aggregator.api.endpoint import answer
    from ranksight.aggregator.api.endpoints import ENDPOINTS
    from ranksight.schemas.api import ApiResponse

    endpoint = ENDPOINTS[name]
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

    def __init__(self, settings: AggregatorView, path: Path) -> None:
        from ranksight.aggregator.api.sql import SqlSandbox
        from ranksight.aggregator.state import LiveState
        from ranksight.aggregator.store import Store

        self.settings = settings
        self.store = Store(path)
        self.sandbox = SqlSandbox(self.store, settings.aggregator.query)
        self.state = LiveState()
        self.engine = types.SimpleNamespace(active={}, drained=set())
        self.actions = types.SimpleNamespace(by_fingerprint=dict)  # no action desk offline: no actions shown
        self.lead = None

    async def open(self) -> None:
        await self.store.call(self.store.open_read_only)
        self.engine.active = {a.fingerprint: a for a in await self.store.call(self.store.active_alerts)}
        await self.sandbox.open()

    async def close(self) -> None:
        await self.sandbox.close()
        await self.store.call(self.store.close_connection)
        self.store.shutdown()
