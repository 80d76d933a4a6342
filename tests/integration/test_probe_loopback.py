"""Probe client and server over real TCP on loopback; the by-hand CLI; agents + aggregator building the link map."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time

import pytest

from ranksight.agent.probe.client import ProbeBudget, ProbeError, ProbeResult, run_probe
from ranksight.agent.probe.server import ProbeServer, ServerLimits, parse_networks
from ranksight.settings import Settings
from tests.support import agent, aggregator, ranksight_cmd, run_cli_async, settings_env, wait_for

FAST = ProbeBudget(echo_count=20, bytes=8 * 1024**2, seconds=0.2)
# Bound by time, not bytes: each phase spans many of the hog's 20 ms cycles (a phase of one or two cycles, as 8 MiB
# on a fast loopback is, measures the stall share too coarsely to judge)
TIMED = ProbeBudget(echo_count=20, bytes=1024**3, seconds=0.3)


async def test_probe_measures_rtt_jitter_and_both_directions() -> None:
    server = await ProbeServer("127.0.0.1", 0).start()
    try:
        result = await run_probe("127.0.0.1", server.port, FAST)
    finally:
        await server.stop()
    assert result.rtt_us is not None and 0 < result.rtt_us < 50_000
    assert result.jitter_us is not None and result.jitter_us >= 0
    assert result.upload_bps and result.upload_bps > 1e8  # loopback moves far more than 100 Mbit/s
    assert result.download_bps and result.download_bps > 1e8
    assert result.bytes > 2 * 64 * 20
    assert server.served == 3


async def test_a_probe_on_a_busy_host_says_so_beside_its_rates() -> None:
    """Both ends in this loop; a task hogging it (as a busy or CPU-starved host would) shows as each end's stall."""
    server = await ProbeServer("127.0.0.1", 0).start()

    async def hog() -> None:
        while True:
            time.sleep(0.015)  # noqa: ASYNC251 -- blocking the loop is the point: other work holds the host
            await asyncio.sleep(0.005)

    try:
        quiet = await run_probe("127.0.0.1", server.port, TIMED)
        hogging = asyncio.create_task(hog())
        try:
            busy = await run_probe("127.0.0.1", server.port, TIMED)
        finally:
            hogging.cancel()
    finally:
        await server.stop()
    assert quiet.src_stall_share is not None and quiet.dst_stall_share is not None
    assert busy.src_stall_share is not None and busy.dst_stall_share is not None
    assert busy.src_stall_share > 0.4 and busy.dst_stall_share > 0.4, (quiet, busy)
    light = await _light_probe()  # no rate measured: nothing to judge
    assert light.src_stall_share is None and light.dst_stall_share is None


async def _light_probe() -> ProbeResult:
    server = await ProbeServer("127.0.0.1", 0).start()
    try:
        return await run_probe("127.0.0.1", server.port, ProbeBudget(echo_count=5, bandwidth=False))
    finally:
        await server.stop()


async def test_server_clamps_grants_to_its_limits() -> None:
    server = await ProbeServer(
        "127.0.0.1", 0, limits=ServerLimits(max_bytes=1024**2, max_echo_count=5)
    ).start()
    try:
        result = await run_probe(
            "127.0.0.1", server.port, ProbeBudget(echo_count=500, bytes=64 * 1024**2, seconds=2)
        )
    finally:
        await server.stop()
    assert result.bytes == 2 * 64 * 5 + 2 * 1024**2


async def test_server_refuses_peers_outside_allow_list() -> None:
    server = await ProbeServer("127.0.0.1", 0, parse_networks(["192.0.2.0/24"])).start()
    try:
        with pytest.raises(ProbeError, match="refused this client"):
            await run_probe("127.0.0.1", server.port, FAST)
    finally:
        await server.stop()
    assert server.rejected == 1 and server.served == 0


