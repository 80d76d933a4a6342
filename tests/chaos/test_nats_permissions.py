"""The shipped NATS config, as the permission table makes it, against a real nats-server: one server and a 3-server
cluster (the shipped ``nats-cluster.conf``, which includes the single-server file), unsharded and sharded. Each role
does its job (a node publishes its events and holds a RAS lease, the aggregator creates the stream and the buckets and
ingests, sharded too, the operator queries) and nothing else: a node cannot create, update or read a stream but its
lease bucket, cannot capture the query API with a stream of its own, and cannot see another role's inbox.

Only the address, ports, names and store dirs come from the command line (the server refuses a store dir twice, so that
one line of the file goes).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from ranksight.agent.collectors.ras.lease import Lease
from ranksight.api.client import ApiUnavailable, query
from ranksight.core.natsconn import connect, once_jetstream_answers
from ranksight.core.natsserver import NatsCluster, NatsServer
from ranksight.deploy.nats_permissions import roles, server_conf
from ranksight.schemas.subjects import RAS_LEASE_BUCKET, Subjects, inbox_prefix
from ranksight.settings import Settings
from tests.chaos.support import envelope
from tests.conftest import REPO, fast_settings
from tests.support import aggregator, wait_for

pytestmark = pytest.mark.chaos

CLUSTER, NODE = "prod-a", "gpu-node-001"
PASSWORDS = {
    NODE: "change-me-node-001",
    "aggregator": "change-me-aggregator",
    "operator": "change-me-operator",
}
STORE_DIR_LINE = '  store_dir: "/var/lib/nats"\n'


@contextlib.contextmanager
def serving(topology: str, tmp_path: Path, server_text: str | None = None) -> Iterator[list[NatsServer]]:
    """The shipped file(s) (or ``server_text`` in place of nats-server.conf) on one server or three."""
    text = server_text if server_text is not None else (REPO / "deploy/nats/nats-server.conf").read_text()
    assert STORE_DIR_LINE in text
    (tmp_path / "nats-server.conf").write_text(text.replace(STORE_DIR_LINE, ""))
    (tmp_path / "nats-cluster.conf").write_text((REPO / "deploy/nats/nats-cluster.conf").read_text())
    if topology == "single":
        server = NatsServer(tmp_path / "nats", config_file=tmp_path / "nats-server.conf").start()
        try:
            yield [server]
        finally:
            server.stop()
        return
    with pytest.MonkeyPatch.context() as env:
        env.setenv(
            "NATS_SERVER_NAME", "from-the-file"
        )  # the file's variable; the command line names each member
        cluster = NatsCluster(tmp_path / "nats", 3, config_file=tmp_path / "nats-cluster.conf",
                              route_auth="route:change-me-route").start()  # fmt: skip
    try:
        yield cluster.servers
    finally:
        cluster.stop()


def as_user(tmp_path: Path, servers: list[NatsServer], user: str, **aggregator: object) -> Settings:
    cfg = fast_settings(tmp_path / user, nats={
        "url": ",".join(s.url for s in servers), "user": user, "password": PASSWORDS[user],
        "inbox_prefix": inbox_prefix(user), "jetstream_replicas": len(servers)})  # fmt: skip
    cfg.cluster = CLUSTER
    if aggregator:
        cfg.aggregator = cfg.aggregator.model_copy(update=aggregator)
    return cfg


async def refusals(
    cfg: Settings, publish: Sequence[str] = (), subscribe: Sequence[str] = ()
) -> dict[str, str]:
    """Try each publish and subscription as ``cfg``'s user; the server's refusal per subject (none: allowed)."""
    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc).lower())

    nc = await connect(cfg.nats, "spoofer", error_cb=on_error)
    try:
        for subject in publish:
            await nc.publish(subject, b"{}")
        for subject in subscribe:
            await nc.subscribe(subject)
        await nc.flush()
        wanted = len(publish) + len(subscribe)
        with contextlib.suppress(TimeoutError):
            await wait_for(lambda: len(errors) >= wanted, timeout=5)
    finally:
        await nc.close()
    found = {}
    for subject in [*publish, *subscribe]:
        found[subject] = next((e for e in errors if f'to "{subject.lower()}"' in e), "")
    return found


async def _answered(user: Settings) -> bool:
    try:
        await query(user, "status", timeout=5)
    except ApiUnavailable:
        return False
    return True


async def _node_does_its_job(node: Settings, subjects: Subjects, within_s: float = 30.0) -> None:
    """A heartbeat into the event stream and the RAS lease taken and renewed. On a loaded cluster the streams the
    aggregator just made may have no leader yet (an agent's next poll tries again): no answer, or none in time, is
    retried; a refusal is not."""
    await once_jetstream_answers(
        lambda: _node_job_once(node, subjects), "the node's first heartbeat", within_s
    )


async def _node_job_once(node: Settings, subjects: Subjects) -> None:
    nc = await connect(node.nats, "agent")
    try:
        js = nc.jetstream()
        heartbeat = envelope("heartbeat", NODE, "node-inc", cluster=CLUSTER)
        ack = await js.publish(subjects.event(CLUSTER, NODE, "heartbeat"), heartbeat)
        assert ack.seq > 0
        lease = Lease(js, ttl_s=5.0, holder=f"{NODE}:inc")
        assert await lease.hold("777") and await lease.hold("777")  # taken, then renewed
        await lease.release()
    finally:
        await nc.close()


@pytest.mark.parametrize("sharded", [False, True], ids=["unsharded", "sharded"])
@pytest.mark.parametrize("topology", ["single", "cluster"])
async def test_each_role_can_do_its_job_and_nothing_else(
    tmp_path: Path, topology: str, sharded: bool
) -> None:
    subjects = Subjects()
    with serving(topology, tmp_path) as servers:
        node, operator = as_user(tmp_path, servers, NODE), as_user(tmp_path, servers, "operator")
        shards = {"partitions": 2, "shard_id": "s1", "lease_ttl_s": 3.0} if sharded else {}
        agg_cfg = as_user(tmp_path, servers, "aggregator")
        agg_cfg.aggregator = agg_cfg.aggregator.model_copy(
            update={"shards": agg_cfg.aggregator.shards.model_copy(update=shards)}
        )
        capture = [f"$JS.API.STREAM.CREATE.KV_{RAS_LEASE_BUCKET}", "$JS.API.STREAM.CREATE.EVIL"]
        # a fresh cluster, before any aggregator: the node cannot make the lease bucket's stream (with subjects that
        # would answer the query API and read the operator's replies), nor any other
        assert all(await refusals(node, publish=capture))
        async with aggregator(agg_cfg) as agg:
            await _node_does_its_job(node, subjects)
            await wait_for(lambda: (CLUSTER, NODE) in agg.state.nodes.nodes, timeout=30, interval=0.2)
            if sharded:
                await wait_for(lambda: agg.shards is not None and agg.shards.ingesting == [0, 1], timeout=30)
            for user in (agg_cfg, operator):
                # the aggregator's service interest reaches every server of a cluster a moment after it starts
                await wait_for(functools.partial(_answered, user), timeout=30, interval=0.5)
                for _ in range(3):
                    answer = await query(user, "status", timeout=10)
                    assert answer.ok and answer.meta["health"] == "ok" and answer.meta["problems"] == [], (
                        answer
                    )
                    assert NODE in {row["node"] for row in answer.rows}

            events = subjects.events_filter()
            node_may_not_publish = [
                *capture, *(f"$JS.API.STREAM.{call}.KV_{RAS_LEASE_BUCKET}" for call in ("UPDATE", "DELETE", "PURGE")),
                f"$JS.API.STREAM.MSG.GET.{agg_cfg.aggregator.stream}", f"$JS.API.STREAM.INFO.{agg_cfg.aggregator.stream}",
                f"$JS.API.DIRECT.GET.{agg_cfg.aggregator.stream}", f"$JS.API.CONSUMER.CREATE.KV_{RAS_LEASE_BUCKET}",
                f"$KV.{RAS_LEASE_BUCKET}.other.key", "$KV.ranksight_shards.partition.0", "$KV.ranksight_alerts.x",
                subjects.event(CLUSTER, "gpu-node-002", "heartbeat"), subjects.api("status"),
                subjects.alert(CLUSTER, "critical", "x"), subjects.agent(CLUSTER, "gpu-node-002", "probe"),
            ]  # fmt: skip
            others_inboxes = [inbox_prefix("operator") + ".>", inbox_prefix("aggregator") + ".>", "_INBOX.>"]
            node_may_not_subscribe = [*others_inboxes, subjects.api("status"), events, "$KV.>",
                                      subjects.alerts_filter(), subjects.agent(CLUSTER, "gpu-node-002", "status")]  # fmt: skip
            found = await refusals(node, node_may_not_publish, node_may_not_subscribe)
            assert [s for s, error in found.items() if "permissions violation" not in error] == []
            operator_may_not = await refusals(
                operator,
                [subjects.event(CLUSTER, NODE, "heartbeat"), subjects.api("export"), "$JS.API.STREAM.CREATE.X",
                 "$KV.ranksight_shards.x", f"$KV.{RAS_LEASE_BUCKET}.job.x"],
                [inbox_prefix("aggregator") + ".>", inbox_prefix(NODE) + ".>", events],
            )  # fmt: skip
            assert [s for s, error in operator_may_not.items() if "permissions violation" not in error] == []
            assert agg.problems() == [] and agg.nats_problems.violations == {}
    # the roles at work hit no permission they lack: every violation in the servers' logs is the spoofer's
    lines = [line for s in servers for line in s.log_file.read_text().splitlines() if "Violation" in line]
    assert lines and all(':spoofer"' in line for line in lines), [x for x in lines if ':spoofer"' not in x]


async def test_a_refused_subject_is_an_error_in_status_metrics_and_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The finding: the aggregator's user lacked ``$KV.ranksight_shards.>``; shards never took a partition, the log
    said ``nats: timeout`` and status answered ok. With that grant taken out of the table again, status names the
    refused subject as an error, so do /metrics and the log."""
    table = roles()
    for role in table:
        role.publish[:] = [g for g in role.publish if not g.subject.startswith("$KV.ranksight_shards")]
    with serving("single", tmp_path, server_conf(table=table)) as servers:
        agg_cfg = as_user(tmp_path, servers, "aggregator")
        agg_cfg.aggregator = agg_cfg.aggregator.model_copy(update={"shards": agg_cfg.aggregator.shards.model_copy(
            update={"partitions": 2, "shard_id": "s1", "lease_ttl_s": 1.0})})  # fmt: skip
        with caplog.at_level(logging.ERROR, "ranksight"):
            async with aggregator(agg_cfg) as agg:

                async def told() -> dict[str, object] | None:
                    answer = await query(agg_cfg, "status", timeout=5)
                    return answer.meta if answer.meta.get("health") == "error" else None

                meta = await wait_for(told, timeout=30, interval=0.5)
                assert any("publish to $KV.ranksight_shards." in line for line in meta["problems"]), meta  # type: ignore[attr-defined]
                await wait_for(lambda: any("partitions held by no shard: 0, 1" in p for p in agg.problems()),
                               timeout=30, interval=0.5)  # fmt: skip
                metrics = await asyncio.to_thread(_get, f"{agg.http.url}/metrics")
        assert (
            'ranksight_nats_permission_violations_total{op="publish",subject="$KV.ranksight_shards.'
            in metrics
        )
        problems = re.search(r"^ranksight_problems ([0-9.]+)$", metrics, re.MULTILINE)
        assert problems is not None and float(problems.group(1)) >= 2, metrics[-2000:]
        assert any(
            "$KV.ranksight_shards." in r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR
        )


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as answer:
        return answer.read().decode()
