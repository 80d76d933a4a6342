"""ranksight.client -> real agent socket -> real NATS -> aggregator + DuckDB file: order, timeouts, restarts, markers."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from ranksight.client import Client
from ranksight.settings import Settings
from tests.support import agent, aggregator, run_cli_async, settings_env, wait_for


@pytest.fixture
def app_settings(settings: Settings) -> Iterator[Settings]:
    """Settings with the app socket in a short private directory (Unix socket paths are limited to 107 bytes)."""
    with tempfile.TemporaryDirectory(prefix="rs-app-") as d:
        app = settings.agent.collectors.app
        app.socket_path = Path(d) / "app.sock"
        app.heartbeat_timeout_s, app.heartbeat_initial_timeout_s, app.section_timeout_s = 0.6, 0.6, 0.6
        yield settings


def rank_client(settings: Settings, monkeypatch: pytest.MonkeyPatch, rank: int, job: str = "77") -> Client:
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("SLURM_JOB_ID", job)
    return Client(str(settings.agent.collectors.app.socket_path), heartbeat_interval_s=0)


def firing(agg, rule: str) -> list:  # type: ignore[no-untyped-def]
    return [a for a in agg.engine.active.values() if a.rule == rule]


def db_rows(settings: Settings, sql: str) -> list[tuple]:  # type: ignore[type-arg]
    con = duckdb.connect(str(settings.db_path()), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


async def test_heartbeats_and_sections_arrive_in_order_per_rank(app_settings: Settings,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    app_settings.agent.collectors.app.heartbeat_timeout_s = 60
    async with aggregator(app_settings) as agg, agent(app_settings, only=["app"]):
        ranks = [rank_client(app_settings, monkeypatch, r) for r in (0, 1)]
        for step in range(1, 21):
            for c in ranks:
                with c.section("forward"):
                    c.heartbeat(step=step, loss=1.0 / step)
        await wait_for(lambda: agg.stats.records >= 2 * 60, timeout=10)
        assert all(c.stats()["dropped"] == 0 for c in ranks)
        assert {(st.rank, st.step) for st in agg.state.app.ranks.values()} == {(0, 20), (1, 20)}
    for rank in (0, 1):
        rows = db_rows(app_settings, f"SELECT n, event, step FROM app WHERE rank = {rank} ORDER BY seq, n")
        assert [r[0] for r in rows] == list(range(1, 61))  # every message, in send order
        assert [r[1] for r in rows[:4]] == ["section_open", "heartbeat", "section_close", "section_open"]
        assert [r[2] for r in rows if r[1] == "heartbeat"] == list(range(1, 21))
    (step_times,) = db_rows(app_settings, "SELECT count(step_time_s) FROM app WHERE event = 'heartbeat'")[0]
    assert step_times == 2 * 19  # step time in history for every heartbeat after the first


async def test_timeouts_fire_and_resolve(app_settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    async with aggregator(app_settings) as agg, agent(app_settings, only=["app"]):
        c = rank_client(app_settings, monkeypatch, 1)
        c.heartbeat(step=1)
        section = c.section("checkpoint_save")
        section.__enter__()
        await wait_for(lambda: firing(agg, "rank_heartbeat_overdue"), timeout=5)
        (alert,) = await wait_for(lambda: firing(agg, "rank_section_overdue"), timeout=5)
        assert (alert.job, alert.rank, alert.node, alert.evidence["section"]) == (
            "77",
            1,
            "node-a",
            "checkpoint_save",
        )
        assert "section 'checkpoint_save' open for" in alert.summary
        section.__exit__(None, None, None)
        c.heartbeat(step=2)
        await wait_for(lambda: not agg.engine.active, timeout=5)
    states = db_rows(app_settings, "SELECT rule, state FROM alerts ORDER BY updated_at, state DESC")
    assert sorted(states) == sorted([("rank_heartbeat_overdue", "firing"), ("rank_section_overdue", "firing"),
                                     ("rank_heartbeat_overdue", "resolved"), ("rank_section_overdue", "resolved")])  # fmt: skip


async def test_a_job_that_ends_normally_raises_nothing(app_settings: Settings,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    async with aggregator(app_settings) as agg, agent(app_settings, only=["app"]):
        c = rank_client(app_settings, monkeypatch, 0)
        c.start()
        with c.section("forward"):
            c.heartbeat(step=1)
        c.end()
        await wait_for(lambda: agg.stats.records >= 5, timeout=5)
        for _ in range(15):  # well past every timeout (0.6 s)
            await agg.tick(agg.state.now_ns + 100_000_000)
        assert agg.state.app.ranks == {} and not agg.engine.active


async def test_section_left_open_across_an_agent_restart(app_settings: Settings,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    app_settings.agent.collectors.app.heartbeat_timeout_s = 60
    async with aggregator(app_settings) as agg:
        c = rank_client(app_settings, monkeypatch, 0)
        section = c.section("checkpoint_save", timeout_s=1.5)
        async with agent(app_settings, only=["app"]) as first:
            section.__enter__()
            await wait_for(lambda: any(st.sections for st in agg.state.app.ranks.values()), timeout=5)
        assert not app_settings.agent.collectors.app.socket_path.exists()  # the agent removed its socket
        async with agent(app_settings, only=["app"]) as second:
            assert second.incarnation != first.incarnation
            c.heartbeat(
                step=5
            )  # reconnects to the new agent; the section is still open, the heartbeat says so
            (alert,) = await wait_for(lambda: firing(agg, "rank_section_overdue"), timeout=5)
            assert alert.evidence["section"] == "checkpoint_save" and alert.evidence["open_s"] > 1.5
            (st,) = agg.state.app.ranks.values()
            assert st.agent == second.incarnation and [s.name for s in st.sections.values()] == [
                "checkpoint_save"
            ]
            section.__exit__(None, None, None)
            await wait_for(lambda: not firing(agg, "rank_section_overdue"), timeout=5)


async def test_markers_cli(app_settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    async with aggregator(app_settings) as agg, agent(app_settings, only=["app"]):
        rank_client(app_settings, monkeypatch, 0, job="77").marker("epoch 1 started", epoch=1)
        rank_client(app_settings, monkeypatch, 0, job="88").marker("other job")
        rank_client(app_settings, monkeypatch, 1, job="77").marker("checkpoint saved", path="/ckpt/1")
        await wait_for(lambda: agg.stats.records >= 3, timeout=5)
        env = settings_env(app_settings)
        proc = await run_cli_async("markers", "--job", "77", "--json", env=env)
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        assert out["truncated"] is False
        assert [(m["text"], m["rank"], m["job"], m["node"]) for m in out["markers"]] == [
            ("epoch 1 started", 0, "77", "node-a"), ("checkpoint saved", 1, "77", "node-a")]  # fmt: skip
        assert out["markers"][0]["fields"] == {"epoch": 1} and out["markers"][0]["time"].endswith("Z")
        table = await run_cli_async("markers", env=env)
        assert table.returncode == 0, table.stderr
        lines = table.stdout.splitlines()
        assert lines[0].split() == ["TIME", "JOB", "RANK", "NODE", "TEXT"] and len(lines) == 4
        assert "other job" in table.stdout


async def test_markers_cli_without_aggregator_exits_1(app_settings: Settings) -> None:
    proc = await run_cli_async("markers", "--json", env=settings_env(app_settings), timeout=30)
    assert proc.returncode == 1 and "no aggregator answers" in proc.stderr
