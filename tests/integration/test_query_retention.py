"""Retention on a real DuckDB file: old history goes on schedule, recent history and firing alerts stay."""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path

from ranksight.aggregator.history import delete_older_than, retention_loop
from ranksight.aggregator.store import Store
from tests.support import wait_for

NOW = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
OLD = NOW - datetime.timedelta(days=40)


def _seed(con) -> None:  # type: ignore[no-untyped-def]
    for when in (OLD, NOW):
        con.execute(
            "INSERT INTO heartbeat (cluster, node, agent, seq, ts, recv_ts, ttl) VALUES ('c', 'n', 'a', 1, ?, ?, 15)",
            [when, when],
        )
        con.execute("INSERT INTO dead_letters VALUES (?, 's', 'bad', 'x', NULL, 1, 'x'::BLOB)", [when])
    alert = "INSERT INTO alerts VALUES (?, 'r', 'warning', ?, 'c', 'n', NULL, NULL, NULL, 's', '{}', ?, NULL, ?, NULL, NULL)"
    con.execute(alert, ["resolved-long-ago", "firing", OLD, OLD])
    con.execute(alert, ["resolved-long-ago", "resolved", OLD, OLD])
    con.execute(alert, ["still-firing", "firing", OLD, OLD])


def _count(con, sql: str) -> int:  # type: ignore[no-untyped-def]
    return con.execute(sql).fetchall()[0][0]


async def test_retention_deletes_old_rows_but_keeps_firing_alerts(tmp_path: Path) -> None:
    store = Store(tmp_path / "r.duckdb")
    await store.call(store.open)
    try:
        await store.call(_seed, store.con)
        deleted = await store.call(delete_older_than, store.con, NOW - datetime.timedelta(days=30))
        assert deleted == {"heartbeat": 1, "dead_letters": 1, "alerts": 2}
        con = store.con
        assert await store.call(_count, con, "SELECT count(*) FROM heartbeat") == 1
        assert (
            await store.call(_count, con, "SELECT count(*) FROM alerts WHERE fingerprint = 'still-firing'")
            == 1
        )
        assert (
            await store.call(_count, con, "SELECT count(*) FROM alerts WHERE fingerprint <> 'still-firing'")
            == 0
        )
    finally:
        await store.call(store.close_connection)
        store.shutdown()


async def test_retention_runs_on_a_schedule(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.duckdb")
    await store.call(store.open)
    task = asyncio.create_task(retention_loop(store, retention_days=30, interval_s=0.1))
    try:
        await asyncio.sleep(0.3)  # the first pass ran on an empty table; the next ones must catch what we add
        await store.call(_seed, store.con)

        async def only_recent_left() -> bool:
            return await store.call(_count, store.con, "SELECT count(*) FROM heartbeat") == 1

        await wait_for(only_recent_left, timeout=3)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await store.call(store.close_connection)
        store.shutdown()
