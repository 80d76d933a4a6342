"""A real 3-server NATS cluster (JetStream replicated 3 ways): agents and the aggregator connect with the server list
and survive the SIGKILL of any one server, the stream's leader included, with nothing lost or doubled."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import nats.errors
import pytest

from ranksight.aggregator.runtime import ensure_stream
from ranksight.core.natsconn import connect
from ranksight.core.natsserver import NatsCluster, NatsServer
from ranksight.settings import Settings
from tests.loadgen import SyntheticAgent
from tests.support import aggregator, consumer_drained, gpu_rows, ranksight_cmd, settings_env, wait_for

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "deploy/nats"
STORE_DIR_LINE = '  store_dir: "/var/lib/nats"\n'


async def stream_placement(settings: Settings, wait_s: float = 30) -> tuple[str, list[str], int]:
    nc = await connect(settings.nats, "test")
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                info = await nc.jetstream().stream_info(settings.aggregator.stream)
                break
            except (
                nats.errors.TimeoutError
            ):  # the JetStream API answers nothing while it elects a new meta leader
                if time.monotonic() > deadline:
                    raise
        assert info.cluster is not None
        return (
            info.cluster.leader or "",
            [r.name for r in info.cluster.replicas or []],
            info.config.num_replicas or 0,
        )
    finally:
        await nc.close()


def member(cluster: NatsCluster, name: str) -> NatsServer:
    return next(s for s in cluster.servers if s.cluster and s.cluster.name == name)


@pytest.mark.parametrize("victim", ["stream leader", "follower"])
async def test_losing_any_one_server_loses_nothing(
    cluster_settings: Settings, nats_cluster: NatsCluster, victim: str
) -> None:
    settings = cluster_settings
    nc = await connect(settings.nats, "test")
    await ensure_stream(nc.jetstream(), settings)
    await nc.close()
    leader, replicas, copies = await stream_placement(settings)
    assert copies == 3 and len(replicas) == 2, "the stream is kept on all three servers"
    killed = member(nats_cluster, leader if victim == "stream leader" else replicas[0])
    chunk = 200
    async with aggregator(settings):
        agents = [
            await SyntheticAgent(settings, f"sim-{i}", records_per_batch=chunk).start() for i in range(2)
        ]
        try:
            for round_ in range(60):
                for a in agents:
                    await a.emit(chunk)
                if round_ == 20:  # mid-stream: publishes in flight, the consumer mid-batch
                    assert killed.process is not None
                    killed.process.send_signal(signal.SIGKILL)
                    killed.process.wait(10)
                await asyncio.sleep(0.02)
            for a in agents:
                assert await a.flush(90), "an agent could not deliver after the loss of one server"
            await wait_for(lambda: consumer_drained(settings), timeout=90, interval=0.3)
        finally:
            for a in agents:
                await a.close()
    emitted = 2 * 60 * chunk
    assert gpu_rows(settings) == (emitted, emitted)
    new_leader, _, _ = await stream_placement(settings)
    assert killed.cluster is not None and new_leader not in ("", killed.cluster.name)


def test_up_runs_a_three_server_cluster(settings: Settings, tmp_path: Path) -> None:
    """``ranksight up --nats-cluster 3``: three servers, the stream on all three, the local agent seen alive."""
    env = settings_env(settings)
    env.pop("RANKSIGHT_NATS__URL")  # up starts its own NATS
    env.update(RANKSIGHT_AGGREGATOR__HTTP__PORT="0", RANKSIGHT_AGENT__COLLECTORS__HEARTBEAT__INTERVAL_S="0.2",
               RANKSIGHT_AGENT__COLLECTORS__PROBE__PORT="0")  # fmt: skip
    env.update(
        {f"RANKSIGHT_AGENT__COLLECTORS__{c}__ENABLED": "false" for c in ("RAS", "INSPECTOR", "GPU", "NIC")}
    )
    cmd = ranksight_cmd("up", "--state-dir", str(tmp_path / "up"), "--nats-port", "0", "--nats-cluster", "3")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        lines: dict[str, str] = {}
        deadline = time.monotonic() + 90
        while "http" not in lines and time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, f"up exited: {proc.stderr.read() if proc.stderr else ''}"
            if match := re.match(r"^\s+(nats|http)\s+(\S+)(.*)$", line.rstrip()):
                lines[match.group(1)] = match.group(2) + match.group(3)
        urls = lines["nats"].split()[0].split(",")
        assert len(urls) == 3 and "stream and KV on 3 servers" in lines["nats"]
        body: dict[str, Any] = {}
        while time.monotonic() < deadline and not body.get("rows"):
            with urllib.request.urlopen(f"{lines['http']}/api/status", timeout=5) as resp:
                body = json.loads(resp.read())
            time.sleep(0.2)
        assert body["rows"][0]["state"] in ("alive", "degraded")
        cluster_view = settings.model_copy(
            update={"nats": settings.nats.model_copy(update={"url": ",".join(urls)})}
        )
        _, replicas, copies = asyncio.run(stream_placement(cluster_view))
        assert copies == 3 and len(replicas) == 2
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    assert proc.returncode == 130


def test_the_shipped_cluster_config_forms_a_jetstream_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The three servers run the shipped files (the cluster file including the single-server one: users, permissions,
    route authentication); only addresses, names and store dirs come from the command line (the server refuses a
    store dir twice, so that one line goes). Each reports JetStream healthy and sees its two peers."""
    text = (SHIPPED / "nats-server.conf").read_text()
    assert STORE_DIR_LINE in text
    (tmp_path / "nats-server.conf").write_text(text.replace(STORE_DIR_LINE, ""))
    conf = tmp_path / "nats-cluster.conf"
    conf.write_text((SHIPPED / "nats-cluster.conf").read_text())
    monkeypatch.setenv(
        "NATS_SERVER_NAME", "from-the-file"
    )  # the file's variable; the command line names each member
    cluster = NatsCluster(tmp_path / "nats", 3, config_file=conf, route_auth="route:change-me-route").start()
    try:
        for server in cluster.servers:
            assert server.cluster is not None
            port = server.cluster.monitor_port
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/routez", timeout=5) as answer:
                routes = json.load(answer)
            assert routes["num_routes"] >= 2
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/jsz", timeout=5) as answer:
                jsz = json.load(answer)
            assert jsz["meta_cluster"]["cluster_size"] == 3
    finally:
        cluster.stop()
    assert os.environ["NATS_SERVER_NAME"] == "from-the-file"
