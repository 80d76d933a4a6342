"""One action per incident across an analysis-lead failover: two leads (each with its own NATS connection and alert
book on the real JetStream KV bucket) decide the same incident; only the one that claims ``action.<id>`` first runs
it, the other audits it as claimed; a lead that restarts and decides again does not run it either; and the next lead
reads where every action stands, so its circuit breaker counts what the earlier ones did."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

from ranksight.aggregator.actions.model import Action
from ranksight.aggregator.actions.planner import ActionPlanner
from ranksight.aggregator.actions.runner import ActionRunner
from ranksight.aggregator.actions.settings import ActionPolicy, ActionSettings
from ranksight.aggregator.lead import AlertBook
from ranksight.aggregator.timefmt import iso
from ranksight.core.natsconn import connect
from ranksight.schemas.alerts import Alert
from ranksight.settings import Settings

SCRIPT = "import json, sys; open(sys.argv[1], 'a').write(json.load(sys.stdin)['id'] + '\\n')"


def _incident() -> Action:
    return Action(id="3f2a9c", policy="ecc", action="command", mode="enforce", cluster="c", node="n7", job=None,
                  rule="gpu_ecc_uncorrectable", severity="critical", fingerprint="fp", summary="ecc",
                  incident_started="2026-12-01T10:00:00.000000Z", status="queued", at_ns=1)  # fmt: skip


async def _lead(settings: Settings, name: str, cfg: ActionSettings) -> tuple[ActionRunner, list[Action], Any]:
    nc = await connect(settings.nats, name)
    book = AlertBook(nc.jetstream(), "test_actions_claims", 1024 * 1024, 1)
    steps: list[Action] = []

    async def audit(batch: list[Action]) -> None:
        steps.extend(batch)

    async def share(batch: list[Action]) -> None:
        for action in batch:
            await book.put_action(action)

    runner = ActionRunner(
        cfg, ActionPlanner(cfg), audit, lambda a: book.claim_action(a.id, name), share=share
    )
    return runner, steps, nc


async def test_only_one_lead_runs_an_incident(settings: Settings, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    cfg = ActionSettings(command={"argv": [sys.executable, "-c", SCRIPT, str(ledger)]})
    leads = [await _lead(settings, f"lead-{i}", cfg) for i in range(3)]
    tasks = [asyncio.create_task(runner.run()) for runner, _, _ in leads]
    try:
        for runner, _, _ in leads[:2]:  # the old lead and the new one, at once
            runner.submit([_incident()])
        for runner, _, _ in leads[:2]:
            await runner.wait_idle(30)
        assert ledger.read_text().splitlines() == ["3f2a9c"]
        finals = sorted(steps[-1].status for _, steps, _ in leads[:2])
        assert finals == ["done", "skipped"]
        skipped = next(steps[-1] for _, steps, _ in leads[:2] if steps[-1].status == "skipped")
        assert skipped.why == "claimed by another analysis lead"
        # a third lead, later (the old one restarted, or another failover): still not run again
        leads[2][0].submit([_incident()])
        await leads[2][0].wait_idle(30)
        assert leads[2][1][-1].status == "skipped" and ledger.read_text().splitlines() == ["3f2a9c"]

        # the next lead reads where every action stands: the node acted on counts against its breaker and cooldown
        book = AlertBook(leads[2][2].jetstream(), "test_actions_claims", 1024 * 1024, 1)
        [shared] = await book.actions()
        assert (shared.id, shared.status, shared.node) == ("3f2a9c", "done", "n7")
        successor = ActionPlanner(cfg.model_copy(update={"mode": "enforce", "max_nodes_per_window": 1,
                                                         "policies": [ActionPolicy(name="ecc", rules=["gpu_ecc_uncorrectable"],
                                                                                   action="command")]}))  # fmt: skip
        successor.record(shared)
        other = Alert(rule="gpu_ecc_uncorrectable", severity="critical", fingerprint="fp2", state="firing", cluster="c",
                      node="n8", summary="ecc", started_at=iso(time.time_ns()) or "", updated_at="")  # fmt: skip
        [decided] = successor.plan([other], {"c": 100}, set(), time.time_ns())
        assert decided.status == "breaker_open"
        # the lead that claimed it may run it again (a restart finishing what it began); no other may
        winner = next(f"lead-{i}" for i, (_, steps, _) in enumerate(leads[:2]) if steps[-1].status == "done")
        assert await book.claim_action("3f2a9c", winner) and not await book.claim_action("3f2a9c", "lead-2")
        assert await book.purge_old_actions(time.time_ns() + 1) == 2  # its claim and its state
        assert await book.actions() == []
    finally:
        for task in tasks:
            task.cancel()
        for _, _, nc in leads:
            await nc.close()
