"""The agent's NATS ``probe`` command against real agents and nats-server: it probes only a registered agent's probe
endpoint (learned from that agent's ``probe_endpoint`` events) within the size caps; a port scan, an unknown peer and
a 512 MiB request are refused with a clear error (service error 400)."""

from __future__ import annotations

import json
from typing import Any

import msgspec
from nats.aio.client import Client

from ranksight.agent.runtime import AgentRuntime
from ranksight.schemas.records.probe import ProbeCommand
from ranksight.schemas.subjects import Subjects
from ranksight.settings import Settings
from tests.integration.test_probe_loopback import _node_settings
from tests.support import agent, wait_for


async def _command(rt: AgentRuntime, cfg: Settings, **cmd: Any) -> tuple[str | None, dict[str, Any] | None]:
    """(service error, answer) of a probe command sent to ``rt``'s agent."""
    assert rt.ctx is not None
    nc: Client = rt.ctx.nc
    subject = Subjects(cfg.subject_prefix).agent(cfg.cluster, cfg.agent.node, "probe")
    body = msgspec.json.encode(ProbeCommand(**{"echo_count": 5, "bytes": 1024**2, "seconds": 0.2, **cmd}))
    msg = await nc.request(subject, body, timeout=15)
    if msg.headers and msg.headers.get("Nats-Service-Error"):
        assert msg.headers["Nats-Service-Error-Code"] == "400"
        return msg.headers["Nats-Service-Error"], None
    return None, json.loads(msg.data)


async def test_probe_command_only_aims_at_registered_endpoints(settings: Settings) -> None:
    cfg_a, cfg_b = _node_settings(settings, "node-a"), _node_settings(settings, "node-b")
    async with agent(cfg_a, only=["probe"]) as a, agent(cfg_b, only=["probe"]) as b:
        assert b.ctx is not None
        port_b = b.ctx.collectors["probe"].server.port  # type: ignore[attr-defined]
        targets = a.ctx.collectors["probe"].targets  # type: ignore[union-attr]
        await wait_for(lambda: "node-b" in targets._endpoints, timeout=10)

        error, _ = await _command(a, cfg_a, peer="node-b", addr="127.0.0.1", port=22)  # a port scan
        assert error and "127.0.0.1:22 is not the probe endpoint node 'node-b' registered" in error
        error, _ = await _command(a, cfg_a, peer="node-b", addr="10.1.2.3", port=port_b)
        assert error and "is not the probe endpoint" in error
        error, _ = await _command(a, cfg_a, peer="node-z", addr="127.0.0.1", port=port_b)
        assert error and "node 'node-z' has no registered probe endpoint" in error
        error, _ = await _command(a, cfg_a, peer="node-b", addr="127.0.0.1", port=port_b, bytes=512 * 1024**2)
        assert error and "536870912 bytes" in error and "at most 268435456 bytes" in error

        error, answer = await _command(a, cfg_a, peer="node-b", addr="127.0.0.1", port=port_b)
        assert error is None and answer is not None
        assert answer["error"] is None and answer["upload_bps"] > 0
