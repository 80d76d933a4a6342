"""Shared fixtures: a real nats-server per test, settings pointing at it, and in-process agent/aggregator runners."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ranksight.core.natsserver import NatsCluster, NatsServer
from ranksight.settings import Settings, load_settings

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's RANKSIGHT_* variables must not leak into tests."""
    import os

    for name in list(os.environ):
        if name.upper().startswith("RANKSIGHT_"):
            monkeypatch.delenv(name)


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    server = NatsServer(tmp_path / "nats").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def nats_cluster(tmp_path: Path) -> Iterator[NatsCluster]:
    """Three real nats-servers clustered with JetStream on loopback."""
    cluster = NatsCluster(tmp_path / "nats-cluster", 3).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def settings(tmp_path: Path, nats_server: NatsServer) -> Settings:
    return fast_settings(tmp_path, nats={"url": nats_server.url})


@pytest.fixture
def cluster_settings(tmp_path: Path, nats_cluster: NatsCluster) -> Settings:
    """The same as ``settings``, against the 3-server cluster, stream and KV kept on all three."""
    return fast_settings(tmp_path, nats={"url": nats_cluster.url, "jetstream_replicas": 3})


def fast_settings(tmp_path: Path, nats: dict[str, object]) -> Settings:
    """Fast intervals so tests see state changes within a second or two."""
    # here, not above: a test of the agent side loads no aggregator
    from ranksight.aggregator.rulebook import rule_timings

    return load_settings(
        None,
        cluster="test",
        state_dir=tmp_path / "state",
        nats=nats,
        agent={
            "node": "node-a",
            "batch_max_delay_s": 0.05,
            "collectors": {"heartbeat": {"interval_s": 0.2, "ttl_s": 1.0}},
        },
        aggregator={
            "tick_s": 0.1,
            "node_gone_after_s": 3.0,
            "fetch_batch": 500,
            "ack_wait_s": 2.0,
            "http": {"port": 0},  # tests run many aggregators at once: never the fixed default port
            # fast, like the intervals above: every rule fires and resolves at once (hold-down has its own tests)
            "alerts": {"rules": {rule: {"for_s": 0, "clear_s": 0} for rule in rule_timings()}},
        },
    )
