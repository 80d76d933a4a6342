"""Real nats-server + agent + aggregator + DuckDB file: heartbeats make a node alive; silence makes it stale."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import duckdb

from ranksight.api.client import query
from ranksight.core.natsconn import connect
from ranksight.schemas.alerts import Alert
from ranksight.schemas.subjects import Subjects
from ranksight.settings import Settings
from tests.support import agent, aggregator, run_cli, run_cli_async, settings_env, wait_for


async def test_heartbeat_alive_then_stale_then_alert(settings: Settings) -> None:
    async with aggregator(settings) as agg:
        async with agent(settings, only=["heartbeat"]):
            node = await wait_for(lambda: agg.state.nodes.nodes.get(("test", "node-a")))
            await wait_for(lambda: node.state == "alive" and agg.stats.records >= 2)
            response = await query(settings, "status")
            assert response.ok
            assert [(r["node"], r["state"]) for r in response.rows] == [("node-a", "alive")]
            assert response.rows[0]["collectors"][0]["name"] == "heartbeat"
        # Agent stopped: after its TTL (1 s) the node is stale, and node_silent fires.
        await wait_for(lambda: agg.state.nodes.nodes[("test", "node-a")].state == "stale", timeout=5)
        await wait_for(lambda: any(a.rule == "node_silent" for a in agg.engine.active.values()), timeout=5)
        await wait_for(lambda: agg.state.nodes.nodes[("test", "node-a")].state == "gone", timeout=8)
    con = duckdb.connect(str(settings.db_path()), read_only=True)
    (count,) = con.execute("SELECT count(*) FROM heartbeat WHERE node = 'node-a'").fetchone()
    assert count >= 2
    assert firing_rows_in(settings) == 1


async def test_status_cli_json_shape(settings: Settings) -> None:
    async with aggregator(settings) as agg, agent(settings, only=["heartbeat"]):
        await wait_for(lambda: agg.state.nodes.nodes.get(("test", "node-a")))
        proc = await run_cli_async("status", "--json", env=settings_env(settings))
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        assert out["nodes"][0]["node"] == "node-a"
        assert out["nodes"][0]["state"] == "alive"
        assert out["nodes"][0]["last_seen"].endswith("Z")


def test_status_cli_without_aggregator_exits_1(nats_server) -> None:  # type: ignore[no-untyped-def]
    proc = run_cli("status", "--nats", nats_server.url, timeout=30)
    assert proc.returncode == 1
    assert "no aggregator answers" in proc.stderr


def firing_rows(con: duckdb.DuckDBPyConnection) -> int:
    [(rows,)] = con.execute(
        "SELECT count(*) FROM alerts WHERE rule = 'node_silent' AND state = 'firing'"
    ).fetchall()
    return int(rows)


def firing_rows_in(settings: Settings) -> int:
    """``firing_rows`` of the history file, the aggregator stopped."""
    with duckdb.connect(str(settings.db_path()), read_only=True) as con:
        return firing_rows(con)


async def test_restart_rebuilds_state_and_refires_nothing(settings: Settings) -> None:
    async with aggregator(settings) as agg:
        async with agent(settings, only=["heartbeat"]):
            await wait_for(lambda: agg.state.nodes.nodes.get(("test", "node-a")))
        await wait_for(lambda: any(a.rule == "node_silent" for a in agg.engine.active.values()), timeout=5)
        # a tick writes what fired after it evaluated: leaving before that write would lose it (a shutdown mid-tick)
        await wait_for(lambda: firing_rows(agg.store.reader()) == 1, timeout=5)
        before = agg.state.nodes.nodes[("test", "node-a")]
    async with aggregator(settings) as again:
        rebuilt = again.state.nodes.nodes[("test", "node-a")]
        assert (rebuilt.agent, rebuilt.last_seen_ns, rebuilt.expires_ns) == (
            before.agent, before.last_seen_ns, before.expires_ns)  # fmt: skip
        assert rebuilt.state in ("stale", "gone")
        assert [a.rule for a in again.engine.active.values()] == ["node_silent"]
        await again.tick(again.state.now_ns + 1)
    assert firing_rows_in(settings) == 1


async def test_a_stop_during_a_tick_stores_and_announces_what_it_fired(settings: Settings) -> None:
    """Stopping while a tick writes its alerts lets the tick finish: the row is stored and the alert announced, so
    nothing is lost (the restart that follows does not fire it again, so it would never be announced)."""
    announced: list[bytes] = []
    nc = await connect(settings.nats, name="test-alerts")

    async def on_alert(msg: Any) -> None:
        announced.append(msg.data)

    await nc.subscribe(Subjects(settings.subject_prefix).alerts_filter(None), cb=on_alert)
    writing = threading.Event()
    async with aggregator(settings) as agg:
        write_alerts = agg.store.write_alerts

        def slow_write(transitions: list[Alert]) -> None:
            writing.set()
            time.sleep(0.5)  # the stop arrives meanwhile
            write_alerts(transitions)

        agg.store.write_alerts = slow_write  # type: ignore[method-assign]
        async with agent(settings, only=["heartbeat"]):
            await wait_for(lambda: agg.state.nodes.nodes.get(("test", "node-a")))
        await wait_for(writing.is_set, timeout=5)  # node_silent fired; the aggregator stops mid-write
    assert firing_rows_in(settings) == 1
    await wait_for(lambda: any(json.loads(data)["rule"] == "node_silent" for data in announced), timeout=2)
    await nc.close()


async def test_heartbeat_carries_the_slurm_jobs_of_the_node(settings: Settings) -> None:
    """The Slurm prolog's file reaches the aggregator: the node's row names the job, and the history keeps it."""
    jobs_dir = settings.state_dir / "jobs"
    jobs_dir.mkdir(parents=True)
    (jobs_dir / "4711.env").write_text(
        "SLURM_JOB_ID=4711\nSLURM_JOB_USER=alice\nSLURM_JOB_NODELIST=node-[a-b]\nSTARTED=1700000000\n"
    )
    heartbeat = settings.agent.collectors.heartbeat.model_copy(update={"jobs_dir": jobs_dir})
    collectors = settings.agent.collectors.model_copy(update={"heartbeat": heartbeat})
    settings = settings.model_copy(
        update={"agent": settings.agent.model_copy(update={"collectors": collectors})}
    )
    async with aggregator(settings) as agg, agent(settings, only=["heartbeat"]):
        await wait_for(lambda: (n := agg.state.nodes.nodes.get(("test", "node-a"))) and n.jobs)
        response = await query(settings, "nodes")
        [job] = response.rows[0]["jobs"]
        assert (job["job"], job["user"], job["nodes"]) == ("4711", "alice", "node-[a-b]")
        assert job["started_ns"] == 1700000000 * 10**9
    con = duckdb.connect(str(settings.db_path()), read_only=True)
    (jobs,) = con.execute("SELECT jobs FROM heartbeat WHERE node = 'node-a' LIMIT 1").fetchone()
    assert json.loads(jobs)[0]["job"] == "4711"
