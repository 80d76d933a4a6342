"""Answers over the NATS max_payload (1 MB) against a real nats-server and aggregator: paged, followed by the CLI."""

from __future__ import annotations

import json

import aiohttp

from ranksight.aggregator.runtime import Aggregator
from ranksight.aggregator.state import NS, NodeState
from ranksight.api.client import query
from ranksight.core.natsconn import connect
from ranksight.settings import Settings
from tests.support import aggregator, run_cli_async, settings_env

WIDE = "SELECT i, repeat('x', 1000) AS pad FROM range(3000) t(i)"  # ~3 MB: four messages


def add_nodes(agg: Aggregator, n: int) -> None:
    """``n`` synthetic nodes with the collector list and publisher counters a real heartbeat carries."""
    now = agg.state.now_ns or 1_700_000_000 * NS
    collectors = [{"name": c, "state": "ok", "source": "sysfs", "last_success_ns": now, "last_error": None,
                   "last_duration_s": 0.01, "runs": 100, "errors": 0}
                  for c in ("heartbeat", "ras", "inspector", "gpu", "nic", "probe", "gpu_probe", "app")]  # fmt: skip
    for i in range(n):
        node = f"node{i:05d}"
        agg.state.nodes.nodes[("test", node)] = NodeState(
            cluster="test", node=node, agent=f"{node}-agent", state="alive", last_seen_ns=now,
            expires_ns=now + 10**12, hostname=node, version="1.0", started_ns=now, collectors=collectors,
            publisher={"published": 1, "acked": 1, "retries": 0, "dropped": 0, "pending": 0},
        )  # fmt: skip


async def test_sql_over_max_payload_comes_in_pages_and_the_cli_follows(settings: Settings) -> None:
    async with aggregator(settings) as agg:
        nc = await connect(settings.nats, "test")
        try:
            msg = await nc.request(agg.subjects.api("sql"), json.dumps({"sql": WIDE}).encode(), timeout=20)
            first = json.loads(msg.data)
            assert len(msg.data) <= nc.max_payload and first["ok"] and first["next"]
            assert 0 < len(first["rows"]) < 3000
            again = await nc.request(
                agg.subjects.api("sql"), json.dumps({"next": "bogus"}).encode(), timeout=5
            )
            assert again.headers and again.headers["Nats-Service-Error-Code"] == "400"
            assert "run the query again" in json.loads(again.data)["error"]
        finally:
            await nc.close()

        env = settings_env(settings)
        whole = await run_cli_async("sql", WIDE, "--json", env=env)
        assert whole.returncode == 0, whole.stderr
        body = json.loads(whole.stdout)
        assert [r["i"] for r in body["rows"]] == list(range(3000)) and body["next"] is None
        # the documented cap: 10,000 rows (about 5 MB here) arrive whole, marked truncated
        capped = await run_cli_async("sql", "SELECT i, repeat('y', 400) AS pad FROM range(20000) t(i)", "--csv",
                                     env=env)  # fmt: skip
        assert capped.returncode == 0, capped.stderr
        assert len(capped.stdout.splitlines()) == 10_001 and "truncated at 10000 rows" in capped.stderr


async def test_one_row_over_max_payload_is_a_clear_422(settings: Settings) -> None:
    async with aggregator(settings):
        proc = await run_cli_async("sql", "SELECT repeat('x', 2000000) AS big", env=settings_env(settings))
        assert proc.returncode == 1 and "Traceback" not in proc.stderr
        assert "query failed: row 1 alone is" in proc.stderr and "max_payload" in proc.stderr


async def test_status_and_nodes_at_10k_nodes(settings: Settings) -> None:
    async with aggregator(settings) as agg:
        add_nodes(agg, 10_000)
        env = settings_env(settings)
        status = await run_cli_async("status", "--json", env=env)
        assert status.returncode == 0, status.stderr
        assert len(json.loads(status.stdout)["nodes"]) == 10_000
        nodes = await run_cli_async("nodes", env=env)
        assert nodes.returncode == 0, nodes.stderr
        assert len(nodes.stdout.splitlines()) == 10_001
        assert len((await query(settings, "nodes", {"state": "alive"})).rows) == 10_000
        # HTTP has no message limit: the whole answer in one body
        async with aiohttp.ClientSession() as http, http.get(f"{agg.http.url}/api/status") as resp:
            assert resp.status == 200 and len((await resp.json())["rows"]) == 10_000
