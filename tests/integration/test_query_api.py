"""The query API against a real nats-server, a real aggregator (DuckDB file) and real `ranksight` CLI processes."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ranksight.aggregator.alerts import Condition
from ranksight.aggregator.api.service import SERVICE_NAME
from ranksight.aggregator.runtime import Aggregator
from ranksight.aggregator.state import LiveState
from ranksight.api.client import query
from ranksight.core.natsconn import connect
from ranksight.settings import Settings
from tests.support import agent, ranksight_cmd, run_cli_async, running, settings_env, wait_for
from tests.unit.test_query_sql import REFUSED


class SwitchRule:
    """A rule whose one condition the test turns on and off: drives the real alert engine, store and publisher."""

    name = "test_switch"
    for_s = clear_s = 0.0

    def __init__(self) -> None:
        self.on = False

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        if self.on:
            yield Condition(rule=self.name, severity="warning", cluster="test", node="node-a", rank=3,
                            summary="switch is on", evidence={"why": "test"})  # fmt: skip


async def test_nodes_endpoint_validation_and_service_stats(settings: Settings) -> None:
    async with running(Aggregator(settings)) as agg, agent(settings, only=["heartbeat"]):
        await wait_for(lambda: agg.state.nodes.nodes.get(("test", "node-a")))
        nodes = await query(settings, "nodes")
        assert nodes.ok and [r["node"] for r in nodes.rows] == ["node-a"]
        assert nodes.rows[0]["state"] == "alive" and nodes.rows[0]["publisher"]["published"] >= 0
        assert (await query(settings, "nodes", {"state": "gone"})).rows == []

        bad = await query(settings, "nodes", {"state": "dead"})
        assert not bad.ok and "state: Input should be 'alive', 'stale', 'gone' or 'drained'" in (
            bad.error or ""
        )
        proc = await run_cli_async("nodes", "--json", env=settings_env(settings))
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["rows"][0]["node"] == "node-a"

        nc = await connect(settings.nats, "test")
        try:
            msg = await nc.request(agg.subjects.api("nodes"), b'{"bogus": 1}', timeout=5)
            assert msg.headers and msg.headers["Nats-Service-Error-Code"] == "400"
            assert "unknown parameter 'bogus'" in msg.headers["Nats-Service-Error"]
            stats = json.loads((await nc.request(f"$SRV.STATS.{SERVICE_NAME}", b"", timeout=5)).data)
        finally:
            await nc.close()
        by_name = {e["name"]: e for e in stats["endpoints"]}
        assert {"status", "nodes", "alerts", "sql", "export"} <= set(by_name)
        assert by_name["nodes"]["num_requests"] >= 4
        assert by_name["nodes"]["data"] == {"errors_by_code": {"400": 2}}
        assert by_name["sql"]["num_requests"] == 0 and by_name["sql"]["data"] == {"errors_by_code": {}}


async def test_sql_happy_paths_table_json_csv_and_row_cap(settings: Settings) -> None:
    async with running(Aggregator(settings)) as agg, agent(settings, only=["heartbeat"]):
        await wait_for(lambda: agg.stats.records >= 3)
        env = settings_env(settings)
        sql = "SELECT node, count(*) AS beats FROM heartbeat GROUP BY node"
        table, as_json, as_csv, capped, timeline = await asyncio.gather(
            run_cli_async("sql", sql, env=env),
            run_cli_async("sql", sql, "--json", env=env),
            run_cli_async("sql", sql, "--csv", env=env),
            run_cli_async("sql", "SELECT * FROM range(50)", "--max-rows", "7", "--json", env=env),
            run_cli_async("sql", "SELECT node, went_stale FROM node_timeline", "--csv", env=env),
        )
    for proc in (table, as_json, as_csv, capped, timeline):
        assert proc.returncode == 0, proc.stderr
    assert table.stdout.splitlines()[0].split() == ["NODE", "BEATS"]
    assert table.stdout.splitlines()[1].split()[0] == "node-a"
    out = json.loads(as_json.stdout)
    assert out["ok"] is True and out["truncated"] is False and out["rows"][0]["beats"] >= 3
    assert out["meta"]["columns"] == ["node", "beats"]
    assert as_csv.stdout.splitlines()[0] == "node,beats"
    capped_out = json.loads(capped.stdout)
    assert capped_out["truncated"] is True and [r["range"] for r in capped_out["rows"]] == list(range(7))
    assert timeline.stdout.splitlines()[1].startswith("node-a,")


async def test_refused_statements_exit_1_with_a_clear_error(settings: Settings, tmp_path: Path) -> None:
    async with running(Aggregator(settings)):
        answers = {name: await query(settings, "sql", {"sql": sql}) for name, sql in REFUSED.items()}
        env = settings_env(settings)
        copy, cte, syntax = await asyncio.gather(
            run_cli_async("sql", f"/* just a select */ COPY alerts TO '{tmp_path / 'stolen.csv'}'", env=env),
            run_cli_async(
                "sql", "with t as (select * from READ_CSV('/etc/passwd')) select * from t", env=env
            ),
            run_cli_async("sql", "SELEC 1", env=env),
        )
    for name, answer in answers.items():
        assert not answer.ok and (answer.error or "").startswith("refused: "), (name, answer)
    for proc in (copy, cte):
        assert proc.returncode == 1 and proc.stdout == "" and "ranksight: refused:" in proc.stderr, (
            proc.stderr
        )
    assert not (tmp_path / "stolen.csv").exists()
    assert syntax.returncode == 1 and "query failed: Parser Error" in syntax.stderr


async def test_long_query_is_interrupted_while_ingest_commits(settings: Settings) -> None:
    async with running(Aggregator(settings)) as agg, agent(settings, only=["heartbeat"]):
        await wait_for(lambda: agg.stats.batches >= 1)
        batches_before = agg.stats.batches
        started = time.monotonic()
        response = await query(settings, "sql", {
            "sql": "SELECT count(*) FROM range(1000000000000) a WHERE a % 7 = 3", "time_limit_s": 1.5})  # fmt: skip
        elapsed = time.monotonic() - started
        assert not response.ok and "over the time limit of 1.5s" in (response.error or "")
        assert 1.4 <= elapsed < 4.0
        assert agg.stats.batches > batches_before  # heartbeats kept committing during the query
        after = await query(
            settings, "sql", {"sql": "SELECT 42 AS answer"}
        )  # the reader pool is healthy again
        assert after.ok and after.rows == [{"answer": 42}]


async def test_alerts_follow_receives_fired_and_resolved(settings: Settings) -> None:
    rule = SwitchRule()
    async with running(Aggregator(settings, rules=[rule])) as agg:
        follow = await asyncio.create_subprocess_exec(
            *ranksight_cmd("alerts", "--follow", "--json"), env=settings_env(settings),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)  # fmt: skip
        assert follow.stdout and follow.stderr
        try:
            line = await asyncio.wait_for(follow.stderr.readline(), 20)
            assert b"following alerts on ranksight.v1.alert.>" in line
            rule.on = True
            fired = json.loads(await asyncio.wait_for(follow.stdout.readline(), 10))
            current = await run_cli_async("alerts", "--json", env=settings_env(settings))
            rule.on = False
            resolved = json.loads(await asyncio.wait_for(follow.stdout.readline(), 10))
            await wait_for(lambda: not agg.engine.active)
            history = await query(settings, "alerts", {"state": "all"})
        finally:
            follow.send_signal(signal.SIGTERM)
            rc = await asyncio.wait_for(follow.wait(), 10)
    assert rc == 0
    assert fired["state"] == "firing" and resolved["state"] == "resolved"
    assert fired["fingerprint"] == resolved["fingerprint"]
    for key in (
        "rule",
        "severity",
        "cluster",
        "node",
        "rank",
        "summary",
        "evidence",
        "started_at",
        "updated_at",
    ):
        assert key in fired
    assert (fired["rule"], fired["node"], fired["rank"], fired["evidence"]) == (
        "test_switch",
        "node-a",
        3,
        {"why": "test"},
    )
    assert resolved["resolved_at"]
    assert current.returncode == 0, current.stderr
    assert [a["fingerprint"] for a in json.loads(current.stdout)["rows"]] == [fired["fingerprint"]]
    assert [r["state"] for r in history.rows] == ["resolved", "firing"]
    assert history.rows[0]["duration_s"] >= 0


async def test_export_writes_parquet_partitioned_by_day(settings: Settings, tmp_path: Path) -> None:
    out = settings.export_root() / "export"
    async with running(Aggregator(settings)) as agg, agent(settings, only=["heartbeat"]):
        await wait_for(lambda: agg.stats.records >= 3)
        stored = await query(settings, "sql", {"sql": "SELECT count(*) AS n FROM heartbeat"})
        env = settings_env(settings)
        proc = await run_cli_async("export", "--since", "2000-01-01", "--until", "2100-01-01", str(out), "--json",
                                   env=env)  # fmt: skip
        bad = await run_cli_async(
            "export", "--since", "yesterday", "--until", "2100-01-01", str(out), env=env
        )
        empty = await run_cli_async(
            "export", "--since", "2100-01-01", "--until", "2000-01-01", str(out), env=env
        )
        outside = await run_cli_async(
            "export", "--since", "2000-01-01", "--until", "2100-01-01", str(tmp_path / "elsewhere"), env=env
        )
    assert proc.returncode == 0, proc.stderr
    summary = {r["table"]: r for r in json.loads(proc.stdout)["rows"]}
    today = time.strftime("%Y-%m-%d", time.gmtime())
    assert summary["heartbeat"]["days"] == [today]
    files = list((out / "heartbeat" / f"day={today}").glob("*.parquet"))
    assert files
    exported = sum(pq.read_table(f).num_rows for f in files)
    assert exported == summary["heartbeat"]["rows"] >= stored.rows[0]["n"]
    assert bad.returncode == 2 and "not an ISO-8601 date or time" in bad.stderr
    assert empty.returncode == 1 and "since must be before until" in empty.stderr
    assert outside.returncode == 1 and "is outside the export root" in outside.stderr
    assert not (tmp_path / "elsewhere").exists()


@pytest.mark.parametrize(
    "args", [["sql"], ["sql", "  "], ["sql", "SELECT 1", "--json", "--csv"], ["export", "/tmp/x"]]
)
async def test_usage_errors_exit_2(args: list[str]) -> None:
    proc = await run_cli_async(*args)
    assert proc.returncode == 2
    assert proc.stdout == ""
