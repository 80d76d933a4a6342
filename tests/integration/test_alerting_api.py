"""Planned changes and maintenance windows end to end (real nats-server, aggregator, agent, CLI): a drained node's
silence raises nothing; a silenced alert is kept but not announced on the alert subjects; history shows the incident."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import duckdb
from prometheus_client.parser import text_string_to_metric_families

from ranksight.aggregator.alerts import Condition
from ranksight.aggregator.analysis.nodes import NodeSilentRule
from ranksight.aggregator.runtime import Aggregator
from ranksight.aggregator.state import LiveState
from ranksight.api.client import query
from ranksight.core.natsconn import connect
from ranksight.schemas.alerts import Alert
from ranksight.schemas.subjects import Subjects
from ranksight.settings import Settings
from tests.conftest import REPO
from tests.support import agent, aggregator, run_cli_async, running, settings_env, wait_for


async def test_drain_silence_and_history(settings: Settings) -> None:
    env = settings_env(settings)
    nc = await connect(settings.nats, name="test-alert-listener")
    announced: list[Alert] = []

    async def record(msg) -> None:  # type: ignore[no-untyped-def]
        announced.append(Alert.model_validate_json(msg.data))

    await nc.subscribe(Subjects(settings.subject_prefix).alerts_filter(None), cb=record)
    try:
        async with aggregator(settings) as agg:
            async with agent(settings, only=["heartbeat"]):
                await wait_for(lambda: agg.state.nodes.nodes.get(("test", "node-a")))
                drained = await run_cli_async("node", "drain", "node-a", "--reason", "maintenance", env=env)
                assert drained.returncode == 0, drained.stderr
                assert "node-a drained" in drained.stderr and "maintenance" in drained.stdout
            await wait_for(lambda: agg.state.nodes.nodes[("test", "node-a")].state == "gone", timeout=10)
            await agg.tick(agg.state.now_ns + 1)
            assert not agg.engine.active  # gone, but drained: nothing

            listed = await run_cli_async("node", "drains", "--json", env=env)
            assert [(r["node"], r["reason"]) for r in json.loads(listed.stdout)["rows"]] == [
                ("node-a", "maintenance")
            ]
            added = await run_cli_async(
                "silence", "add", "-m", "rule=node_silent", "--duration", "1h", "--json", env=env
            )
            [silence] = json.loads(added.stdout)["rows"]

            undrained = await run_cli_async("node", "drain", "node-a", "--undrain", env=env)
            assert undrained.returncode == 0, undrained.stderr
            [alert] = await wait_for(lambda: list(agg.engine.active.values()), timeout=5)
            assert alert.rule == "node_silent" and alert.silenced_by == [silence["id"]]
            firing = await run_cli_async("alerts", "--json", env=env)
            assert [r["silenced_by"] for r in json.loads(firing.stdout)["rows"]] == [[silence["id"]]]

            assert (await run_cli_async("silence", "expire", silence["id"], env=env)).returncode == 0
            async with agent(settings, only=["heartbeat"]):
                await wait_for(lambda: not agg.engine.active, timeout=10)
                await wait_for(lambda: announced, timeout=5)
                # The firing transition was silenced (not announced); the resolution, after the silence, was.
                assert [(a.rule, a.state) for a in announced] == [("node_silent", "resolved")]

                history = await run_cli_async("alerts", "--state", "all", "--since", "1h", "--json", env=env)
                rows = json.loads(history.stdout)["rows"]
                assert [r["state"] for r in rows] == ["resolved", "firing"]
                incidents = await run_cli_async("incidents", "--since", "1h", "--json", env=env)
                [incident] = json.loads(incidents.stdout)["rows"]
                assert incident["rule"] == "node_silent" and incident["node"] == "node-a"
                assert (
                    incident["state"] == "resolved" and incident["flaps"] == 0 and incident["duration_s"] > 0
                )
            bad = await run_cli_async("silence", "add", "-m", "pod=x", "--duration", "1h", env=env)
            assert bad.returncode == 1 and "unknown label 'pod'" in bad.stderr
    finally:
        await nc.close()
    con = duckdb.connect(str(settings.db_path()), read_only=True)
    rows = con.execute("SELECT silenced_by FROM alerts WHERE state = 'firing' ORDER BY updated_at").fetchall()
    assert rows[0] == (
        f'["{silence["id"]}"]',
    )  # then, after the test, node-a's agent stopped again: not silenced


def test_slurm_epilog_drains_a_node_slurm_is_draining(tmp_path: Path) -> None:
    """A stand-in ``scontrol`` prints the line real ``scontrol show node`` prints; a stand-in ``ranksight`` records
    how the epilog calls it."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    for state, expect in (
        ("IDLE", ""),
        ("IDLE+DRAIN", "node drain gpu-7 --reason Slurm drains gpu-7 (epilog of job 9)"),
    ):
        (bin_dir / "scontrol").write_text(
            f"#!/bin/sh\necho '   State={state} ThreadsPerCore=2 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A'\n"
        )
        (bin_dir / "ranksight").write_text(f'#!/bin/sh\necho "$@" > {calls}\n')
        for f in bin_dir.iterdir():
            f.chmod(0o755)
        calls.unlink(missing_ok=True)
        env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "9", "RANKSIGHT_NODE": "gpu-7",
               "RANKSIGHT_JOBS_DIR": str(tmp_path / "jobs")}  # fmt: skip
        proc = subprocess.run(
            ["sh", str(REPO / "deploy/slurm/epilog.sh")], env=env, capture_output=True, text=True
        )
        assert proc.returncode == 0
        assert (calls.read_text().strip() if calls.exists() else "") == expect


