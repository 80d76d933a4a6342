"""The aggregator feeds a real Alertmanager (Debian's ``prometheus-alertmanager``, run with the shipped example
``deploy/alertmanager/alertmanager.yml``): an alert fired while Alertmanager is still down reaches it once it is up, is
grouped, is silenced by ``ranksight silence add``, and resolves."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from ranksight.aggregator.alertmanager import AlertmanagerPush
from ranksight.aggregator.alerts import INHIBITIONS
from ranksight.aggregator.component_settings import AlertmanagerSettings
from ranksight.core.aio import cancel_all
from ranksight.schemas.alerts import Alert
from ranksight.settings import Settings
from tests.conftest import REPO
from tests.deploy_support import free_port
from tests.support import agent, aggregator, run_cli_async, settings_env, wait_for

CONFIG = REPO / "deploy/alertmanager/alertmanager.yml"
BINARY = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


def test_example_config_inhibits_as_the_aggregator_does() -> None:
    rules = yaml.safe_load(CONFIG.read_text())["inhibit_rules"]
    assert len(rules) == len(INHIBITIONS)
    for rule, ours in zip(rules, INHIBITIONS, strict=True):
        assert rule["source_matchers"] == [f'rule="{ours.source}"']
        spared = "|".join([ours.source, *sorted(ours.spare - {ours.source})])
        assert rule["target_matchers"] == [f'rule!~"{spared}"']
        assert rule["equal"] == list(ours.equal)


@contextlib.asynccontextmanager
async def alertmanager(tmp_path: Path, port: int) -> AsyncIterator[str]:
    proc = subprocess.Popen(
        [BINARY or "", f"--config.file={CONFIG}", f"--storage.path={tmp_path / 'am'}",
         f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        await wait_for(lambda: _get(url, "/-/ready") is not None or proc.poll() is not None, timeout=30)
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _get(url: str, path: str) -> Any:
    try:
        with urllib.request.urlopen(url + path, timeout=2) as response:
            body = response.read()
    except OSError:
        return None
    return json.loads(body) if body.strip().startswith((b"[", b"{")) else body


async def _am(url: str, path: str) -> Any:
    return await asyncio.to_thread(_get, url, path)


def _silent(alerts: list[dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    return {a["labels"]["node"]: a for a in alerts or [] if a["labels"]["alertname"] == "node_silent"}


@pytest.mark.skipif(
    BINARY is None, reason="prometheus-alertmanager is not installed (Debian: prometheus-alertmanager)"
)
async def test_alerts_reach_alertmanager_grouped_silenced_and_resolved(
    settings: Settings, tmp_path: Path
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    settings.aggregator.alerts.alertmanager.urls = [url]
    settings.aggregator.alerts.alertmanager.resend_s = 1.0
    node_b = settings.model_copy(deep=True)
    node_b.agent.node = "node-b"
    async with aggregator(settings) as agg:
        async with agent(settings, only=["heartbeat"]), agent(node_b, only=["heartbeat"]):
            await wait_for(lambda: len(agg.state.nodes.nodes) == 2)
        # Both agents stopped while Alertmanager is down: the alerts wait for it, nothing is lost.
        await wait_for(
            lambda: sum(a.rule == "node_silent" for a in agg.engine.active.values()) == 2, timeout=10
        )
        await wait_for(lambda: agg.alertmanager.targets[0].stats["failures"] >= 1, timeout=10)
        async with alertmanager(tmp_path, port):
            firing = await wait_for(lambda: _am_sync(url, "/api/v2/alerts", 2), timeout=20)
            a = firing["node-a"]
            assert a["labels"] | {"fingerprint": "-"} == {"alertname": "node_silent", "rule": "node_silent",
                                                         "severity": "warning", "cluster": "test", "node": "node-a",
                                                         "fingerprint": "-"}  # fmt: skip
            assert a["annotations"]["summary"].startswith("node node-a is stale")
            assert json.loads(a["annotations"]["evidence"])["agent"]
            assert a["annotations"]["url"].endswith("/?search=node-a") and a["status"]["state"] == "active"
            groups = await _am(url, "/api/v2/alerts/groups")
            [group] = [g for g in groups if g["labels"].get("rule") == "node_silent"]
            assert group["labels"] == {"cluster": "test", "rule": "node_silent"} and len(group["alerts"]) == 2

            env = settings_env(settings)
            added = await run_cli_async("silence", "add", "--matcher", "node=node-a", "--duration", "1h",
                                        "--comment", "reboot", "--json", env=env)  # fmt: skip
            assert added.returncode == 0, added.stderr
            [silence] = json.loads(added.stdout)["rows"]
            assert silence["state"] == "active" and silence["matchers"] == "node=node-a"

            def suppressed() -> bool:
                now = _silent(_get(url, "/api/v2/alerts"))
                return now.get("node-a", {}).get("status", {}).get("state") == "suppressed"

            await wait_for(suppressed, timeout=15)
            [am_silence] = [s for s in await _am(url, "/api/v2/silences") if s["status"]["state"] == "active"]
            assert f"[ranksight:{silence['id']}]" in am_silence["comment"]
            assert _silent(await _am(url, "/api/v2/alerts"))["node-b"]["status"]["state"] == "active"

            listed = await run_cli_async("silence", "list", "--json", env=env)
            assert [r["id"] for r in json.loads(listed.stdout)["rows"]] == [silence["id"]]
            expired = await run_cli_async("silence", "expire", silence["id"], env=env)
            assert expired.returncode == 0, expired.stderr
            await wait_for(
                lambda: not any(s["status"]["state"] == "active" for s in _get(url, "/api/v2/silences"))
            )

            # node-b comes back: its alert resolves in Alertmanager (it leaves the list of active alerts).
            async with agent(node_b, only=["heartbeat"]):
                await wait_for(lambda: set(_silent(_get(url, "/api/v2/alerts"))) == {"node-a"}, timeout=20)
    assert agg.alertmanager.targets[0].stats["alerts_sent"] > 0


def _am_sync(url: str, path: str, count: int) -> dict[str, dict[str, Any]] | None:
    found = _silent(_get(url, path))
    return found if len(found) == count else None


class _Flaky:
    """A stand-in Alertmanager endpoint on real TCP: answers 503 while ``down``, records what it accepts."""

    def __init__(self) -> None:
        self.down = True
        self.received: list[dict[str, Any]] = []

    async def alerts(self, request: web.Request) -> web.Response:
        if self.down:
            return web.Response(status=503, text="unavailable")
        self.received += await request.json()
        return web.Response(status=200)

    async def silences(self, request: web.Request) -> web.Response:
        return web.json_response([])


@contextlib.asynccontextmanager
async def _flaky() -> AsyncIterator[tuple[_Flaky, str]]:
    flaky = _Flaky()
    app = web.Application()
    app.router.add_post("/api/v2/alerts", flaky.alerts)
    app.router.add_get("/api/v2/silences", flaky.silences)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield flaky, f"http://{host}:{port}"
    finally:
        await runner.cleanup()


def _resolved() -> Alert:
    return Alert(rule="nic_errors_rising", severity="warning", fingerprint="f1", state="resolved", cluster="c",
                 node="n1", entity="nic mlx5_0", summary="s", started_at="2026-01-01T00:00:00.000000Z",
                 resolved_at="2026-01-01T00:05:00.000000Z", updated_at="2026-01-01T00:05:00.000000Z")  # fmt: skip


async def test_a_resolution_made_while_alertmanager_is_down_is_delivered_later() -> None:
    async with _flaky() as (flaky, url):
        push = AlertmanagerPush(
            AlertmanagerSettings(urls=[url], resend_s=0.5, max_attempts=1000), lambda: None
        )
        task = asyncio.create_task(push.run(lambda: [], lambda: []))
        try:
            push.transitions([_resolved()])
            await wait_for(lambda: push.targets[0].stats["failures"] >= 3, timeout=10)
            assert len(push.targets[0].queue) == 1 and flaky.received == []
            flaky.down = False
            await wait_for(lambda: flaky.received, timeout=10)
            [body] = flaky.received
            assert (
                body["endsAt"] == "2026-01-01T00:05:00.000000Z" and body["labels"]["entity"] == "nic mlx5_0"
            )
            # the server records the body before it answers; the sender dequeues once the answer is in
            await wait_for(lambda: not push.targets[0].queue, timeout=10)
        finally:
            await cancel_all([task])


async def test_retries_are_bounded() -> None:
    async with _flaky() as (_, url):
        push = AlertmanagerPush(AlertmanagerSettings(urls=[url], resend_s=0.2, max_attempts=2), lambda: None)
        task = asyncio.create_task(push.run(lambda: [], lambda: []))
        try:
            push.transitions([_resolved()])
            await wait_for(lambda: push.targets[0].stats["dropped"] == 1, timeout=10)
            assert not push.targets[0].queue and push.targets[0].stats["failures"] == 2
        finally:
            await cancel_all([task])
