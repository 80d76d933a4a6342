"""The SQL sandbox: read-only SQL over the DuckDB history, with a time limit and a row cap (design §5, §8).

Two independent walls:

1. :func:`check_read_only` looks at the *parsed* statement, never at the text: DuckDB's own parser gives the statement
   type (only one ``SELECT``) and, through ``json_serialize_sql``, the whole tree, which is walked for table functions
   (only an allow-list: ``range``, ``unnest``, the catalog views...), file-looking table names and denied scalar
   functions. Comments, mixed case and CTEs change nothing: they are gone after parsing.
2. :meth:`SqlSandbox.open` switches the database to ``enable_external_access=false`` and locks the configuration, so even
   a statement the walk let through cannot read a file, reach the network, attach, install or load anything, or change
   a setting.

Queries run on reader cursors (their own DuckDB connections to the same database) on a reader thread pool: the one
writer thread is never queued behind a query, and DuckDB's MVCC lets ingest commit while a query reads. The time limit
really stops the query: ``cursor.interrupt()`` aborts it inside DuckDB.

Errors: :class:`SqlRefused` (the statement is not allowed) and :class:`SqlFailed` (it was allowed but failed: bad
column, timeout); both subclass :class:`SqlError`.
"""

from __future__ import annotations

import asyncio
import datetime
import decimal
import json
import re
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import duckdb

from aggregator.store import Store

T = TypeVar("T")

# Table functions that only compute or read the catalog; everything else (read_*, glob, query, parquet_*...) is refused.
ALLOWED_TABLE_FUNCTIONS = frozenset({
    "range", "generate_series", "unnest", "repeat", "repeat_row", "json_each", "json_tree",
    "duckdb_tables", "duckdb_views", "duckdb_columns", "duckdb_schemas", "duckdb_types", "duckdb_functions",
    "duckdb_constraints", "duckdb_indexes", "pragma_table_info", "pragma_database_size", "pragma_version",
})  # fmt: skip
# Scalar functions that reach outside the query (environment, other SQL text) even where they exist.
DENIED_FUNCTIONS = frozenset({"getenv", "query", "query_table", "json_execute_serialized_sql"})
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class SqlError(Exception):
    """Base of the sandbox errors; the message is meant for the user."""


class SqlRefused(SqlError):
    """The statement is not a plain read-only query (or uses files, network, extensions or settings)."""


class SqlFailed(SqlError):
    """An allowed query failed in DuckDB (syntax, unknown column, over the time limit...)."""


@dataclass
class SqlResult:
    columns: list[str]
    rows: list[dict[str, Any]]
    truncated: bool
    elapsed_s: float


def check_read_only(sql: str) -> None:
    """Raise :class:`SqlRefused` unless ``sql`` is exactly one read-only SELECT touching only tables and views."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise SqlFailed(str(exc)) from None
    if len(statements) != 1:
        raise SqlRefused(f"exactly one statement is allowed, got {len(statements)}")
    kind = statements[0].type
    if kind != duckdb.StatementType.SELECT:
        name = "INSTALL/LOAD" if kind == duckdb.StatementType.LOAD else kind.name
        raise SqlRefused(f"only read-only SELECT queries are allowed, not {name}")
    parser = duckdb.connect()  # in-memory: only its parser is used
    try:
        (tree_json,) = parser.execute("SELECT json_serialize_sql(?)", [sql]).fetchone() or ("{}",)
    finally:
        parser.close()
    tree = json.loads(tree_json)
    if tree.get("error"):
        raise SqlRefused(f"cannot verify this query is read-only: {tree.get('error_message')}")
    for node in _nodes(tree):
        _check_node(node)


def _nodes(value: Any) -> Iterator[dict[str, Any]]:
    if isinstance(value, dict):
        yield value
        for child in value.values():
            yield from _nodes(child)
    elif isinstance(value, list):
        for child in value:
            yield from _nodes(child)


def _check_node(node: dict[str, Any]) -> None:
    if node.get("type") == "TABLE_FUNCTION":
        name = str(node.get("function", {}).get("function_name", "")).lower()
        if name not in ALLOWED_TABLE_FUNCTIONS:
            raise SqlRefused(f"table function {name}() is not allowed (no file, network or extension access)")
    elif node.get("class") == "FUNCTION":
        name = str(node.get("function_name", "")).lower()
        if name in DENIED_FUNCTIONS:
            raise SqlRefused(f"function {name}() is not allowed")
    elif node.get("type") == "BASE_TABLE":
        name = str(node.get("table_name", ""))
        if not _IDENTIFIER.match(name):
            raise SqlRefused(f"{name!r} is not a table or view name (reading files is not allowed)")


def jsonable(value: Any) -> Any:
    """A DuckDB value as plain JSON data (timestamps as ISO-8601 UTC, decimals as floats, blobs as hex)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, datetime.datetime):
        return value.isoformat() + ("Z" if value.tzinfo is None else "")
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return str(value)


