"""Every ``enabled = false`` switch in the settings leaves the aggregator or agent running and answering.

The switches are found by walking the settings model, so a section added later with its own ``enabled`` is covered.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel

from ranksight.api.client import query
from ranksight.schemas.subjects import Subjects
from ranksight.settings import Settings
from tests.support import agent, aggregator

OUTLIVE_S = 1.5  # longer than a disabled part takes to return (the probe planner's did at once)


def enabled_switches(model: type[BaseModel], path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from enabled_switches(annotation, (*path, name))
        elif name == "enabled":
            yield path


SWITCHES = list(enabled_switches(Settings))
AGGREGATOR_SWITCHES = [p for p in SWITCHES if p[0] == "aggregator"]
AGENT_SWITCHES = [p for p in SWITCHES if p[0] == "agent"]


def test_every_switch_is_tested() -> None:
    assert set(SWITCHES) == set(AGGREGATOR_SWITCHES) | set(AGENT_SWITCHES)
    assert ("aggregator", "probes") in AGGREGATOR_SWITCHES and len(AGENT_SWITCHES) >= 8


def disable(settings: Settings, path: tuple[str, ...]) -> Settings:
    section: object = settings
    for name in path:
        section = getattr(section, name)
    assert isinstance(section, BaseModel)
    section.enabled = False  # type: ignore[attr-defined]
    return settings


@pytest.mark.parametrize("path", AGGREGATOR_SWITCHES, ids=".".join)
async def test_aggregator_runs_with_a_part_disabled(settings: Settings, path: tuple[str, ...]) -> None:
    cfg = disable(settings, path)
    async with aggregator(cfg):
        await asyncio.sleep(OUTLIVE_S)
        assert (await query(cfg, "status", timeout=5)).ok


@pytest.mark.parametrize("path", AGENT_SWITCHES, ids=".".join)
async def test_agent_runs_with_a_collector_disabled(settings: Settings, path: tuple[str, ...]) -> None:
    collectors = settings.agent.collectors
    collectors.probe.port = 0  # tests run at once: never the fixed port
    settings.agent.publish_timeout_s = 0.5  # no stream here: shutdown's flush waits this long for acks
    with tempfile.TemporaryDirectory(prefix="rs-app-") as d:  # Unix socket paths are limited to 107 bytes
        collectors.app.socket_path = Path(d) / "app.sock"
        cfg = disable(settings, path)
        async with agent(cfg) as rt:
            await asyncio.sleep(OUTLIVE_S)
            assert rt.ctx is not None
            subject = Subjects(cfg.subject_prefix).agent(cfg.cluster, cfg.agent.node, "status")
            status = json.loads((await rt.ctx.nc.request(subject, b"{}", timeout=5)).data)
            running = {c["name"] for c in status["collectors"]}
            assert path[-1] not in running and running  # the others still run
