"""The SQL sandbox's resource bounds on a real DuckDB file: memory limit, concurrency slots, temp space, memory given
back after a big query."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from ranksight.aggregator.api.endpoint import answer
from ranksight.aggregator.api.settings import QuerySettings
from ranksight.aggregator.api.sql import SqlFailed, SqlSandbox
from ranksight.aggregator.store import Store
from tests.support import wait_for

SLOW = "SELECT count(*) FROM range(100000000) a, range(1000) b"  # seconds of CPU, no memory


def rss_mb() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096 // 2**20


@pytest.fixture
async def sandbox(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[SqlSandbox]:
    store = Store(tmp_path / "db.duckdb")
    await store.call(store.open)
    settings = QuerySettings(**getattr(request, "param", {}))
    box = SqlSandbox(store, settings)
    await box.open()
    try:
        yield box
    finally:
        await box.close()
        await store.call(store.close_connection)
        store.shutdown()


@pytest.mark.parametrize(
    "sandbox", [{"sql_memory_limit_bytes": 64 << 20, "writer_memory_limit_bytes": 32 << 20}], indirect=True
)
async def test_a_query_over_the_memory_limit_is_422_out_of_memory(sandbox: SqlSandbox) -> None:
    response, status = await answer(
        "sql", lambda: sandbox.query("SELECT len(list(i)) FROM range(100000000) t(i)", 10, 30)
    )
    assert status == 422
    assert (response.error or "").startswith("query failed: out of memory")
    assert (await sandbox.query("SELECT 42 AS x", 10, 5)).rows == [{"x": 42}]  # the sandbox goes on


@pytest.mark.parametrize(
    "sandbox",
    [{"sql_memory_limit_bytes": 100 << 20, "writer_memory_limit_bytes": 28 << 20, "sql_threads": 1,
      "sql_temp_max_bytes": 64 << 20}],
    indirect=True,
)  # fmt: skip
async def test_duckdb_runs_with_the_configured_bounds(sandbox: SqlSandbox) -> None:
    def settings(cursor: object, names: list[str]) -> dict[str, str]:
        rows = cursor.execute(  # type: ignore[attr-defined]
            "SELECT name, value FROM duckdb_settings() WHERE name IN (SELECT unnest(?))", [names]
        ).fetchall()
        return dict(rows)

    got = await sandbox.run(
        settings, ["memory_limit", "threads", "max_temp_directory_size", "temp_directory"]
    )
    assert got["memory_limit"] == "128.0 MiB" and got["threads"] == "1"
    assert got["max_temp_directory_size"] == "64.0 MiB"
    temp = Path(got["temp_directory"])
    assert temp == sandbox.store.path.with_name("db.duckdb.tmp") and os.stat(temp).st_mode & 0o777 == 0o700


@pytest.mark.parametrize(
    "sandbox", [{"sql_max_concurrent": 2, "reader_threads": 3, "sql_queue_wait_s": 0.5}], indirect=True
)
async def test_slow_queries_leave_a_clear_busy_answer_and_the_builtin_lane(sandbox: SqlSandbox) -> None:
    slow = [asyncio.create_task(sandbox.query(SLOW, 10, 8)) for _ in range(2)]
    await asyncio.sleep(0.3)
    started = time.monotonic()
    with pytest.raises(
        SqlFailed, match=r"busy: 2 SQL queries are running \(aggregator.query.sql_max_concurrent\)"
    ):
        await sandbox.query("SELECT 1", 10, 5)
    assert time.monotonic() - started < 3  # not the slow queries' 8 s
    # the built-in endpoints (alerts history, export) keep a reader cursor of their own
    assert await sandbox.run(lambda cur: cur.execute("SELECT 7").fetchone()[0], time_limit_s=5) == 7
    for task in slow:
        with pytest.raises(SqlFailed, match="time limit"):
            await task


@pytest.mark.parametrize("sandbox", [{"sql_memory_limit_bytes": 768 << 20}], indirect=True)
async def test_memory_is_given_back_after_a_big_query(sandbox: SqlSandbox) -> None:
    before = rss_mb()
    big = "SELECT count(*) FROM (SELECT DISTINCT i::VARCHAR || 'abcdefgh' FROM range(8000000) t(i))"
    assert (await sandbox.query(big, 10, 60)).rows == [{"count_star()": 8000000}]
    # without the allocator settings (a fresh DuckDB instance, such as the parser's, resets them) ~450 MB stay held
    await wait_for(lambda: rss_mb() < before + 150, timeout=15, interval=0.5)


async def test_a_query_that_starts_after_its_time_limit_is_still_interrupted(sandbox: SqlSandbox) -> None:
    """A call that reaches DuckDB only after its time limit (waiting for a reader thread on a loaded machine) misses
    an interrupt sent before it runs: the interrupt is repeated until the call returns, so it never runs unbounded."""

    def late_and_endless(cursor: Any) -> Any:
        time.sleep(0.6)  # the limit (0.2 s) passes before the query starts
        return cursor.execute("SELECT count(*) FROM range(1000000000) a, range(100000) b").fetchall()

    started = time.monotonic()
    with pytest.raises(SqlFailed, match="time limit"):
        await asyncio.wait_for(sandbox.run(late_and_endless, time_limit_s=0.2), 20)
    assert time.monotonic() - started < 5
    assert await sandbox.run(lambda cur: cur.execute("SELECT 7").fetchone()[0], time_limit_s=5) == 7