class SqlSandbox:
    """Runs checked SQL on a pool of reader cursors, each query on its own thread, under a time limit."""

    def __init__(self, store: Store, readers: int = 4) -> None:
        self.store = store
        self.readers = readers
        self._executor = ThreadPoolExecutor(max_workers=readers, thread_name_prefix="duckdb-reader")
        self._cursors: asyncio.Queue[duckdb.DuckDBPyConnection] = asyncio.Queue()

    async def open(self) -> None:
        """Lock the database down (on the writer thread) and open the reader cursors."""

        def lock_down() -> list[duckdb.DuckDBPyConnection]:
            con = self.store.con
            con.execute("SET enable_external_access = false")
            con.execute("SET lock_configuration = true")
            return [self.store.reader() for _ in range(self.readers)]

        for cursor in await self.store.call(lock_down):
            self._cursors.put_nowait(cursor)

    async def close(self) -> None:
        while not self._cursors.empty():
            self._cursors.get_nowait().close()
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def run(self, fn: Callable[..., T], *args: Any, time_limit_s: float | None = None) -> T:
        """``fn(cursor, *args)`` on a reader thread with a pooled cursor; interrupted after ``time_limit_s``."""
        loop = asyncio.get_running_loop()
        cursor = await self._cursors.get()
        future = loop.run_in_executor(self._executor, fn, cursor, *args)
        try:
            return await asyncio.wait_for(asyncio.shield(future), time_limit_s)
        except TimeoutError:
            cursor.interrupt()
            await asyncio.gather(future, return_exceptions=True)  # returns promptly once interrupted
            raise SqlFailed(f"query interrupted: over the time limit of {time_limit_s:g}s") from None
        finally:
            if future.done():
                self._cursors.put_nowait(cursor)
            else:  # cancelled from outside while running: stop it, and pool the cursor once it is free
                cursor.interrupt()
                future.add_done_callback(lambda _: self._cursors.put_nowait(cursor))

    async def query(self, sql: str, max_rows: int, time_limit_s: float) -> SqlResult:
        loop = asyncio.get_running_loop()
        started = loop.time()
        await loop.run_in_executor(self._executor, check_read_only, sql)
        columns, rows, truncated = await self.run(_fetch, sql, max_rows, time_limit_s=time_limit_s)
        return SqlResult(columns, rows, truncated, loop.time() - started)


def _fetch(
    cursor: duckdb.DuckDBPyConnection, sql: str, max_rows: int
) -> tuple[list[str], list[dict[str, Any]], bool]:
    try:
        cursor.execute(sql)
        columns = [d[0] for d in cursor.description or []]
        values = cursor.fetchmany(max_rows + 1)
    except duckdb.Error as exc:
        raise SqlFailed(str(exc).strip()) from None
    finally:
        cursor.execute("SELECT 1")  # drop any unfinished result: the cursor goes back to the pool clean
    rows = [{c: jsonable(v) for c, v in zip(columns, r, strict=True)} for r in values[:max_rows]]
    return columns, rows, len(values) > max_rows
