"""Chaos on the query surface: SQL resource bombs and oversize answers against a real aggregator and nats-server, with
small limits so CI stays safe. Each asserts a clear answer per query, ingest still running and memory within bound."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ranksight.aggregator.runtime import Aggregator
from ranksight.api.client import query
from ranksight.core.natsconn import connect
from ranksight.settings import Settings
from tests.loadgen import SyntheticAgent
from tests.support import agent, aggregator, wait_for

pytestmark = pytest.mark.chaos

BOMBS = {
    "SELECT len(range(3000000000))": "refused: the query would generate more than",  # outside memory_limit
    "SELECT len(repeat(repeat('x', 100000), 100000))": "refused: the query would generate more than",
    "SELECT printf('%2000000000d', 1)": "refused: the query would generate more than",
    "SELECT len(list(i)) FROM range(100000000) t(i)": "query failed: out of memory",
    "SELECT count(*) FROM (SELECT DISTINCT i::VARCHAR || 'padding' FROM range(40000000) t(i))": "query failed",
    "SELECT count(*) FROM range(1000000000) a, range(1000) b": "query failed: query interrupted",
    "SELECT current_setting('temp_directory')": "refused: function current_setting() is not allowed",
}
SLOW = "SELECT count(*) FROM range(1000000000) a, range(1000) b"


def rss_mb() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096 // 2**20


def small_limits(settings: Settings) -> Settings:
    q = settings.aggregator.query.model_copy(update={
        "sql_memory_limit_bytes": 64 << 20, "writer_memory_limit_bytes": 32 << 20, "sql_temp_max_bytes": 64 << 20,
        "sql_time_limit_s": 3.0, "sql_max_concurrent": 2, "sql_queue_wait_s": 1.0, "sql_threads": 2,
    })  # fmt: skip
    return settings.model_copy(update={"aggregator": settings.aggregator.model_copy(update={"query": q})})


@pytest.fixture
async def busy_aggregator(settings: Settings) -> AsyncIterator[tuple[Settings, Aggregator]]:
    """An aggregator with small SQL limits, ingesting heartbeats of a real agent."""
    cfg = small_limits(settings)
    async with aggregator(cfg) as agg, agent(cfg, only=["heartbeat"]):
        yield cfg, agg


async def peak_rss_while(work: asyncio.Future[object] | asyncio.Task[object]) -> int:
    peak = rss_mb()
    while not work.done():
        peak = max(peak, rss_mb())
        await asyncio.sleep(0.05)
    return peak


async def test_sql_bombs_get_clear_answers_and_ingest_goes_on(
    busy_aggregator: tuple[Settings, Aggregator],
) -> None:
    cfg, agg = busy_aggregator
    before, records = rss_mb(), agg.stats.records
    answers: dict[str, str] = {}
    for sql, expected in BOMBS.items():  # one at a time: each its own clear answer
        task = asyncio.ensure_future(query(cfg, "sql", {"sql": sql}, timeout=30))
        peak = await peak_rss_while(task)
        response = task.result()
        answers[sql] = response.error or ""
        assert not response.ok and answers[sql].startswith(expected), (sql, answers[sql])
        assert peak - before < 400, f"{sql}: RSS grew {peak - before} MB"
    assert agg.stats.records > records  # ingest committed throughout
    assert (await query(cfg, "sql", {"sql": "SELECT count(*) AS n FROM heartbeat"})).rows[0]["n"] > 0


async def test_four_slow_bombs_do_not_make_select_1_wait(
    busy_aggregator: tuple[Settings, Aggregator],
) -> None:
    cfg, _ = busy_aggregator
    bombs = [asyncio.create_task(query(cfg, "sql", {"sql": SLOW}, timeout=30)) for _ in range(4)]
    await asyncio.sleep(0.5)
    started = time.monotonic()
    quick = await query(cfg, "sql", {"sql": "SELECT 1 AS one"}, timeout=30)
    waited = time.monotonic() - started
    assert waited < 2.5, f"SELECT 1 waited {waited:.1f}s"  # the queue-wait limit, not the bombs' time limit
    assert quick.rows == [{"one": 1}] or "busy: 2 SQL queries are running" in (quick.error or "")
    status = await query(cfg, "status")  # built-in endpoints are not queued behind user SQL
    assert status.ok and status.rows
    errors = [(await b).error or "" for b in bombs]
    assert sorted(e.split(":")[1].strip() for e in errors) == [
        "busy",
        "busy",
        "query interrupted",
        "query interrupted",
    ]
    quick = await query(cfg, "sql", {"sql": "SELECT 1 AS one"}, timeout=30)
    assert quick.rows == [{"one": 1}]


async def test_oversize_answers_at_once(busy_aggregator: tuple[Settings, Aggregator]) -> None:
    """Several answers of megabytes at the same time, a row over max_payload, a forged token: all clear, none a crash."""
    cfg, agg = busy_aggregator
    wide = "SELECT i, repeat('x', 2000) AS pad FROM range(2500) t(i)"  # ~5 MB each
    before = rss_mb()
    task = asyncio.gather(*(query(cfg, "sql", {"sql": wide}, timeout=30) for _ in range(4)))
    peak = await peak_rss_while(task)
    assert all(r.ok and len(r.rows) == 2500 for r in task.result())
    assert peak - before < 400
    huge = await query(cfg, "sql", {"sql": "SELECT repeat('x', 3000000) AS big"})
    assert (huge.error or "").startswith("query failed: row 1 alone is")
    nc = await connect(cfg.nats, "chaos")
    try:
        for body in ({"next": "A" * 10_000}, {"next": 5}, {"next": "x", "sql": "SELECT 1"}):
            msg = await nc.request(agg.subjects.api("sql"), json.dumps(body).encode(), timeout=5)
            assert msg.headers and msg.headers["Nats-Service-Error-Code"] == "400"
    finally:
        await nc.close()
    assert (await query(cfg, "status")).ok


async def test_ingest_waits_out_a_full_memory_pool(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """A query holding all of DuckDB's memory delays commits; it never stops ingest."""
    cfg = small_limits(settings)
    q = cfg.aggregator.query.model_copy(update={"sql_temp_max_bytes": 0})  # nothing spills: memory stays held
    cfg = cfg.model_copy(update={"aggregator": cfg.aggregator.model_copy(update={"query": q})})
    cfg.aggregator.ingest.commit_every_s = 0  # each fetch committed as it comes
    async with aggregator(cfg) as agg, agent(cfg, only=["heartbeat"]):
        await wait_for(lambda: agg.stats.records > 0)
        hog = agg.store.reader()
        # GPU rows by the thousand: their insert needs new blocks from the pool (a heartbeat's row may fit in the
        # blocks the table has)
        load = await SyntheticAgent(cfg, "node-load", records_per_batch=5000).start()
        try:
            # a sorted result waits, whole, in the pool until fetched: as much of it as fits
            await asyncio.to_thread(
                hog.execute, "SELECT i, i::VARCHAR || 'pad' AS s FROM range(1400000) t(i) ORDER BY s"
            )
            records = agg.stats.records
            await load.emit(20_000)
            assert await load.flush()
            await wait_for(lambda: "commit waits for memory" in caplog.text, timeout=10)
        finally:
            hog.close()
            await load.close()
        # the same batch committed after all
        await wait_for(lambda: agg.stats.records >= records + 20_000, timeout=10)
        assert agg.stats.dead_letters == 0  # a full pool is no message's fault: nothing dead-lettered
