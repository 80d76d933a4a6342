"""Real nats-server + two agents + aggregator + DuckDB: an agent on the compact wire and one on the map form (what
older agents send, and what this version sends with ``[agent] wire_format = "map"``) land identical rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nats

from ranksight.aggregator.columns import kind_columns
from ranksight.aggregator.runtime import Aggregator
from ranksight.schemas.codec import unpack
from ranksight.schemas.subjects import Subjects
from ranksight.settings import Settings
from ranksight.simulate.inspector import JobSpec, simulate
from tests.loadgen import SyntheticAgent
from tests.support import agent, aggregator, wait_for

NODES = {"node-a": "compact", "node-b": "map"}


def _agent_settings(settings: Settings, node: str, dump: Path) -> Settings:
    """The agent of ``node``: its own state (file offsets), the shared dump directory, its wire format."""
    inspector = settings.agent.collectors.inspector.model_copy(
        update={"dump_dir": dump, "interval_s": 0.05, "raw_rate_per_s": 1e9}
    )
    collectors = settings.agent.collectors.model_copy(update={"inspector": inspector})
    cfg = settings.agent.model_copy(
        update={"node": node, "wire_format": NODES[node], "collectors": collectors}
    )
    return settings.model_copy(update={"agent": cfg, "state_dir": settings.state_dir / node})


def _rows(agg: Aggregator, kind: str, node: str) -> list[tuple[Any, ...]]:
    """The rows of ``node``, record columns only (the envelope columns name the node, its agent and their clocks)."""
    columns = ", ".join(f'"{name}"' for name in kind_columns(kind).fields)
    cur = agg.store.reader().execute(f"SELECT {columns} FROM {kind} WHERE node = ? ORDER BY ALL", [node])
    return cur.fetchall()


async def test_compact_and_map_agents_land_identical_rows(settings: Settings, tmp_path: Path) -> None:
    dump = tmp_path / "dump"
    dump.mkdir()
    for (host, pid), lines in simulate(JobSpec(nodes=2, gpus_per_node=2, steps=40)).items():
        (dump / f"{host}-pid{pid}.log").write_text("".join(line + "\n" for line in lines))
    expected = sum(len(f.read_text().splitlines()) for f in dump.iterdir())
    assert expected >= 400
    async with aggregator(settings) as agg:
        compact, as_map = (_agent_settings(settings, node, dump) for node in NODES)
        async with agent(compact, only=["inspector"]), agent(as_map, only=["inspector"]):
            await wait_for(
                lambda: all(len(_rows(agg, "inspector", n)) == expected for n in NODES), timeout=60
            )
        gpus = [await SyntheticAgent(_agent_settings(settings, node, dump), node).start() for node in NODES]
        try:
            for sim in gpus:
                await sim.emit(300)
                assert await sim.flush(30)
        finally:
            for sim in gpus:
                await sim.close()
        await wait_for(lambda: all(len(_rows(agg, "gpu", n)) == 300 for n in NODES), timeout=60)
        dead = list(agg.store.rows("SELECT reason, detail FROM dead_letters"))
        for kind in ("inspector", "gpu"):
            assert _rows(agg, kind, "node-a") == _rows(agg, kind, "node-b"), kind
    assert dead == []
    assert await _forms(settings) == {"node-a": {"columns"}, "node-b": {"records"}}


async def _forms(settings: Settings) -> dict[str, set[str]]:
    """Which form each node's last message of each kind took on the stream: ``records`` or ``columns``."""
    nc = await nats.connect(settings.nats.url)
    js, subjects = nc.jetstream(), Subjects(settings.subject_prefix)
    try:
        forms: dict[str, set[str]] = {}
        for node in NODES:
            for kind in ("inspector", "gpu"):
                msg = await js.get_last_msg(
                    settings.aggregator.stream, subjects.event(settings.cluster, node, kind)
                )
                forms.setdefault(node, set()).update({"records", "columns"} & set(unpack(msg.data)))
        return forms
    finally:
        await nc.close()
