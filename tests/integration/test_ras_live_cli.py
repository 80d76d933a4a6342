"""`ranksight ras status|monitor` as a process against the fake RAS server over TCP: the JSON shape of `parse ras
--json`, health as the exit status (0 healthy, 1 degraded/failed, 2 usage, 3 no endpoint), NCCL_RAS_ADDR, the
collector's settings, MONITOR groups and events."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from pathlib import Path

from ranksight.schemas.records.ras import RasEvent
from ranksight.simulate.ras_server import PROFILES, FakeRasServer
from tests.conftest import FIXTURES
from tests.support import run_cli, run_cli_async, wait_for

UPSTREAM = FIXTURES / "ras/upstream-server"
HEALTHY = (UPSTREAM / "ref_2.28.9_text_healthy.txt").read_bytes()
HEALTHY_JSON = (UPSTREAM / "ref_2.28.9_json_healthy.txt").read_bytes()
FULL, FULL_JSON = (
    (UPSTREAM / "ref_2.30.7_text_full.txt").read_bytes(),
    (UPSTREAM / "ref_2.30.7_json_full.txt").read_bytes(),
)


def env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RANKSIGHT_", "NCCL_RAS_"))}
    return {**base, **extra}


async def test_status_healthy_exits_0_with_the_parse_ras_json_shape(tmp_path: Path) -> None:
    async with FakeRasServer(PROFILES["2.29"], HEALTHY, HEALTHY_JSON) as server:
        proc = await run_cli_async("ras", "status", "--addr", server.address, "--json", env=env())
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        (tmp_path / "capture.txt").write_bytes(HEALTHY)
        offline = json.loads(run_cli("parse", "ras", str(tmp_path / "capture.txt"), "--json").stdout)
        assert set(out) == set(offline) and out["health"] == "ok"
        assert out["communicators"][0]["op_counts"]  # the JSON status's detail, merged in
        table = await run_cli_async(
            "ras", "status", env=env(NCCL_RAS_ADDR=server.address)
        )  # the default address
        assert (
            table.returncode == 0
            and f"endpoint {server.address}" in table.stdout
            and "health ok" in table.stdout
        )
    assert server.commands.count("TIMEOUT 5") == 4  # two runs, each a text and a JSON status


async def test_status_of_a_failed_job_exits_1_and_verbose_shows_the_lines() -> None:
    async with FakeRasServer(PROFILES["2.29"], FULL, FULL_JSON) as server:
        proc = await run_cli_async("ras", "status", "--addr", server.address, "--json", env=env())
        assert proc.returncode == 1, proc.stderr
        out = json.loads(proc.stdout)
        assert out["health"] == "failed" and [p["pid"] for p in out["dead_processes"]] == [3002]
        verbose = await run_cli_async("ras", "status", "--addr", server.address, "--verbose",
                                      env=env(RANKSIGHT_AGENT__COLLECTORS__RAS__COLLECTIVE_TIMEOUT_S="7"))  # fmt: skip
        assert verbose.returncode == 1
        assert "  Process 3002 on node 10.0.0.3 managing GPU 1" in verbose.stdout.splitlines()
        assert (
            "VERBOSE STATUS" in server.commands and "TIMEOUT 7" in server.commands
        )  # the collector's settings


def test_no_endpoint_exits_3_and_usage_errors_exit_2() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = run_cli("ras", "status", "--addr", f"127.0.0.1:{port}", env=env())
    assert proc.returncode == 3 and "no RAS endpoint" in proc.stderr
    assert run_cli("ras", "status", "--addr", "host:notaport", env=env()).returncode == 2
    assert run_cli("ras", "monitor", "--groups", "bogus", env=env()).returncode == 2
    assert run_cli("ras", "status", "--bogus", env=env()).returncode == 2


async def test_monitor_prints_events_of_the_requested_groups_until_the_job_ends() -> None:
    events = [RasEvent(time="2026-11-23 00:01:44", event="PEER_DEAD", host="10.0.0.3", pid=3002, gpus=[1]),
              RasEvent(time="2026-11-23 00:01:44", event="PEER_UNRESPONSIVE", host="10.0.0.2", pid=2001, gpus=[0],
                       nvml_gpus=[2], details="peer not responding for 5s (keepalive warning)"),
              RasEvent(time="2026-11-23 00:01:44", event="PEER_DEAD", addr="10.9.9.9<1234>")]  # fmt: skip
    async with FakeRasServer(PROFILES["2.29"], HEALTHY, HEALTHY_JSON) as server:
        task = asyncio.ensure_future(
            run_cli_async(
                "ras", "monitor", "--addr", server.address, "--json", "--groups", "lifecycle", env=env()
            )
        )
        await wait_for(lambda: server._monitors, timeout=20)
        for event in events:
            await server.push_event(event)
        await asyncio.sleep(0.3)
        await server.stop()  # the job ends: the endpoint closes
        proc = await task
    assert proc.returncode == 0, proc.stderr
    got = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [(e["event"], e["pid"], e["addr"]) for e in got] == [
        ("PEER_DEAD", 3002, None),
        ("PEER_DEAD", None, "10.9.9.9<1234>"),
    ]


async def test_monitor_on_a_release_without_it_exits_1() -> None:
    async with FakeRasServer(PROFILES["2.26"], HEALTHY) as server:
        proc = await run_cli_async("ras", "monitor", "--addr", server.address, env=env())
    assert proc.returncode == 1 and "2.29" in proc.stderr
