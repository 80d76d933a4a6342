"""The SQL sandbox: read-only SQL over the DuckDB history, with a time limit and a row cap (design §5, §8).

Two independent walls:

1. :func:`check_read_only` looks at the *parsed* statement, never at the text: DuckDB's own parser gives the statement
   type (only one ``SELECT``) and, through ``json_serialize_sql``, the whole tree, which is walked for table functions
   (only an allow-list: ``range``, ``unnest``, the catalog views...), file-looking table names and denied scalar
   functions. Comments, mixed case and CTEs change nothing: they are gone after parsing.
2. :meth:`SqlSandbox.open` switches the database to ``enable_external_access=false`` and locks the configuration, so even
   a statement the walk let through cannot read a file, reach the network, attach, install or load anything, or change
   a setting.

Resources: DuckDB's ``memory_limit`` (one pool per database: the SQL share plus the writer's), ``threads`` and a capped
temp directory bound what DuckDB's buffer manager holds; a query over it fails with "out of memory". A few scalar
functions build one list or string of a size given by an argument outside the buffer manager, beyond any
``memory_limit`` and deaf to interrupts (``len(range(3000000000))`` takes gigabytes in seconds): the walk requires
their size arguments to be integer literals and caps the product of all such sizes in a query (``max_generated``).
At most ``max_concurrent`` user queries run at once; one that waits longer than ``queue_wait_s`` for a slot is
answered "busy", and the reader cursors beyond that number stay free for the built-in endpoints.

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
import functools
import json
import logging
import re
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import duckdb

from ranksight.aggregator.api.settings import QuerySettings
from ranksight.aggregator.history import history_tables
from ranksight.aggregator.store import Store, sql_text
from ranksight.errors import QueryFailed, RanksightError, RefusedError

T = TypeVar("T")
log = logging.getLogger(__name__)

# Table functions that only compute or read the catalog; everything else (read_*, glob, query, parquet_*...) is refused.
ALLOWED_TABLE_FUNCTIONS = frozenset({
    "range", "generate_series", "unnest", "repeat", "repeat_row", "json_each", "json_tree",
    "duckdb_tables", "duckdb_views", "duckdb_columns", "duckdb_schemas", "duckdb_types", "duckdb_functions",
    "duckdb_constraints", "duckdb_indexes", "pragma_table_info", "pragma_database_size", "pragma_version",
})  # fmt: skip
# Scalar functions that reach outside the query (environment, settings, other SQL text, the log) even where they exist,
# or fold a list into an accumulator that can double each step (list_reduce(range(40), (a, x) -> a || a)).
DENIED_FUNCTIONS = frozenset({
    "getenv", "query", "query_table", "json_execute_serialized_sql", "current_setting", "getvariable",
    "write_log", "list_reduce", "array_reduce", "reduce",
})  # fmt: skip
# Scalar functions whose result size is set by an argument (index of that argument): they allocate it in one piece,
# outside DuckDB's memory_limit. range/generate_series are counted from all their arguments.
SIZED_FUNCTIONS = {"repeat": 1, "list_resize": 1, "array_resize": 1, "lpad": 1, "rpad": 1}
RANGE_FUNCTIONS = frozenset({"range", "generate_series"})
# The replacement (argument 2) multiplies the length.
REPLACE_FUNCTIONS = frozenset({"replace", "regexp_replace"})
FORMAT_FUNCTIONS = frozenset({"printf", "format"})  # a width in the format string is a size too
_FORMAT_DYNAMIC_WIDTH = re.compile(r"\*|\{[^{}]*\{")
_DIGITS = re.compile(r"\d+")
# Memory a finished query freed goes back to the system soon, not kept for the next big query. Process-wide in DuckDB:
# every instance opened (the parser's too) sets it again.
ALLOCATOR_CONFIG: dict[str, str | bool | int | float | list[str]] = {
    "allocator_flush_threshold": "64MiB",
    "allocator_background_threads": True,
}
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class SqlError(RanksightError):
    """Base of the sandbox errors; the message is meant for the user."""


class SqlRefused(SqlError, RefusedError):
    """The statement is not a plain read-only query (or uses files, network, extensions or settings)."""


class SqlFailed(SqlError, QueryFailed):
    """An allowed query failed in DuckDB (syntax, unknown column, over the time limit...)."""


class _FileVanished(SqlFailed):
    """DuckDB could not read a file the query was planned over (over the exports: a shard rewrote it meanwhile)."""


@dataclass
class SqlResult:
    columns: list[str]
    rows: list[dict[str, Any]]
    truncated: bool
    elapsed_s: float


def check_read_only(sql: str, max_generated: int = 10_000_000) -> None:
    """Raise :class:`SqlRefused` unless ``sql`` is exactly one read-only SELECT touching only tables and views, whose
    sized functions (see the module docstring) generate at most ``max_generated`` elements together."""
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
    parser = _parser_instance().cursor()
    try:
        (tree_json,) = parser.execute("SELECT json_serialize_sql(?)", [sql]).fetchone() or ("{}",)
    finally:
        parser.close()
    tree = json.loads(tree_json)
    if tree.get("error"):
        raise SqlRefused(f"cannot verify this query is read-only: {tree.get('error_message')}")
    nodes = list(_nodes(tree))
    # A table function (FROM range(n)) streams its rows in vectors: only scalar calls build one value in one piece.
    streamed = {id(n.get("function")) for n in nodes if n.get("type") == "TABLE_FUNCTION"}
    generated = 1
    for node in nodes:
        _check_node(node)
        if id(node) not in streamed:
            generated *= _generated_size(node)
        if generated > max_generated:
            raise SqlRefused(
                f"the query would generate more than {max_generated} elements in memory with "
                f"{node.get('function_name')}() (aggregator.query.sql_max_generated)"
            )


@functools.cache
def _parser_instance() -> duckdb.DuckDBPyConnection:
    """An in-memory database used only for its parser; one for the process, because opening and closing a DuckDB
    instance resets the process-wide allocator settings."""
    return duckdb.connect(config=ALLOCATOR_CONFIG)


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


def _generated_size(node: dict[str, Any]) -> int:
    """How many elements (list items, characters) a sized scalar function call may build; 1 for anything else."""
    if node.get("class") != "FUNCTION":
        return 1
    name = str(node.get("function_name", "")).lower()
    args = [a.get("expression", {}) for a in node.get("arguments", [])]
    if name in RANGE_FUNCTIONS:
        bounds = [_integer_literal(name, a) for a in args]
        start, stop, step = (
            (0, bounds[0], 1) if len(bounds) == 1 else (*bounds[:2], bounds[2] if len(bounds) > 2 else 1)
        )
        if step == 0:
            return 1
        inclusive = name == "generate_series"
        return max(0, (stop - start) // step + 1 if inclusive else -(-(stop - start) // step))
    if name in SIZED_FUNCTIONS and len(args) > SIZED_FUNCTIONS[name]:
        return max(1, _integer_literal(name, args[SIZED_FUNCTIONS[name]]))
    if name in REPLACE_FUNCTIONS and len(args) > 2:
        return max(1, len(_string_literal(name, args[2])))
    if name in FORMAT_FUNCTIONS and args:
        text = _string_literal(name, args[0])
        if _FORMAT_DYNAMIC_WIDTH.search(text):
            raise SqlRefused(f"{name}(): a width taken from an argument is not allowed")
        return max([1, *(int(d) for d in _DIGITS.findall(text))])
    return 1


def _integer_literal(function: str, expr: dict[str, Any]) -> int:
    negative = (
        expr.get("class") == "FUNCTION" and expr.get("function_name") == "-" and len(expr["arguments"]) == 1
    )
    if negative:
        expr = expr["arguments"][0].get("expression", {})
    literal = expr.get("literal", {}) if expr.get("class") == "CONSTANT" else {}
    if literal.get("kind") != "INTEGER":
        raise SqlRefused(
            f"{function}(): its size arguments must be integer literals (it allocates outside the limits)"
        )
    return -int(literal["text"]) if negative else int(literal["text"])


def _string_literal(function: str, expr: dict[str, Any]) -> str:
    literal = expr.get("literal", {}) if expr.get("class") == "CONSTANT" else {}
    if literal.get("kind") != "STRING":
        raise SqlRefused(f"{function}(): this argument must be a string literal (it sets the result's size)")
    return str(literal["text"])


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


INTERRUPT_EVERY_S = 0.1


async def _interrupt(cursor: duckdb.DuckDBPyConnection, call: asyncio.Future[Any]) -> None:
    """Interrupt ``cursor``'s query until ``call`` returns. An interrupt reaches only a query that is running: one
    whose call still waits for a reader thread (behind others being interrupted, on a loaded machine) or has not
    reached DuckDB would miss a single one and then run unbounded."""
    while not call.done():
        cursor.interrupt()
        await asyncio.wait([call], timeout=INTERRUPT_EVERY_S)
    if not call.cancelled():
        call.exception()  # the interruption asked for: retrieved, so asyncio does not report it


class SqlSandbox:
    """Runs checked SQL on a pool of reader cursors, each query on its own thread, under a time limit."""

    def __init__(self, store: Store, settings: QuerySettings) -> None:
        self.store = store
        self.settings = settings
        self.readers = settings.reader_threads
        self._executor = ThreadPoolExecutor(max_workers=self.readers, thread_name_prefix="duckdb-reader")
        self._cursors: asyncio.Queue[duckdb.DuckDBPyConnection] = asyncio.Queue()
        self._user_slots = asyncio.Semaphore(settings.sql_max_concurrent)
        # queries cancelled from outside, interrupted until they stop
        self._stopping: set[asyncio.Task[None]] = set()
        # the live database's history tables (empty where no shard has exported one yet) and views, rebuilt over the
        # exports
        self._export_schema: list[tuple[str, str]] = []
        self._exports_temp_dir = Path()

    async def open(self) -> None:
        """Bound DuckDB's memory, threads and temp space, lock the database down (on the writer thread) and open the
        reader cursors."""
        cfg = self.settings
        temp_dir = self.store.path.with_name(self.store.path.name + ".tmp")
        self._exports_temp_dir = self.store.path.with_name(self.store.path.name + ".exports.tmp")

        def lock_down() -> list[duckdb.DuckDBPyConnection]:
            con = self.store.con
            temp_dir.mkdir(mode=0o700, exist_ok=True)
            con.execute(f"SET memory_limit = '{cfg.sql_memory_limit_bytes + cfg.writer_memory_limit_bytes}B'")
            con.execute(f"SET threads = {cfg.sql_threads}")
            con.execute(f"SET temp_directory = {sql_text(str(temp_dir))}")
            con.execute(f"SET max_temp_directory_size = '{cfg.sql_temp_max_bytes}B'")
            for name, value in ALLOCATOR_CONFIG.items():
                con.execute(f"SET {name} = '{value}'")
            con.execute("SET enable_external_access = false")
            con.execute("SET lock_configuration = true")
            self._export_schema = [*_empty_history_tables(con), *con.execute(_VIEWS_SQL).fetchall()]
            return [self.store.reader() for _ in range(self.readers)]

        for cursor in await self.store.call(lock_down):
            self._cursors.put_nowait(cursor)

    async def close(self) -> None:
        while not self._cursors.empty():
            self._cursors.get_nowait().close()
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def run(self, fn: Callable[..., T], *args: Any, time_limit_s: float | None = None) -> T:
        """``fn(cursor, *args)`` on a reader thread with a pooled cursor; interrupted after ``time_limit_s``."""
        cursor = await self._cursors.get()
        return await self._interruptible(cursor, self._cursors.put_nowait, fn, args, time_limit_s)

    async def _interruptible(self, cursor: duckdb.DuckDBPyConnection,
                             release: Callable[[duckdb.DuckDBPyConnection], None], fn: Callable[..., T],
                             args: tuple[Any, ...], time_limit_s: float | None) -> T:  # fmt: skip
        """``fn(cursor, *args)`` on a reader thread, interrupted after ``time_limit_s``; ``release(cursor)`` once it
        has stopped."""
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._executor, fn, cursor, *args)
        try:
            return await asyncio.wait_for(asyncio.shield(future), time_limit_s)
        except TimeoutError:
            await _interrupt(cursor, future)
            raise SqlFailed(f"query interrupted: over the time limit of {time_limit_s:g}s") from None
        finally:
            if future.done():
                release(cursor)
            else:  # cancelled from outside while running: stop it, and release the cursor once it is free
                stopping = asyncio.ensure_future(_interrupt(cursor, future))
                self._stopping.add(stopping)
                stopping.add_done_callback(self._stopping.discard)

                def stopped(done: asyncio.Future[T]) -> None:
                    if not done.cancelled():
                        done.exception()  # also where the interrupting task itself is cancelled (loop shutdown)
                    release(cursor)

                future.add_done_callback(stopped)

    async def query(
        self, sql: str, max_rows: int, time_limit_s: float, exports: Path | None = None
    ) -> SqlResult:
        """Run a user query on the live database, or (``exports``) over the shards' Parquet exports in that
        directory (:func:`open_exports`), within the same limits."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        await loop.run_in_executor(self._executor, check_read_only, sql, self.settings.sql_max_generated)
        try:
            await asyncio.wait_for(self._user_slots.acquire(), self.settings.sql_queue_wait_s)
        except TimeoutError:
            raise SqlFailed(
                f"busy: {self.settings.sql_max_concurrent} SQL queries are running "
                "(aggregator.query.sql_max_concurrent); try again"
            ) from None
        try:
            if exports is None:
                columns, rows, truncated = await self.run(_fetch, sql, max_rows, time_limit_s=time_limit_s)
            else:
                columns, rows, truncated = await self._over_exports(
                    exports, sql, max_rows, started + time_limit_s
                )
        finally:
            self._user_slots.release()
        return SqlResult(columns, rows, truncated, loop.time() - started)

    async def _over_exports(
        self, exports: Path, sql: str, max_rows: int, deadline: float
    ) -> tuple[list[str], list[dict[str, Any]], bool]:
        """The query over the exports; a file a shard replaced between planning and reading is read again from a fresh
        view of the folder, a few times within the time limit."""
        loop = asyncio.get_running_loop()
        for attempt in range(_EXPORT_READ_ATTEMPTS):
            con = await loop.run_in_executor(self._executor, open_exports, exports, self.settings,
                                             self._exports_temp_dir, self._export_schema)  # fmt: skip
            try:
                return await self._interruptible(con, duckdb.DuckDBPyConnection.close, _fetch, (sql, max_rows),
                                                 max(deadline - loop.time(), 0.001))  # fmt: skip
            except _FileVanished as exc:
                if attempt == _EXPORT_READ_ATTEMPTS - 1:
                    raise SqlFailed(f"the shards' exports cannot be read now (a shard is rewriting them; try "
                                    f"again): {exc}") from None  # fmt: skip
        raise AssertionError("unreachable")


