"""An agent and an aggregator run from a source tree that was never installed (version ``0+unknown``) start their NATS
micro services; on a real GPU machine ``ranksight up`` died at start there (nats.micro: "Invalid version")."""

from __future__ import annotations

import json

import pytest

from ranksight.agent import runtime as agent_runtime
from ranksight.aggregator import runtime as aggregator_runtime
from ranksight.aggregator.api.service import SERVICE_NAME
from ranksight.core.natsconn import connect
from ranksight.settings import Settings
from tests.support import agent, aggregator


async def test_an_uninstalled_source_tree_serves_with_a_semantic_version(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    for module in (agent_runtime, aggregator_runtime):
        monkeypatch.setattr(module, "ranksight_version", lambda: "0+unknown")
    async with aggregator(settings), agent(settings, only=["heartbeat"]):
        nc = await connect(settings.nats, "test")
        try:
            for service in (SERVICE_NAME, "ranksight-agent"):
                info = json.loads((await nc.request(f"$SRV.INFO.{service}", b"", timeout=5)).data)
                assert info["version"] == "0.0.0+unknown", service
        finally:
            await nc.close()
