"""Raw records on a finding, end to end (real nats-server, aggregator, agents, DuckDB; simulated dump files).

History misses most raw records here, as it does when agents publish raw records rate-limited: each agent's offsets
say that all but the tail of every dump file was published already, so only the tail crosses the bus. A finding (a hang,
a compute straggler) then makes the aggregator ask the agents for the affected comms' records in the finding's window,
and history ends up with every one of them exactly once; an agent that is down leaves the evidence marked incomplete.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from ranksight.aggregator.runtime import Aggregator
from ranksight.aggregator.timefmt import ns_of
from ranksight.api.client import query
from ranksight.formats.inspector import parse_op
from ranksight.settings import Settings
from ranksight.simulate.inspector import Fault, JobSpec, simulate
from tests.support import agent, aggregator, wait_for

HANG = JobSpec(
    nodes=4, gpus_per_node=4, layout="moe", steps=100, faults=[Fault("hang", node=3, gpu=2, start_step=30)]
)
STRAGGLER = JobSpec(nodes=4, gpus_per_node=4, steps=200, faults=[Fault("gpu", node=1, gpu=2, factor=2.0)])


def node_settings(settings: Settings, node: str, dump: Path, **raw: Any) -> Settings:
    """An agent ``node`` tailing ``dump`` (its offsets in its own state dir), and an aggregator with fast analysis."""
    inspector = settings.agent.collectors.inspector.model_copy(update={"dump_dir": dump, "interval_s": 0.05})
    collectors = settings.agent.collectors.model_copy(update={"inspector": inspector})
    stragglers = settings.aggregator.stragglers.model_copy(
        update={"window_s": 2.0, "evaluate_every_s": 0.3, "retain_windows": 60, "hang_quiet_s": 3.0},
    )
    raw_evidence = settings.aggregator.raw_evidence.model_copy(update={"page_records": 500, **raw})
    return settings.model_copy(update={
        "agent": settings.agent.model_copy(update={"node": node, "collectors": collectors}),
        "aggregator": settings.aggregator.model_copy(update={"stragglers": stragglers, "raw_evidence": raw_evidence}),
    })  # fmt: skip


def write_files(spec: JobSpec, dumps: dict[Path, set[str]], keep: float) -> dict[Path, int]:
    """Each host's dump files into the directory serving it; an offsets file beside each directory (in the agent's
    state dir, ``<dir>.state``) saying all but the last ``keep`` share of every file was published. The tail's
    records per directory."""
    tails: dict[Path, int] = {}
    for (host, pid), lines in simulate(spec).items():
        [directory] = [d for d, hosts in dumps.items() if host in hosts]
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{host}-pid{pid}.log"
        path.write_text("".join(line + "\n" for line in lines))
        cut = len(lines) - int(len(lines) * keep)
        state_file = directory.with_suffix(".state") / "inspector-offsets.json"
        state_file.parent.mkdir(exist_ok=True)
        state = json.loads(state_file.read_text()) if state_file.exists() else {"files": {}}
        offset = sum(len(line) + 1 for line in lines[:cut])
        state["files"][str(path)] = {"inode": path.stat().st_ino, "offset": offset}
        state_file.write_text(json.dumps(state))
        tails[directory] = tails.get(directory, 0) + len(lines) - cut
    return tails


def with_state(cfg: Settings, dump: Path) -> Settings:
    return cfg.model_copy(update={"state_dir": dump.with_suffix(".state")})


def dumped(dumps: list[Path], comms: set[str], window: list[str]) -> set[tuple[Any, ...]]:
    """Identity of every record of ``comms`` within the evidence's window, read from the dump files themselves."""
    lo, hi = (ns_of(t) // 1000 for t in window)
    out = set()
    for directory in dumps:
        for path in directory.glob("*.log"):
            for line in path.read_bytes().splitlines():
                r = parse_op(line)
                if r.comm_id in comms and lo <= r.dump_ts_us <= hi:
                    out.add((r.hostname, r.pid, r.comm_id, r.op, r.sn, r.dump_ts_us))
    return out


def history(agg: Aggregator, comms: set[str], window: list[str]) -> list[tuple[Any, ...]]:
    lo, hi = (ns_of(t) // 1000 for t in window)
    rows = agg.store.rows(
        "SELECT hostname, pid, comm_id, op, sn, dump_ts_us FROM inspector WHERE list_contains(?, comm_id) "
        "AND dump_ts_us BETWEEN ? AND ?",
        [sorted(comms), lo, hi],
    )
    return [tuple(r.values()) for r in rows]


def streamed(agg: Aggregator) -> set[tuple[Any, ...]]:
    """Identity of the raw records that came in messages (not fetched on request)."""
    rows = agg.store.rows("SELECT hostname, pid, comm_id, op, sn, dump_ts_us FROM inspector WHERE seq > 0")
    return {tuple(r.values()) for r in rows}


async def settled(agg: Aggregator, quiet_s: float = 1.5) -> None:
    """Until no message has come in for ``quiet_s``: what the agents had to publish is in."""
    seen = -1
    while seen != agg.stats.messages:
        seen = agg.stats.messages
        await asyncio.sleep(quiet_s)


def raw_evidence_of(agg: Aggregator, rule: str) -> dict[str, Any] | None:
    alert = next((a for a in agg.engine.active.values() if a.rule == rule), None)
    return alert.evidence if alert is not None and "raw_complete" in alert.evidence else None


async def test_a_hang_brings_its_comms_raw_records_into_history_once(
    settings: Settings, tmp_path: Path
) -> None:
    spec = HANG
    spec.start_us = time.time_ns() // 1000 - 10_000_000
    dump = tmp_path / "dump"
    tails = write_files(spec, {dump: {spec.hostname(n) for n in range(spec.nodes)}}, keep=0.05)
    cfg = with_state(node_settings(settings, "node-a", dump), dump)
    async with aggregator(cfg) as agg, agent(cfg, only=["inspector"]) as rt:
        evidence = await wait_for(lambda: raw_evidence_of(agg, "collective_hang"), timeout=40)
        before = streamed(agg)
        assert len(before) <= tails[dump]  # at most the tail crossed the bus
        assert evidence["raw_complete"] is True and evidence["raw_missing"] == []
        comms = set(evidence["raw_comms"])
        assert comms == {r["comm_id"] for r in evidence["lagging_ranks"]}
        want = dumped([dump], comms, evidence["raw_window"])
        got = history(agg, comms, evidence["raw_window"])
        assert len(got) == len(set(got)) and set(got) == want  # every record of the finding, each once
        # new: what had not come in messages (a sampled raw record arriving later replaces its fetched twin)
        assert evidence["raw_records"] == len(want) >= evidence["raw_inserted"] >= len(want - before) > 0
        [stored] = agg.store.rows("SELECT evidence FROM alerts WHERE rule = 'collective_hang'")
        assert json.loads(stored["evidence"])["raw_records"] == len(want)  # in history's alert row too
        assert agg.status_meta()["raw_evidence"]["findings"] == 1

        # hostile requests to the agent's command get a clear refusal; nothing is read outside the dump directory
        assert rt.ctx is not None
        subject = rt.ctx.subjects.agent("test", "node-a", "inspector_raw")
        for body, error in [
            (b"not json", "bad request"),
            (b'{"comms": ["x"], "from_us": 0, "to_us": 1, "cursor": {"file": "../../etc/passwd", "offset": 0}}',
             "cursor.file"),
            (b'{"comms": ["x"], "from_us": 0, "to_us": 99000000000}', "raw_max_window_s"),
            (b'{"comms": ["x"], "from_us": 0, "to_us": 1, "exec": "rm -rf /"}', "exec"),
        ]:  # fmt: skip
            reply = await rt.ctx.nc.request(subject, body, timeout=5)
            assert reply.headers and error in reply.headers["Nats-Service-Error"]
            assert reply.headers["Nats-Service-Error-Code"] == "400"


async def test_an_agent_that_is_down_leaves_the_evidence_incomplete_and_nothing_crashes(
    settings: Settings, tmp_path: Path
) -> None:
    spec = HANG
    spec.start_us = time.time_ns() // 1000 - 10_000_000
    dump_a, dump_b = tmp_path / "a", tmp_path / "b"
    write_files(spec, {dump_a: {spec.hostname(0), spec.hostname(1)},
                               dump_b: {spec.hostname(2), spec.hostname(3)}}, keep=0.05)  # fmt: skip
    cfg = node_settings(settings, "node-a", dump_a, retries=1, retry_delay_s=0.1, request_timeout_s=1.0)
    cfg_b = with_state(node_settings(settings, "node-b", dump_b), dump_b)
    async with aggregator(cfg) as agg, agent(with_state(cfg, dump_a), only=["inspector"]):
        await wait_for(lambda: agg.stats.messages, timeout=20)
        await settled(agg)  # node-a's tail is in: every stalled communicator completes with node-b's
        before = agg.stats.messages
        async with agent(cfg_b, only=["inspector"]):  # node-b publishes its tail, then goes down
            await wait_for(lambda: agg.stats.messages > before, timeout=20)
            await settled(agg, quiet_s=0.5)  # well within hang_quiet_s: down before the finding asks it
        evidence = await wait_for(lambda: raw_evidence_of(agg, "collective_hang"), timeout=40)
        assert evidence["raw_complete"] is False
        [missing] = evidence["raw_missing"]
        assert missing["node"] == "node-b" and "no agent answers" in missing["reason"]
        comms = set(evidence["raw_comms"])
        from_a = dumped([dump_a], comms, evidence["raw_window"])  # what node-a holds of the finding's comms
        assert evidence["raw_records"] == len(from_a) > 0 and from_a <= set(
            history(agg, comms, evidence["raw_window"])
        )
        assert agg.status_meta()["raw_evidence"]["incomplete"] == 1
        answer = await query(cfg, "alerts", timeout=5)  # the aggregator goes on serving
        assert answer.ok and any(row["rule"] == "collective_hang" for row in answer.rows)


async def test_a_compute_straggler_brings_the_raw_records_of_its_comms(
    settings: Settings, tmp_path: Path
) -> None:
    spec = STRAGGLER
    spec.start_us = time.time_ns() // 1000 - 20_000_000
    dump = tmp_path / "dump"
    write_files(spec, {dump: {spec.hostname(n) for n in range(spec.nodes)}}, keep=0.6)
    cfg = with_state(node_settings(settings, "node-a", dump, lookback_s=120.0), dump)
    async with aggregator(cfg) as agg, agent(cfg, only=["inspector"]):
        evidence = await wait_for(lambda: raw_evidence_of(agg, "straggler"), timeout=60)
        found = (evidence["hostname"], evidence["pid"], evidence["kind"])
        assert found == ("node001", spec.pid(1, 2), "compute")
        assert evidence["raw_complete"] is True
        comms = set(evidence["raw_comms"])
        mine = {parse_op(line).comm_id for line in (dump / f"node001-pid{spec.pid(1, 2)}.log").read_bytes()
                .splitlines()}  # fmt: skip
        assert comms == mine  # every comm the straggling process is a rank of
        want = dumped([dump], comms, evidence["raw_window"])
        got = history(agg, comms, evidence["raw_window"])
        assert len(got) == len(set(got)) and set(got) == want
        assert (
            evidence["raw_records"] == len(want) >= evidence["raw_inserted"] >= len(want - streamed(agg)) > 0
        )
