"""Slurm drain and resume against a real one-node Slurm cluster (Debian's slurm-wlm and munge, started by the test):
the executor alone, and the whole loop (policy -> planner -> runner -> scontrol -> audit in DuckDB) across a restart."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ranksight.aggregator.actions.desk import ActionDesk
from ranksight.aggregator.actions.executors import SlurmExecutor, parse_show_node
from ranksight.aggregator.actions.model import Action, ActionRefused
from ranksight.aggregator.actions.settings import ActionSettings
from ranksight.aggregator.alerts import AlertEngine
from ranksight.aggregator.store import Store
from ranksight.aggregator.timefmt import iso
from ranksight.schemas.alerts import Alert
from tests.slurm_support import SlurmCluster, start_slurm


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    yield from start_slurm(tmp_path_factory.mktemp("slurm"))


@pytest.fixture
def slurm_env(slurm: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmCluster]:
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    yield slurm
    if "DRAIN" in _state(slurm)[0]:  # whatever a test left
        slurm.scontrol("update", f"NodeName={slurm.node}", "State=RESUME")


def _state(slurm: SlurmCluster) -> tuple[str, str]:
    shown = parse_show_node(slurm.scontrol("show", "node", slurm.node))
    return shown.state, shown.reason


def _action(node: str, **kw: object) -> Action:
    base = dict(id="a1", policy="p", action="slurm_drain", mode="enforce", cluster="c", node=node, job=None,
                rule="gpu_ecc_uncorrectable", severity="critical", fingerprint="f1", incident_started="2026-01-01T00:00:00Z",
                summary='GPU 3: 2 uncorrectable "ECC" errors\nsince boot', status="queued", at_ns=0)  # fmt: skip
    return Action(**{**base, **kw})  # type: ignore[arg-type]


async def test_drain_then_resume_for_real(slurm_env: SlurmCluster) -> None:
    executor = SlurmExecutor(ActionSettings())
    action = _action(slurm_env.node)
    result = await executor.apply(action)
    state, reason = _state(slurm_env)
    assert "DRAIN" in state and result.startswith(slurm_env.node)
    # the reason names the rule and summary on one line, quotes and the newline gone
    assert reason == "ranksight: gpu_ecc_uncorrectable GPU 3: 2 uncorrectable ECC errors since boot"
    assert "already drained by ranksight" in await executor.apply(
        action
    )  # idempotent: a second try changes nothing
    await executor.undo(action)
    state, _ = _state(slurm_env)
    assert "DRAIN" not in state


async def test_a_node_drained_by_someone_else_is_left_alone(slurm_env: SlurmCluster) -> None:
    slurm_env.scontrol("update", f"NodeName={slurm_env.node}", "State=DRAIN", "Reason=memory test by ops")
    executor = SlurmExecutor(ActionSettings())
    with pytest.raises(ActionRefused, match="by someone else: memory test by ops"):
        await executor.apply(_action(slurm_env.node))
    with pytest.raises(ActionRefused, match="not resumed"):
        await executor.undo(_action(slurm_env.node))
    state, reason = _state(slurm_env)
    assert "DRAIN" in state and reason == "memory test by ops"


def _alert(node: str, state: str = "firing") -> Alert:
    return Alert(rule="gpu_ecc_uncorrectable", severity="critical", fingerprint="fp-" + node, state=state,  # type: ignore[arg-type]
                 cluster="c", node=node, summary="GPU 0: uncorrectable ECC errors",
                 started_at="2026-12-01T10:00:00.000000Z", updated_at="2026-12-01T10:00:00.000000Z")  # fmt: skip


async def _audit(store: Store) -> list[tuple[str, str]]:
    return await store.call(
        lambda: store.con.execute("SELECT id, step FROM action_audit ORDER BY step_at, seq").fetchall()
    )


async def test_policy_drains_once_across_a_restart_and_resumes_on_resolve(
    slurm_env: SlurmCluster, tmp_path: Path
) -> None:
    settings = ActionSettings(mode="enforce", max_nodes_per_window=5, max_cluster_fraction=1.0, policies=[
        {"name": "ecc-drain", "rules": ["gpu_ecc_uncorrectable"], "action": "slurm_drain", "resume_on_resolve": True}])  # type: ignore[list-item]  # fmt: skip
    store = Store(tmp_path / "h.duckdb")
    await store.call(store.open)
    alert = _alert(slurm_env.node)
    engine = AlertEngine([alert])
    try:
        desk = ActionDesk(settings, store)
        runner = asyncio.create_task(desk.runner.run())
        desk.tick(engine, {"c": 4}, [], time.time_ns())
        await desk.runner.wait_idle(60)
        assert "DRAIN" in _state(slurm_env)[0]
        steps = [s for _, s in await _audit(store)]
        assert steps == ["queued", "running", "done"]
        runner.cancel()

        # a restart: the decision is reloaded, the same incident is not acted on again
        again = ActionDesk(settings, store)
        await again.load(engine.active.values())
        runner = asyncio.create_task(again.runner.run())
        again.tick(engine, {"c": 4}, [], time.time_ns())
        await again.runner.wait_idle(30)
        assert [s for _, s in await _audit(store)] == ["queued", "running", "done"]

        # the incident resolves: resume_on_resolve resumes the node ranksight drained
        resolved = alert.model_copy(update={"state": "resolved", "resolved_at": iso(time.time_ns())})
        engine.active.clear()
        again.tick(engine, {"c": 4}, [resolved], time.time_ns())
        await again.runner.wait_idle(60)
        assert "DRAIN" not in _state(slurm_env)[0]
        assert [s for _, s in await _audit(store)][-2:] == ["undoing", "undone"]
        runner.cancel()
    finally:
        await store.call(store.close_connection)
        store.shutdown()
