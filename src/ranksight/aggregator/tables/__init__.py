"""History tables of one concern each, beside the ingest ones the writer fills: alerts, silences, drains. Each is a
mixin of :class:`~aggregator.store.Store`, its SQL run on the writer's connection (``await store.call(store.fn, ...)``,
on the writer thread)."""

from __future__ import annotations

import duckdb


class OnWriter:
    """What a table's SQL runs on: the writer's connection."""

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        raise NotImplementedError