_VIEWS_SQL = (
    "SELECT view_name, sql FROM duckdb_views() WHERE NOT internal AND schema_name = 'main' ORDER BY view_name"
)
_EXPORT_GLOB = "*/*/*.parquet"  # <table>/shard=<id>/day=<date>/<file>


def _empty_history_tables(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
    """(table, DDL) creating each history table empty, with the exports' Hive columns: a query over the exports
    before any shard has exported that table finds no rows rather than no table."""
    tables = []
    for table, _ in history_tables(con):
        columns = con.execute(
            "SELECT column_name, data_type FROM duckdb_columns() WHERE schema_name = 'main' AND table_name = ? "
            "ORDER BY column_index",
            [table],
        ).fetchall()
        defs = ", ".join(f'"{name}" {kind}' for name, kind in columns)
        tables.append((table, f'CREATE TABLE "{table}" ({defs}, shard VARCHAR, day DATE)'))
    return tables


def open_exports(export_dir: Path, settings: QuerySettings, temp_dir: Path,
                 schema: list[tuple[str, str]]) -> duckdb.DuckDBPyConnection:  # fmt: skip
    """An in-memory database over the shards' Parquet exports: each ``<table>`` folder of ``export_dir`` holding files
    is a view of the same name over all of them (the Hive folders give the columns ``shard`` and ``day``; columns a
    later migration added are null in older files), then what of ``schema`` (name, DDL: the live database's tables,
    created empty, and views) is not exported and can be built over them.
    Locked down like the live database, except that ``export_dir`` alone can be read. A shard rewriting today's files
    meanwhile makes a file vanish or look truncated: tried again a few times, then :class:`SqlFailed`."""
    if not export_dir.is_dir():
        raise SqlFailed(f"no shard has exported its history yet: {export_dir} is not a directory")
    for attempt in range(_EXPORT_READ_ATTEMPTS):
        con = duckdb.connect(config=ALLOCATOR_CONFIG)
        try:
            _views_over_exports(con, export_dir, settings, temp_dir, schema)
            return con
        except (duckdb.IOException, duckdb.InvalidInputException) as exc:
            con.close()
            if attempt == _EXPORT_READ_ATTEMPTS - 1:
                raise SqlFailed(f"the shards' exports cannot be read now (a shard is rewriting them; try again): "
                                f"{_first_line(exc)}") from None  # fmt: skip
        except BaseException:
            con.close()
            raise
    raise AssertionError("unreachable")


_EXPORT_READ_ATTEMPTS = 3


def _views_over_exports(con: duckdb.DuckDBPyConnection, export_dir: Path, settings: QuerySettings, temp_dir: Path,
                        schema: list[tuple[str, str]]) -> None:  # fmt: skip
    temp_dir.mkdir(mode=0o700, exist_ok=True)
    con.execute(f"SET memory_limit = '{settings.sql_memory_limit_bytes}B'")
    con.execute(f"SET threads = {settings.sql_threads}")
    con.execute(f"SET temp_directory = {sql_text(str(temp_dir))}")
    con.execute(f"SET max_temp_directory_size = '{settings.sql_temp_max_bytes}B'")
    con.execute(f"SET allowed_directories = [{sql_text(str(export_dir.resolve()) + '/')}]")
    con.execute("SET enable_external_access = false")
    tables = [  # not the "_" folders: the exports' freshness marks and staging
        d
        for d in sorted(export_dir.iterdir())
        if _IDENTIFIER.match(d.name) and not d.name.startswith("_") and any(d.glob(_EXPORT_GLOB))
    ]
    for table in tables:
        files = sql_text(str(table.resolve() / _EXPORT_GLOB))
        con.execute(f'CREATE VIEW "{table.name}" AS SELECT * FROM read_parquet({files}, hive_partitioning = true, '
                    "hive_types = {'shard': VARCHAR, 'day': DATE}, union_by_name = true)")  # fmt: skip
    pending = [(name, sql) for name, sql in schema if name not in {t.name for t in tables}]
    while pending:  # a view over another view: build what can be built until nothing more can
        left = []
        for name, sql in pending:
            try:
                con.execute(sql)
            except (duckdb.CatalogException, duckdb.BinderException) as exc:  # a table or column not exported
                log.debug("view %s not built over the exports: %s", name, _first_line(exc))
                left.append((name, sql))
        if len(left) == len(pending):
            break
        pending = left
    con.execute("SET lock_configuration = true")


def _fetch(
    cursor: duckdb.DuckDBPyConnection, sql: str, max_rows: int
) -> tuple[list[str], list[dict[str, Any]], bool]:
    try:
        cursor.execute(sql)
        columns = [d[0] for d in cursor.description or []]
        values = cursor.fetchmany(max_rows + 1)
    except duckdb.OutOfMemoryException as exc:
        raise SqlFailed(
            f"out of memory (aggregator.query.sql_memory_limit_bytes): {_first_line(exc)}"
        ) from None
    except duckdb.IOException as exc:
        raise _FileVanished(str(exc).strip()) from None
    except duckdb.Error as exc:
        raise SqlFailed(str(exc).strip()) from None
    finally:
        cursor.execute("SELECT 1")  # drop any unfinished result: the cursor goes back to the pool clean
    rows = [{c: jsonable(v) for c, v in zip(columns, r, strict=True)} for r in values[:max_rows]]
    return columns, rows, len(values) > max_rows


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0]