async def test_server_answers_busy_beyond_max_concurrent() -> None:
    server = await ProbeServer(
        "127.0.0.1", 0, limits=ServerLimits(max_concurrent=1, idle_timeout_s=2)
    ).start()
    try:
        _, hog = await asyncio.open_connection("127.0.0.1", server.port)  # holds the one slot, says nothing
        await wait_for(lambda: server.active == 1, timeout=2)
        with pytest.raises(ProbeError, match="is busy"):
            await run_probe("127.0.0.1", server.port, FAST)
        hog.close()
        await wait_for(
            lambda: server.active == 0, timeout=5
        )  # the silent client is dropped after handshake_timeout_s
        assert (await run_probe("127.0.0.1", server.port, FAST)).rtt_us is not None
    finally:
        await server.stop()


async def test_cli_serve_and_run_json() -> None:
    serve = subprocess.Popen(
        ranksight_cmd("probe", "serve", "--port", "0", "--allow", "127.0.0.0/8"),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert serve.stderr is not None
        line = await asyncio.wait_for(asyncio.to_thread(serve.stderr.readline), 20)
        port = int(line.split("probe server on port ")[1].split(",")[0])
        proc = await run_cli_async("probe", "run", f"127.0.0.1:{port}", "--json", "--seconds", "0.2")
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        assert set(out) == {"rtt_us", "jitter_us", "upload_bps", "download_bps", "bytes", "duration_s",
                            "src_stall_share", "dst_stall_share"}  # fmt: skip
        assert out["upload_bps"] > 0 and out["download_bps"] > 0
        bad = await run_cli_async("probe", "run", "nonsense")
        assert bad.returncode == 2 and "HOST:PORT" in bad.stderr
    finally:
        serve.terminate()
        serve.wait(10)
    closed = await run_cli_async("probe", "run", f"127.0.0.1:{port}", "--json")
    assert closed.returncode == 1 and "cannot probe" in closed.stderr


def _node_settings(settings: Settings, node: str) -> Settings:
    probe = {"port": 0, "advertise": ["127.0.0.1"], "interval_s": 0.5, "ttl_s": 60}
    agent_cfg = settings.agent.model_copy(update={"node": node})
    agent_cfg.collectors = agent_cfg.collectors.model_copy(
        update={"probe": agent_cfg.collectors.probe.model_copy(update=probe)}
    )
    return settings.model_copy(update={"agent": agent_cfg})


def _fast_planner(settings: Settings) -> Settings:
    probes = settings.aggregator.probes.model_copy(update={"round_pause_s": 0.1, "seconds": 0.2,
                                                           "bytes": 4 * 1024**2, "echo_count": 10})  # fmt: skip
    return settings.model_copy(
        update={"aggregator": settings.aggregator.model_copy(update={"probes": probes})}
    )


async def test_agents_and_planner_fill_the_link_map(settings: Settings) -> None:
    settings = _fast_planner(settings)
    async with aggregator(settings) as agg:
        async with agent(_node_settings(settings, "node-a"), only=["probe"]), \
                   agent(_node_settings(settings, "node-b"), only=["probe"]):  # fmt: skip
            proc = await wait_for(lambda: _links_cli(settings), timeout=15)
        sql = "SELECT src, dst, measured, expires FROM link_history"
        rows = await agg.store.call(lambda: list(agg.store.rows(sql)))
    assert rows and rows[0]["expires"] > rows[0]["measured"]
    links = proc["links"]
    assert [(r["src"], r["dst"], r["dst_addr"], r["state"]) for r in links] == [
        ("node-a", "node-b", "127.0.0.1", "fresh")
    ]
    assert links[0]["error"] is None, json.dumps(links[0])
    assert links[0]["upload_bps"] > 0 and links[0]["rtt_us"] > 0 and links[0]["error"] is None


async def _links_cli(settings: Settings) -> dict | None:
    proc = await run_cli_async("links", "--json", env=settings_env(settings))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    return out if out["links"] else None
