"""The job_signal action end to end: a training process (a real Python process using ranksight.client, its callback
registered with on_action) hangs in a section; the aggregator's rank_section_overdue alert fires; the policy asks the
job to checkpoint; the node's real agent relays it over the app socket; the process's callback runs, it checkpoints
and exits. Also: no process of the job connected -> retried, then reported failed."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ranksight.aggregator.actions.settings import ActionSettings
from ranksight.settings import Settings
from tests.support import agent, aggregator, wait_for

TRAINER = """
import sys, threading, time
from ranksight import client

out, told = sys.argv[1], threading.Event()
def on_action(request):
    open(out, "a").write(f"{request['action']} {request['rule']} {request['id']}\\n")
    told.set()

client.configure(sys.argv[2], heartbeat_interval_s=0)
client.on_action(on_action)
client.start()
with client.section("allreduce_wait"):  # stuck here, as a rank waiting on a dead peer is
    deadline = time.monotonic() + 60
    while not told.is_set() and time.monotonic() < deadline:
        client.heartbeat(step=1)
        time.sleep(0.1)
open(out, "a").write("checkpointed\\n" if told.is_set() else "never told\\n")
"""


@pytest.fixture
def signal_settings(settings: Settings) -> Iterator[Settings]:
    with tempfile.TemporaryDirectory(prefix="rs-sig-") as d:  # Unix socket paths are limited to 107 bytes
        app = settings.agent.collectors.app
        app.socket_path = Path(d) / "app.sock"
        app.heartbeat_timeout_s, app.heartbeat_initial_timeout_s, app.section_timeout_s = 60, 60, 0.5
        policy = {"name": "checkpoint-hung", "rules": ["rank_section_overdue"], "action": "job_signal",
                  "signal": "checkpoint"}  # fmt: skip
        settings.aggregator.actions = ActionSettings(mode="enforce", policies=[policy], retry_base_s=0.2,  # type: ignore[list-item]
                                                     max_attempts=3, max_cluster_fraction=1.0)  # fmt: skip
        yield settings


async def test_a_hung_rank_is_told_to_checkpoint(signal_settings: Settings, tmp_path: Path) -> None:
    out = tmp_path / "trainer.out"
    env = {**os.environ, "RANK": "3", "WORLD_SIZE": "8", "SLURM_JOB_ID": "4242"}
    async with aggregator(signal_settings) as agg, agent(signal_settings, only=["app"]):
        proc = subprocess.Popen([sys.executable, "-c", TRAINER, str(out), str(signal_settings.agent.collectors.app.socket_path)],
                                env=env)  # fmt: skip
        try:
            await wait_for(lambda: out.exists() and "checkpointed" in out.read_text(), timeout=40)
            assert await asyncio.to_thread(proc.wait, 20) == 0
        finally:
            proc.kill()
        told, done = out.read_text().splitlines()
        [action] = agg.actions.planner.actions.values()
        assert told == f"checkpoint rank_section_overdue {action.id}" and done == "checkpointed"
        assert (action.status, action.node, action.job) == ("done", "node-a", "4242")
        assert "checkpoint sent to 1 process(es) of job 4242" in action.result


async def test_no_process_to_tell_is_retried_then_reported(signal_settings: Settings) -> None:
    from ranksight.aggregator.actions.model import Action

    async with aggregator(signal_settings) as agg, agent(signal_settings, only=["app"]):
        lonely = Action(id="x1", policy="checkpoint-hung", action="job_signal", mode="enforce", cluster="test",
                        node="node-a", job="999", rule="rank_section_overdue", severity="warning", fingerprint="f",
                        incident_started="2026-01-01T00:00:00Z", summary="s", status="queued", at_ns=0,
                        detail={"signal": "exit"})  # fmt: skip
        agg.actions.runner.submit([lonely])
        await wait_for(lambda: agg.actions.planner.actions.get("x1") is not None
                       and agg.actions.planner.actions["x1"].status == "failed", timeout=20)  # fmt: skip
        failed = agg.actions.planner.actions["x1"]
        assert failed.attempts == 3 and "no process of job 999 on node-a is connected" in failed.result


async def test_the_agent_relays_only_known_requests(signal_settings: Settings) -> None:
    """Whatever reaches the agent's app_signal command, only checkpoint or exit is ever relayed to a process."""
    from ranksight.core.natsconn import connect
    from ranksight.schemas.subjects import Subjects

    async with agent(signal_settings, only=["app"]):
        nc = await connect(signal_settings.nats, "test-signal")
        subject = Subjects(signal_settings.subject_prefix).agent("test", "node-a", "app_signal")
        try:
            for body in (b'{"action": "rm -rf /"}', b'{"action": "exit", "job": 42}', b"[1, 2]", b"not json"):
                reply = await nc.request(subject, body, timeout=5)
                assert (reply.headers or {}).get("Nats-Service-Error-Code") == "400", body
            ok = await nc.request(subject, b'{"action": "exit", "job": "nobody", "reason": "' + b"x" * 5000 + b'"}',
                                  timeout=5)  # fmt: skip
            assert json.loads(ok.data) == {"delivered": 0, "pids": []}
        finally:
            await nc.close()
