"""One action per incident across an analysis-lead failover: two leads (each with its own NATS connection and alert
book on the real JetStream KV bucket) decide the same incident; only the one that claims ``action.<id>`` first runs
it, the other audits it as claimed; and a lead that restarts and decides again does not run it either."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from ranksight.aggregator.actions.model import Action
from ranksight.aggregator.actions.planner import ActionPlanner
from ranksight.aggregator.actions.runner import ActionRunner
from ranksight.aggregator.lead import AlertBook
from ranksight.core.config import ActionSettings, Settings
from ranksight.core.natsconn import connect

SCRIPT = "import json, sys; open(sys.argv[1], 'a').write(json.load(sys.stdin)['id'] + '\\n')"


def _incident() -> Action:
    return Action(id="3f2a9c", policy="ecc", action="command", mode="enforce", cluster="c", node="n7", job=None,
                  rule="gpu_ecc_uncorrectable", severity="critical", fingerprint="fp", summary="ecc",
                  incident_started="2026-12-01T10:00:00.000000Z", status="queued", at_ns=1)  # fmt: skip


async def _lead(
    settings: Settings, name: str, cfg: ActionSettings
) -> tuple[ActionRunner, list[Action], object]:
    nc = await connect(settings.nats, name)
    book = AlertBook(nc.jetstream(), "test_actions_claims", 1024 * 1024, 1)
    steps: list[Action] = []

    async def audit(batch: list[Action]) -> None:
        steps.extend(batch)

    return ActionRunner(cfg, ActionPlanner(cfg), audit, lambda a: book.claim_action(a.id)), steps, nc


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
    finally:
        for task in tasks:
            task.cancel()
        for _, _, nc in leads:
            await nc.close()  # type: ignore[attr-defined]
