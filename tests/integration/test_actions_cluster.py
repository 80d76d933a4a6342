"""Acting on findings in a running aggregator (real nats-server, DuckDB file) watching a simulated 32-node cluster: the
faulty nodes are acted on exactly once, also across a restart; a storm of 20 faulty nodes stops at the circuit breaker,
which alerts; dry-run acts on nothing and shows the plan; approval waits for ``ranksight action approve``; the alert
and the web page show what was done. The action is a real command (the finding as JSON on its stdin) writing a ledger
of the nodes it was run for."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from ranksight.aggregator.actions.settings import ActionSettings
from ranksight.aggregator.runtime import Aggregator
from ranksight.schemas.records import GpuRecord, HeartbeatRecord
from ranksight.settings import Settings
from tests.browser import CHROMIUM, Browser
from tests.http_cluster import Publisher, http_settings
from tests.support import aggregator, run_cli_async, settings_env, wait_for

NODES = [f"gpu{i:03}" for i in range(32)]
LEDGER_SCRIPT = ("import json, os, sys; finding = json.load(sys.stdin); "
                 "open(sys.argv[1], 'a').write(os.environ['RANKSIGHT_ACTION'] + ' ' + finding['node'] + '\\n')")  # fmt: skip


def with_actions(settings: Settings, ledger: Path, **actions: Any) -> Settings:
    policy = {"name": "ecc-drain", "rules": ["gpu_ecc_uncorrectable"], "action": "command"}
    cfg = ActionSettings(**{"mode": "enforce", "policies": [policy], "max_nodes_per_window": 3,
                            "max_cluster_fraction": 0.25, "retry_base_s": 0.1,
                            "command": {"argv": [sys.executable, "-c", LEDGER_SCRIPT, str(ledger)]}, **actions})  # fmt: skip
    agg = settings.aggregator.model_copy(update={"actions": cfg})
    return http_settings(settings.model_copy(update={"aggregator": agg}))


async def publish(pub: Publisher, faulty: set[str]) -> None:
    for i, node in enumerate(NODES):
        await pub.send(node, "heartbeat", [HeartbeatRecord(hostname=node, version="sim", pid=100 + i,
                                                           started_ns=time.time_ns())])  # fmt: skip
        gpu = GpuRecord(index=0, name="H100", utilization_pct=90.0, ecc_uncorrectable=2 if node in faulty else 0,
                        uuid=f"GPU-{i:08x}")  # fmt: skip
        await pub.send(node, "gpu", [gpu], ttl=60.0)


def ledger_lines(ledger: Path) -> list[str]:
    return ledger.read_text().splitlines() if ledger.exists() else []


def firing(agg: Aggregator, rule: str) -> set[str | None]:
    return {a.node for a in agg.engine.active.values() if a.rule == rule}


async def test_enforce_acts_on_exactly_the_faulty_nodes_once(settings: Settings, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    cfg = with_actions(settings, ledger)
    faulty = {"gpu005", "gpu017"}
    async with aggregator(cfg) as agg, Publisher(cfg) as pub:
        await publish(pub, faulty)
        await wait_for(lambda: firing(agg, "gpu_ecc_uncorrectable") == faulty, timeout=20)
        await wait_for(lambda: len(ledger_lines(ledger)) == 2, timeout=20)
        for _ in range(3):  # the findings persist: ticks go on, nothing more is done
            await publish(pub, faulty)
            await asyncio.sleep(0.5)
        await agg.actions.runner.wait_idle(10)
        assert sorted(ledger_lines(ledger)) == ["apply gpu005", "apply gpu017"]
        # the alert shows what was done, through the API and the CLI
        listed = await run_cli_async("alerts", "--json", env=settings_env(cfg))
        shown = {a["node"]: a["actions"] for a in json.loads(listed.stdout)["rows"]}
        assert [a["status"] for a in shown["gpu005"]] == ["done"] and shown["gpu005"][0][
            "action"
        ] == "command"
        actions = json.loads((await run_cli_async("action", "list", "--json", env=settings_env(cfg))).stdout)
        assert sorted((r["node"], r["status"]) for r in actions["rows"]) == [
            ("gpu005", "done"),
            ("gpu017", "done"),
        ]
        audit = json.loads((await run_cli_async("action", "audit", "--json", env=settings_env(cfg))).stdout)
        assert sorted(r["step"] for r in audit["rows"]) == [
            "done",
            "done",
            "queued",
            "queued",
            "running",
            "running",
        ]
        if CHROMIUM is not None:  # the web page's alert table names the action and where it stands
            async with Browser(tmp_path / "profile") as browser:
                html = await browser.view(f"{agg.http.url}/#overview", "overview")
                assert "command done (ecc-drain," in html
        done_id = next(r["id"] for r in actions["rows"] if r["node"] == "gpu005")
    # a restart: history is replayed, the alerts stay firing, the actions are known: nothing is done again
    async with aggregator(cfg) as agg, Publisher(cfg) as pub:
        await publish(pub, faulty)
        await wait_for(lambda: firing(agg, "gpu_ecc_uncorrectable") == faulty, timeout=20)
        for _ in range(4):
            await asyncio.sleep(0.5)
        await agg.actions.runner.wait_idle(10)
        assert sorted(ledger_lines(ledger)) == ["apply gpu005", "apply gpu017"]
        # an operator undoes one: the command runs with RANKSIGHT_ACTION=undo
        undo = await run_cli_async(
            "action", "undo", done_id, "--reason", "GPU replaced", env=settings_env(cfg)
        )
        assert undo.returncode == 0, undo.stderr
        await wait_for(lambda: "undo gpu005" in ledger_lines(ledger), timeout=20)
        await wait_for(lambda: agg.actions.planner.actions[done_id].status == "undone", timeout=10)


async def test_breaker_stops_a_storm_and_alerts(settings: Settings, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    cfg = with_actions(settings, ledger)
    storm = set(NODES[:20])
    async with aggregator(cfg) as agg, Publisher(cfg) as pub:
        await publish(pub, storm)
        await wait_for(lambda: firing(agg, "gpu_ecc_uncorrectable") == storm, timeout=30)
        await wait_for(lambda: firing(agg, "action_breaker_open") == {None}, timeout=20)
        await agg.actions.runner.wait_idle(20)
        assert len(ledger_lines(ledger)) == 3  # max_nodes_per_window 3 (25 % of 32 would be 8)
        statuses = [a.status for a in agg.actions.planner.actions.values()]
        assert statuses.count("breaker_open") == 17 and statuses.count("done") == 3
        [breaker] = [a for a in agg.engine.active.values() if a.rule == "action_breaker_open"]
        assert breaker.severity == "critical" and "17 action(s) not taken" in breaker.summary
        plan = json.loads((await run_cli_async("action", "plan", "--json", env=settings_env(cfg))).stdout)
        assert len(plan["rows"]) == 17 and plan["meta"]["breaker_open"] == [cfg.cluster]


async def test_dry_run_acts_on_nothing_and_plans(settings: Settings, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    cfg = with_actions(settings, ledger, mode="dry_run")
    faulty = {"gpu001", "gpu002"}
    async with aggregator(cfg) as agg, Publisher(cfg) as pub:
        await publish(pub, faulty)
        await wait_for(lambda: firing(agg, "gpu_ecc_uncorrectable") == faulty, timeout=20)
        await wait_for(lambda: len(agg.actions.planner.actions) == 2, timeout=10)
        await asyncio.sleep(1.0)
        await agg.actions.runner.wait_idle(10)
        assert ledger_lines(ledger) == []
        plan = await run_cli_async("action", "plan", env=settings_env(cfg))
        assert plan.returncode == 0 and "gpu001" in plan.stdout and "planned" in plan.stdout


async def test_approval_waits_for_an_operator(settings: Settings, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    cfg = with_actions(settings, ledger, mode="approve")
    async with aggregator(cfg) as agg, Publisher(cfg) as pub:
        await publish(pub, {"gpu009", "gpu010"})
        await wait_for(lambda: len(agg.actions.planner.actions) == 2, timeout=20)
        await asyncio.sleep(0.5)
        assert ledger_lines(ledger) == []
        ids = {a.node: a.id for a in agg.actions.planner.actions.values()}
        env = settings_env(cfg)
        assert (await run_cli_async("action", "approve", ids["gpu009"], env=env)).returncode == 0
        assert (await run_cli_async("action", "reject", ids["gpu010"], env=env)).returncode == 0
        await wait_for(lambda: ledger_lines(ledger) == ["apply gpu009"], timeout=20)
        again = await run_cli_async("action", "approve", ids["gpu010"], env=env)
        assert again.returncode != 0 and "rejected, not awaiting approval" in again.stderr
        audit = json.loads(
            (await run_cli_async("action", "audit", "--id", ids["gpu010"], "--json", env=env)).stdout
        )
        newest = audit["rows"][0]
        assert (newest["step"], newest["who"]) == ("rejected", os.environ.get("USER") or newest["who"])
