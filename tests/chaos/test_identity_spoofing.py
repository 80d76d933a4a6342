"""The shipped NATS config (``deploy/nats/nats-server.conf``) end to end: a real nats-server runs that very file (only
its port and store dir are replaced, by the command line), and each role connects with the file's own credentials.

An agent with node credentials publishes its events, takes the RAS lease (JetStream KV) and answers its status; the
aggregator and the read-only operator user can query; a node cannot publish as another node, and the operator user
cannot publish events or call ``export`` (publish violations, and nothing of it reaches history).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from ranksight.api.client import query
from ranksight.core.config import NatsSettings
from ranksight.core.natsconn import connect
from ranksight.core.natsserver import NatsServer
from ranksight.schemas.subjects import Subjects, inbox_prefix
from ranksight.settings import Settings
from ranksight.simulate.inspector import JobSpec, write_job
from ranksight.simulate.ras_server import PROFILES, FakeRasServer
from tests.conftest import FIXTURES, REPO
from tests.ras_support import fake_proc
from tests.support import agent, aggregator, wait_for

pytestmark = pytest.mark.chaos

SHIPPED = REPO / "deploy/nats/nats-server.conf"
STORE_DIR_LINE = 'store_dir: "/var/lib/nats"'
CLUSTER, NODE, OTHER = "prod-a", "gpu-node-001", "gpu-node-002"


@pytest.fixture
def shipped(tmp_path: Path) -> Iterator[NatsServer]:
    # Templated for the store dir only: the file's store_dir goes (the server refuses it twice) and NatsServer's
    # -sd and -p give a private store and a free port; everything else is the file as shipped.
    text = SHIPPED.read_text()
    assert STORE_DIR_LINE in text
    conf = tmp_path / "nats-server.conf"
    conf.write_text(text.replace(STORE_DIR_LINE, ""))
    server = NatsServer(tmp_path / "shipped-nats", config_file=conf).start()
    try:
        yield server
    finally:
        server.stop()


def as_user(settings: Settings, server: NatsServer, user: str, password: str) -> Settings:
    s = settings.model_copy(deep=True)
    s.cluster = CLUSTER
    s.nats = NatsSettings(url=server.url, user=user, password=password, inbox_prefix=inbox_prefix(user))
    return s


async def publish_violation(cfg: Settings, subject: str) -> str:
    """Publish as ``cfg``'s user; return the server's error for it (the server drops the message)."""
    errors: asyncio.Queue[Exception] = asyncio.Queue()

    async def on_error(exc: Exception) -> None:
        await errors.put(exc)

    nc = await connect(cfg.nats, "spoofer", error_cb=on_error)
    try:
        await nc.publish(subject, b"\x80")
        await nc.flush()
        return str(await asyncio.wait_for(errors.get(), 5))
    finally:
        await nc.close()


async def test_shipped_config_confines_each_role(
    shipped: NatsServer, settings: Settings, tmp_path: Path
) -> None:
    node = as_user(settings, shipped, NODE, "change-me-node-001")
    node.agent.node = NODE
    node.agent.collectors.probe.port = 0  # the probe collector hears its peers' probe endpoints
    node.agent.collectors.probe.advertise = ["127.0.0.1"]
    node.agent.collectors.probe.interval_s = 0.5
    node.agent.collectors.inspector.dump_dir = tmp_path / "dump"  # serves raw records to the aggregator only
    write_job(JobSpec(nodes=2, gpus_per_node=1, steps=5), tmp_path / "dump")
    aggregator_cfg = as_user(settings, shipped, "aggregator", "change-me-aggregator")
    operator = as_user(settings, shipped, "operator", "change-me-operator")
    subjects = Subjects(settings.subject_prefix)
    healthy = (FIXTURES / "ras/nccl_2.28.9_json_status_healthy_2rank.json").read_bytes()
    healthy_text = (FIXTURES / "ras/upstream-server/ref_2.28.9_text_healthy.txt").read_bytes()
    async with FakeRasServer(PROFILES["2.29"], healthy_text, healthy) as ras:
        node.agent.collectors.ras = node.agent.collectors.ras.model_copy(update={
            "addr": ras.address, "interval_s": 0.2, "lease_ttl_s": 2.0, "timeout_s": 2.0,
            "proc_root": fake_proc(tmp_path / "proc", ras.port, {"SLURM_JOB_ID": "777"})})  # fmt: skip
        async with (
            aggregator(aggregator_cfg) as agg,
            agent(node, only=["heartbeat", "ras", "probe", "inspector"]) as rt,
        ):
            assert rt.ctx is not None
            ras_collector = rt.ctx.collectors["ras"]
            await wait_for(lambda: ras_collector.lease.revision is not None, timeout=15)  # type: ignore[attr-defined]
            await wait_for(lambda: ras.statuses_served >= 2, timeout=10)
            await wait_for(lambda: (CLUSTER, NODE) in agg.state.nodes.nodes, timeout=15)
            assert ras_collector.health.state == "ok"
            targets = rt.ctx.collectors["probe"].targets  # type: ignore[attr-defined]
            await wait_for(lambda: NODE in targets._endpoints, timeout=10)  # its own announcement came back

            for user in (aggregator_cfg, operator):  # both can query
                answer = await query(user, "nodes", timeout=5)
                assert answer.ok and NODE in {row["node"] for row in answer.rows}, answer
            oc = await connect(operator.nats, "operator")
            try:  # the operator may ask an agent for its status, and discover services
                reply = await oc.request(subjects.agent(CLUSTER, NODE, "status"), b"{}", timeout=5)
                assert json.loads(reply.data)["node"] == NODE
                reply = await oc.request("$SRV.INFO.ranksight-agent", b"", timeout=5)
                assert json.loads(reply.data)["metadata"]["node"] == NODE
            finally:
                await oc.close()
            ac = await connect(aggregator_cfg.nats, "planner")
            try:  # the aggregator commands probes and hears the agent's answer (here: a refusal, no such peer)
                command = {"peer": OTHER, "addr": "127.0.0.1", "port": 28100}
                reply = await ac.request(
                    subjects.agent(CLUSTER, NODE, "probe"), json.dumps(command).encode(), timeout=5
                )
                assert reply.headers and "no registered probe endpoint" in reply.headers["Nats-Service-Error"]
                # ... and asks it for a finding's raw Inspector records
                raw = {"comms": ["none"], "from_us": 0, "to_us": 10**9}
                reply = await ac.request(subjects.agent(CLUSTER, NODE, "inspector_raw"), json.dumps(raw).encode(),
                                         timeout=5)  # fmt: skip
                assert json.loads(reply.data)["records"] == []
            finally:
                await ac.close()

            spoof = subjects.event(CLUSTER, OTHER, "heartbeat")
            own_event = subjects.event(CLUSTER, NODE, "heartbeat")
            raw_of_a_node = subjects.agent(CLUSTER, NODE, "inspector_raw")  # the job's data: the aggregator's
            for user, subject in [(node, spoof), (operator, own_event), (operator, subjects.api("export")),
                                  (operator, subjects.shard_api("any-shard", "export")),
                                  (operator, raw_of_a_node)]:  # fmt: skip
                error = await publish_violation(user, subject)
                assert f'permissions violation for publish to "{subject}"' in error.lower()
            await asyncio.sleep(0.5)
            assert (CLUSTER, OTHER) not in agg.state.nodes.nodes and agg.stats.dead_letters == 0
    # the roles at work hit no permission they lack: the only violations are the spoofer's
    violations = [line for line in shipped.log_file.read_text().splitlines() if "Violation" in line]
    assert len(violations) == 5 and all(':spoofer"' in line for line in violations), violations
