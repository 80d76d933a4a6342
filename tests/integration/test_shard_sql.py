"""SQL across shards: two real aggregator shards export their DuckDB history to one shared directory on a schedule
(``<dir>/<table>/shard=<id>/day=.../``), and ``sql`` with ``shards`` runs over the union of those Parquet files, in the
same sandbox."""

from __future__ import annotations

import asyncio
import datetime
import shutil
from pathlib import Path

import duckdb
import pytest

from ranksight.aggregator.api.sql import SqlFailed, open_exports
from ranksight.aggregator.history import export_shard, exported_until, prune_export
from ranksight.aggregator.store import Store
from ranksight.api.client import query
from ranksight.schemas.subjects import Subjects
from ranksight.settings import Settings
from tests.shard_support import NODES, prepare_shards, publish_heartbeats, shard_settings
from tests.support import aggregator, run_cli_async, settings_env, wait_for

PER_SHARD_SQL = "SELECT shard, count(DISTINCT node) AS nodes, count(*) AS beats FROM heartbeat GROUP BY shard"


async def test_sql_runs_over_the_union_of_the_shards_exports(tmp_path: Path, settings: Settings) -> None:
    exports = tmp_path / "shared"
    cfgs = [
        shard_settings(settings, tmp_path, s, export_dir=exports, export_interval_s=0.5)
        for s in ("a", "b", "c")
    ]
    await prepare_shards(cfgs, ["a", "b", "c"])
    async with aggregator(cfgs[0]) as a, aggregator(cfgs[1]) as b, aggregator(cfgs[2]) as c:
        await publish_heartbeats(cfgs[0])
        await wait_for(lambda: sum(len(x.state.nodes.nodes) for x in (a, b, c)) == len(NODES))

        async def across(sql: str) -> list[dict[str, object]]:
            for _ in range(
                5
            ):  # a shard rewriting today's files (every 0.5 s here) can fail a read: documented
                answer = await query(cfgs[0], "sql", {"sql": sql, "shards": True})
                if answer.ok or not any(m in (answer.error or "") for m in ("IO Error", "try again")):
                    break
            assert answer.ok, answer.error
            assert set(answer.meta["exported_until"]) == {"a", "b", "c"}
            return answer.rows

        async def every_node_exported() -> bool:
            rows = await across(PER_SHARD_SQL)
            return sum(int(r["nodes"]) for r in rows) == len(NODES)  # type: ignore[call-overload]

        await wait_for(every_node_exported, timeout=30)
        hive = exports / "heartbeat" / "shard=a"
        assert list(hive.glob("day=*/*-heartbeat-*.parquet"))
        per_shard = await across(PER_SHARD_SQL)
        assert {r["shard"] for r in per_shard} == {
            "a",
            "b",
            "c",
        }  # each shard's nodes are its own partition's
        # a table no shard has exported yet (no GPU records here) has no rows, with the live table's columns
        assert await across(
            "SELECT count(*) AS n, count(DISTINCT shard) AS shards FROM gpu WHERE utilization_pct > 0"
        ) == [{"n": 0, "shards": 0}]
        # the documented views are rebuilt over the exports, across shards
        assert await across("SELECT count(DISTINCT node) AS n FROM node_timeline") == [{"n": len(NODES)}]

        # a node seen later lands with the next export, and re-exporting today's folder stores nothing twice
        await publish_heartbeats(cfgs[0], ["late-node"])
        await wait_for(lambda: across("SELECT 1 FROM heartbeat WHERE node = 'late-node'"), timeout=30)
        assert await across("SELECT count(*) AS n FROM heartbeat") == [{"n": len(NODES) + 1}]

        # still the sandbox: no file reading of its own, no settings
        refused = await query(cfgs[0], "sql", {"sql": f"SELECT * FROM read_parquet('{exports}/*/*/*/*.parquet')",
                                               "shards": True})  # fmt: skip
        assert not refused.ok and "not allowed" in (refused.error or "")
        out = await run_cli_async("sql", "--shards", "--json", PER_SHARD_SQL, env=settings_env(cfgs[0]))
        assert out.returncode == 0 and '"exported_until"' in out.stdout, out.stderr

    con = open_exports(exports, cfgs[0].aggregator.query, tmp_path / "tmp", [])
    try:
        assert con.execute("SELECT count(*) FROM heartbeat").fetchone() == (len(NODES) + 1,)
        with pytest.raises(duckdb.PermissionException):
            con.execute(
                "SELECT * FROM read_text('/etc/hostname')"
            ).fetchall()  # only the export dir can be read
        with pytest.raises(duckdb.Error):
            con.execute("SET enable_external_access = true")
    finally:
        con.close()
    assert set(exported_until(exports)) == {"a", "b", "c"}


async def test_sql_across_shards_says_what_is_missing(tmp_path: Path, settings: Settings) -> None:
    async with aggregator(settings):
        unset = await query(settings, "sql", {"sql": "SELECT 1", "shards": True})
        assert not unset.ok and "aggregator.shards.export_dir" in (unset.error or "")
    with pytest.raises(SqlFailed, match="no shard has exported"):
        open_exports(tmp_path / "nothing-here", settings.aggregator.query, tmp_path / "tmp", [])


async def test_an_export_that_fails_does_not_stop_the_aggregator(tmp_path: Path, settings: Settings) -> None:
    not_a_dir = tmp_path / "exports-is-a-file"
    not_a_dir.write_text("")
    cfg = shard_settings(settings, tmp_path, "a", export_dir=not_a_dir, export_interval_s=0.2)
    await prepare_shards([cfg], ["a"])
    async with aggregator(cfg) as agg:
        await publish_heartbeats(cfg)
        await wait_for(lambda: agg.state.nodes.nodes)  # ingest goes on while every export run fails
        await asyncio.sleep(0.5)
        assert (await query(cfg, "status")).ok
        failed = await query(cfg, "sql", {"sql": "SELECT 1", "shards": True})
        assert not failed.ok and "no shard has exported" in (failed.error or "")


def test_re_exporting_a_day_replaces_its_files_and_days_past_retention_go(
    tmp_path: Path, settings: Settings
) -> None:
    store = Store(tmp_path / "shard.duckdb", Subjects(), settings.aggregator.ingest)
    store.open()
    insert = "INSERT INTO heartbeat (cluster, node, agent, seq, ts, recv_ts, ttl) VALUES ('c', ?, 'a', ?, now(), ?, 5)"
    now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    since, until = now - datetime.timedelta(hours=1), now + datetime.timedelta(hours=1)
    try:
        store.con.execute(insert, ["n1", 1, now])
        export_shard(store.con, since, until, tmp_path / "shared", "a")
        day = next((tmp_path / "shared" / "heartbeat" / "shard=a").iterdir())
        first = {p.name for p in day.glob("*.parquet")}
        store.con.execute(insert, ["n2", 2, now])
        export_shard(store.con, since, until, tmp_path / "shared", "a")
        second = {p.name for p in day.glob("*.parquet")}
        assert first and second and not first & second  # the new files, under new names; the old ones removed
        rows = duckdb.sql(f"SELECT node FROM read_parquet('{day}/*.parquet') ORDER BY node").fetchall()
        assert rows == [("n1",), ("n2",)]
        assert not list((tmp_path / "shared" / "_staging").rglob("*"))
        old_day = day.with_name("day=2001-01-01")
        shutil.copytree(day, old_day)  # a day past the retention: removed
        prune_export(tmp_path / "shared", "a", now - datetime.timedelta(days=1))
        assert not old_day.exists() and day.exists()
    finally:
        store.close_connection()
        store.shutdown()
