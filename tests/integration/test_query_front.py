"""The query front of sharded aggregators: three real aggregators on one real nats-server, each ingesting its own
partition of the event stream into its own DuckDB; any of them answers the shared endpoints for the whole cluster, and
names the shard that does not answer (shards prepared as in ``tests/shard_support.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path

import aiohttp
import nats

from ranksight.aggregator.api.endpoints import ENDPOINTS
from ranksight.api.client import query
from ranksight.schemas.subjects import Subjects
from ranksight.settings import Settings
from tests.shard_support import NODES, SHARDS, prepare_shards, publish_heartbeats, put_members, shard_settings
from tests.support import aggregator, run_cli_async, settings_env, wait_for


async def own_nodes(cfg: Settings, shard_id: str) -> set[str]:
    """The nodes one shard answers for on its own subject."""
    nc = await nats.connect(cfg.nats.url)
    try:
        msg = await nc.request(Subjects(cfg.subject_prefix).shard_api(shard_id, "nodes"), b"{}", timeout=5)
        return {r["node"] for r in json.loads(msg.data)["rows"]}
    finally:
        await nc.close()


async def test_any_shard_answers_for_the_cluster_and_names_a_stopped_shard(
    tmp_path: Path, settings: Settings
) -> None:
    cfgs = [shard_settings(settings, tmp_path, s) for s in SHARDS]
    await prepare_shards(cfgs, list(SHARDS))
    async with contextlib.AsyncExitStack() as stack:
        aggs = [await stack.enter_async_context(aggregator(c)) for c in cfgs[:2]]
        async with aggregator(cfgs[2]) as shard_c:
            aggs.append(shard_c)
            await publish_heartbeats(cfgs[0])
            await wait_for(lambda: sum(len(a.state.nodes.nodes) for a in aggs) == len(NODES), timeout=30)
            owned = {s: await own_nodes(cfgs[0], s) for s in SHARDS}
            assert all(owned.values()), owned  # every shard ingested some nodes: its partition's
            whole = await query(cfgs[0], "nodes")
            assert [r["node"] for r in whole.rows] == NODES  # the union, sorted after the merge
            assert not whole.partial and whole.missing_shards == []
            assert set(whole.meta["shards"]) == set(SHARDS)
            status = await query(cfgs[0], "status")
            assert {r["node"] for r in status.rows} == set(NODES) and status.meta["shards"]["c"]["cluster"]
        await put_members(cfgs[0], ["c"])  # shard c gone as if killed: its member key stays until the TTL
        answered = set(owned["a"]) | owned["b"]
        for _ in range(4):  # whichever of a and b takes the request answers the same
            partial = await query(cfgs[0], "nodes")
            assert partial.partial and partial.missing_shards == ["c"], partial
            assert {r["node"] for r in partial.rows} == answered
            assert "no responder" in partial.meta["shard_errors"]["c"]
        async with aiohttp.ClientSession() as http, http.get(f"{aggs[0].http.url}/api/status") as resp:
            body = await resp.json()
            assert body["partial"] and body["missing_shards"] == ["c"]
            assert {r["node"] for r in body["rows"]} == answered
        env = settings_env(cfgs[0])
        out = await run_cli_async("nodes", "--json", env=env)
        assert out.returncode == 0, out.stderr
        printed = json.loads(out.stdout)
        assert printed["partial"] is True and printed["missing_shards"] == ["c"]
        table = await run_cli_async("nodes", env=env)
        assert table.returncode == 0 and "partial answer: shards that did not answer: c" in table.stderr


async def test_a_shard_slower_than_the_deadline_is_left_out(tmp_path: Path, settings: Settings) -> None:
    deadline = 0.5
    cfg = shard_settings(settings, tmp_path, "a", query_deadline_s=deadline)
    await prepare_shards([cfg], ["a", "slow", "gone"])
    nc = await nats.connect(cfg.nats.url)
    released = asyncio.Event()

    async def too_late(msg: nats.aio.msg.Msg) -> None:  # a shard that answers, but long after the deadline
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(released.wait(), 30)
        await msg.respond(b'{"ok": true, "rows": [{"cluster": "test", "node": "late"}]}')

    await nc.subscribe(Subjects(cfg.subject_prefix).shard_api("slow", "nodes"), cb=too_late)
    try:
        async with aggregator(cfg) as agg:
            await publish_heartbeats(cfg)
            await wait_for(lambda: agg.state.nodes.nodes)
            started = time.monotonic()
            answer = await agg.front.call(ENDPOINTS["nodes"], {})
            took = time.monotonic() - started
            assert answer.ok and answer.partial and answer.missing_shards == ["gone", "slow"]
            assert "no answer within 0.5s" in answer.meta["shard_errors"]["slow"]
            assert "late" not in {r["node"] for r in answer.rows} and answer.rows
            assert took < 10, took  # the slow shard was not waited for
            # a bad parameter is refused by the front itself, as when not sharded
            refused = await query(cfg, "nodes", {"state": "sleeping"})
            assert not refused.ok and "state" in (refused.error or "")
    finally:
        released.set()
        await nc.close()
