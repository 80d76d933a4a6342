"""Production NATS authentication (docs/security-model.md) against a real nats-server: nkey users (``nkey_seed_file``) and the
decentralized operator/account/user JWT setup (``creds_file``). Keys and JWTs are made here with the ``nkeys`` library."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from nats.aio.msg import Msg

from ranksight.core.config import NatsSettings
from ranksight.core.natsconn import NatsUnreachable, connect
from ranksight.core.natsserver import NatsServer
from ranksight.settings import Settings
from tests.nats_auth import Decentralized, user_key
from tests.support import agent, aggregator, wait_for


def _server(tmp_path: Path, config: str) -> NatsServer:
    conf = tmp_path / "nats.conf"
    conf.write_text(config)
    return NatsServer(tmp_path / "auth-nats", config_file=conf)  # not the settings fixture's store


async def _round_trip(cfg: NatsSettings) -> bytes:
    async def echo(msg: Msg) -> None:
        await msg.respond(msg.data)

    nc = await connect(cfg, "auth-test", max_reconnect_attempts=0, allow_reconnect=False)
    try:
        sub = await nc.subscribe("auth.echo", cb=echo)
        reply = await nc.request("auth.echo", b"hello", timeout=5)
        await sub.unsubscribe()
        return reply.data
    finally:
        await nc.close()


async def _refused(cfg: NatsSettings) -> None:
    with pytest.raises(NatsUnreachable, match="Authorization Violation"):
        await _round_trip(cfg)


@pytest.fixture
def nkey_server(tmp_path: Path) -> Iterator[tuple[NatsServer, Path, Path]]:
    agent_key, aggregator_key = user_key(), user_key()
    users = ", ".join(f"{{nkey: {k.public}}}" for k in (agent_key, aggregator_key))
    server = _server(tmp_path, f"authorization {{ users: [{users}] }}\n").start()
    try:
        yield (
            server,
            agent_key.write_seed(tmp_path / "agent.nk"),
            aggregator_key.write_seed(tmp_path / "agg.nk"),
        )
    finally:
        server.stop()


async def test_nkey_seed_auth_runs_agent_and_aggregator(
    nkey_server: tuple[NatsServer, Path, Path], settings: Settings, tmp_path: Path
) -> None:
    server, agent_seed, aggregator_seed = nkey_server
    await _refused(NatsSettings(url=server.url))  # no credentials
    await _refused(
        NatsSettings(url=server.url, nkey_seed_file=user_key().write_seed(tmp_path / "stranger.nk"))
    )
    agg_cfg = settings.model_copy(deep=True)
    agg_cfg.nats = NatsSettings(url=server.url, nkey_seed_file=aggregator_seed)
    agent_cfg = settings.model_copy(deep=True)
    agent_cfg.nats = NatsSettings(url=server.url, nkey_seed_file=agent_seed)
    async with aggregator(agg_cfg) as agg, agent(agent_cfg, only=["heartbeat"]):
        await wait_for(lambda: ("test", "node-a") in agg.state.nodes.nodes, timeout=15)


async def test_creds_file_auth(tmp_path: Path) -> None:
    trusted, other = Decentralized.new(), Decentralized.new()
    server = _server(tmp_path, trusted.server_config()).start()
    try:
        creds = trusted.creds(tmp_path / "agent.creds", "gpu-node-001")
        assert await _round_trip(NatsSettings(url=server.url, creds_file=creds)) == b"hello"
        await _refused(NatsSettings(url=server.url))
        # a user signed by an account the server does not trust
        await _refused(NatsSettings(url=server.url, creds_file=other.creds(tmp_path / "x.creds", "x")))
    finally:
        server.stop()