class _HotGpu:
    """Input for the test below: GPU 3 of node-a reads too hot for as long as ``hot`` says."""

    name = "gpu_overheating"
    for_s = clear_s = 0.0

    def __init__(self) -> None:
        self.hot = True

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        if self.hot:
            yield Condition(self.name, "warning", "test", "node-a GPU 3 overheating: edge 97C", node="node-a",
                            key="3", entity="gpu 3", evidence={"gpu": 3, "temperature_edge_c": 97.0})  # fmt: skip


async def test_a_node_with_a_firing_alert_is_degraded_and_metrics_count_by_rule(settings: Settings) -> None:
    rule = _HotGpu()
    env = settings_env(settings)
    async with running(Aggregator(settings, rules=[NodeSilentRule(), rule])) as agg:
        async with agent(settings, only=["heartbeat"]):
            await wait_for(lambda: agg.engine.active)

            async def degraded() -> list[dict[str, Any]]:
                return (await query(settings, "nodes", {"health": "warning"})).rows

            [row] = await wait_for(degraded)  # the node's health follows the alert on the next state read
            assert row["node"] == "node-a" and row["state"] == "alive" and row["health"] == "warning"
            assert [(a["rule"], a["entity"]) for a in row["alerts"]] == [("gpu_overheating", "gpu 3")]
            status = await run_cli_async("status", env=env)
            assert "warning" in status.stdout and "gpu_overheating" in status.stdout
            rule.hot = False
            await wait_for(lambda: not agg.engine.active)
            [row] = (await query(settings, "status")).rows
            assert row["health"] == "ok" and row["alerts"] == []
            rule.hot = True
            await wait_for(lambda: agg.engine.active)
            assert agg.http.url is not None
            async with aiohttp.ClientSession() as http, http.get(agg.http.url + "/metrics") as response:
                families = {f.name: f for f in text_string_to_metric_families(await response.text())}
            counted = {(s.labels["rule"], s.labels["state"]): s.value
                       for s in families["ranksight_alert_transitions"].samples if s.name.endswith("_total")}  # fmt: skip
            assert counted == {("gpu_overheating", "firing"): 2, ("gpu_overheating", "resolved"): 1}
            # /metrics speaks the same health words as nodes and the web page
            health = {s.labels["health"]: s.value for s in families["ranksight_node_health"].samples}
            assert health == {"ok": 0, "warning": 1, "critical": 0}
