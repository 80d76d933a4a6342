"""The action executors against real peers: an HTTP webhook receiver (aiohttp) that checks the HMAC, a command in a
real process, the nvidia-resiliency-ext exclusion file read back by the consumer's rules, and the Kubernetes cordon
against the API server stand-in (tests/k8s_fake.py); retries, refusals and the audit through the runner."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import re
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from ranksight.aggregator.actions.executors import KubernetesExecutor
from ranksight.aggregator.actions.model import Action, ActionRefused
from ranksight.aggregator.actions.planner import ActionPlanner
from ranksight.aggregator.actions.runner import ActionRunner
from ranksight.aggregator.actions.settings import ActionSettings
from tests.k8s_fake import FakeApiServer

SECRET = "s3cret-key"


def _action(kind: str, node: str = "n1", job: str | None = None) -> Action:
    return Action(id="act-1", policy="p", action=kind, mode="enforce", cluster="c", node=node, job=job,
                  rule="gpu_ecc_uncorrectable", severity="critical", fingerprint="fp", incident_started="2026-01-01T00:00:00Z",
                  summary="2 uncorrectable ECC errors", status="queued", at_ns=time.time_ns())  # fmt: skip


async def _serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


async def _run(settings: ActionSettings, *actions: Action) -> tuple[ActionRunner, list[Action]]:
    """Run ``actions`` through a runner; every audited step, in order."""
    steps: list[Action] = []

    async def audit(batch: list[Action]) -> None:
        steps.extend(batch)

    runner = ActionRunner(settings, ActionPlanner(settings), audit)
    task = asyncio.create_task(runner.run())
    runner.submit(list(actions))
    await runner.wait_idle(60)
    task.cancel()
    return runner, steps


class Receiver:
    """A webhook receiver as an operator would write one: verifies the signature, answers 500 ``failures`` times."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.received: list[dict[str, Any]] = []
        self.bad_signatures = 0

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, request.headers.get("X-Ranksight-Signature", "")):
            self.bad_signatures += 1
            return web.Response(status=401, text="bad signature")
        if self.failures:
            self.failures -= 1
            return web.Response(status=500, text="try later")
        self.received.append({"id": request.headers["X-Ranksight-Action-Id"], **json.loads(body)})
        return web.Response(status=204)


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[Receiver, str]]:
    hook = Receiver(failures=2)
    app = web.Application()
    app.router.add_post("/hook", hook.handle)
    runner, url = await _serve(app)
    yield hook, url + "/hook"
    await runner.cleanup()


def _settings(**kw: Any) -> ActionSettings:
    return ActionSettings(
        **{"retry_base_s": 0.05, "retry_max_s": 0.1, "max_attempts": 4, "timeout_s": 10, **kw}
    )


async def test_signed_webhook_is_retried_until_accepted(receiver: tuple[Receiver, str]) -> None:
    hook, url = receiver
    _, steps = await _run(_settings(webhook={"url": url, "secret": SECRET}), _action("webhook"))
    assert [s.status for s in steps] == [
        "queued",
        "running",
        "retrying",
        "running",
        "retrying",
        "running",
        "done",
    ]
    assert "HTTP 500" in steps[2].result
    [got] = hook.received
    assert got["id"] == "act-1" and got["event"] == "apply"
    assert got["finding"]["rule"] == "gpu_ecc_uncorrectable" and got["finding"]["node"] == "n1"
    assert hook.bad_signatures == 0


async def test_webhook_with_a_wrong_secret_is_refused_not_retried(receiver: tuple[Receiver, str]) -> None:
    hook, url = receiver
    _, steps = await _run(_settings(webhook={"url": url, "secret": "wrong"}), _action("webhook"))
    assert [s.status for s in steps] == ["queued", "running", "refused"]
    assert "HTTP 401" in steps[-1].result and hook.bad_signatures == 1 and not hook.received


async def test_webhook_down_fails_after_bounded_tries() -> None:
    settings = _settings(webhook={"url": "http://127.0.0.1:9/hook"}, max_attempts=3)
    runner, steps = await _run(settings, _action("webhook"))
    assert [s.status for s in steps][-1] == "failed" and steps[-1].attempts == 3
    assert "gave up after 3 tries" in steps[-1].result and runner.stats.failed == 1


async def test_command_gets_the_finding_on_stdin(tmp_path: Path) -> None:
    out = tmp_path / "got.json"
    script = ("import json, os, sys; d = json.load(sys.stdin); "
              f"open({str(out)!r}, 'a').write(json.dumps([os.environ['RANKSIGHT_ACTION'], d]) + '\\n'); "
              "print('handled', d['node'])")  # fmt: skip
    settings = _settings(command={"argv": [sys.executable, "-c", script]})
    _, steps = await _run(settings, _action("command"))
    assert steps[-1].status == "done" and steps[-1].result == "handled n1"
    [(event, finding)] = [json.loads(line) for line in out.read_text().splitlines()]
    assert (
        event == "apply" and finding["id"] == "act-1" and finding["summary"] == "2 uncorrectable ECC errors"
    )


async def test_a_failing_command_is_retried_then_reported(tmp_path: Path) -> None:
    settings = _settings(command={"argv": [sys.executable, "-c", "import sys; print('no scheduler'); sys.exit(3)"]},
                         max_attempts=2)  # fmt: skip
    _, steps = await _run(settings, _action("command"))
    assert [s.status for s in steps] == ["queued", "running", "retrying", "running", "failed"]
    assert "exited 3: no scheduler" in steps[-1].result


# NVRx's consumer (fault_tolerance/scheduler_exclusion.py): the first record must match this compact grammar; a task is
# excluded when its quoted id is in it; the file's mtime must be younger than 30 minutes.
NVRX_COMPACT = re.compile(rb'\[(?:"[0-9]+"(?:,"[0-9]+")*)?\]')
NVRX_MAX_AGE_S = 30 * 60


def nvrx_task_excluded(directory: Path, array_job: str, task: str) -> bool:
    path = directory / f"scheduler_exclusion.{array_job}.jsonl"
    data = path.read_bytes()
    assert data.endswith(b"\n"), "every record is newline-terminated"
    first = data.split(b"\n", 1)[0]
    assert NVRX_COMPACT.fullmatch(first), first
    assert os.stat(path).st_mtime + NVRX_MAX_AGE_S > time.time()
    return b'"' + task.encode() + b'"' in first


async def test_nvrx_exclusion_file_is_read_back_in_their_format(tmp_path: Path) -> None:
    settings = _settings(exclusion={"directory": str(tmp_path)})
    _, steps = await _run(settings, _action("nvrx_exclusion", "n1", "4242_7"),
                          _action("nvrx_exclusion", "n2", "4242_17").__class__(**{
                              **_action("nvrx_exclusion", "n2", "4242_17").__dict__, "id": "act-2"}))  # fmt: skip
    assert [s.status for s in steps if s.status in ("done", "failed", "refused")] == ["done", "done"]
    assert nvrx_task_excluded(tmp_path, "4242", "7") and nvrx_task_excluded(tmp_path, "4242", "17")
    assert not nvrx_task_excluded(tmp_path, "4242", "1")
    lines = [
        json.loads(line) for line in (tmp_path / "scheduler_exclusion.4242.jsonl").read_text().splitlines()
    ]
    assert lines[0] == ["7", "17"]  # numeric order, as NVRx sorts task generations
    tasks, nodes = lines[1], lines[2]
    assert tasks["type"] == "decision" and tasks["scope"] == "array_task" and tasks["schema_version"] == 1
    assert tasks["job_id"] == "4242" and [t["task_id"] for t in tasks["excluded_array_tasks"]] == ["7", "17"]
    assert nodes["scope"] == "node" and [n["node"] for n in nodes["excluded_nodes"]] == ["n1", "n2"]
    assert [(o["type"], o["node"], o["state"]) for o in lines[3:]] == [("observation", "n1", "DRAIN"),
                                                                      ("observation", "n2", "DRAIN")]  # fmt: skip
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", o["valid_until"]) for o in lines[3:])
    # undo: the node's task is no longer excluded, the other stays; no temporary file left behind
    runner = ActionRunner(settings, ActionPlanner(settings), _noop)
    task = asyncio.create_task(runner.run())
    runner.request_undo(_action("nvrx_exclusion", "n1", "4242_7"), "alice", "node repaired")
    await runner.wait_idle(30)
    task.cancel()
    assert not nvrx_task_excluded(tmp_path, "4242", "7") and nvrx_task_excluded(tmp_path, "4242", "17")
    assert os.listdir(tmp_path) == ["scheduler_exclusion.4242.jsonl"]


async def _noop(actions: list[Action]) -> None:
    return None


@pytest.fixture
async def apiserver(tmp_path: Path) -> AsyncIterator[tuple[FakeApiServer, ActionSettings]]:
    fake = FakeApiServer("tok-123", ["n1", "n2", "n3"])
    runner, url = await _serve(fake.app())
    (tmp_path / "token").write_text("tok-123\n")
    yield fake, _settings(kubernetes={"api_url": url, "token_file": str(tmp_path / "token")})
    await runner.cleanup()


async def test_cordon_taint_and_uncordon(apiserver: tuple[FakeApiServer, ActionSettings]) -> None:
    fake, settings = apiserver
    executor = KubernetesExecutor(settings)
    await executor.apply(_action("k8s_cordon"))
    node = fake.nodes["n1"]
    assert node["spec"]["unschedulable"] is True and node["spec"]["podCIDR"] == "10.0.0.0/24"
    assert node["spec"]["taints"] == [{"key": "ranksight.io/finding", "value": "gpu_ecc_uncorrectable",
                                       "effect": "NoSchedule"}]  # fmt: skip
    await executor.undo(_action("k8s_cordon"))
    assert "unschedulable" not in fake.nodes["n1"]["spec"] and "taints" not in fake.nodes["n1"]["spec"]


async def test_cordon_keeps_other_taints_and_leaves_foreign_cordons(
    apiserver: tuple[FakeApiServer, ActionSettings],
) -> None:
    fake, settings = apiserver
    other = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    fake.nodes["n2"]["spec"]["taints"] = [other]
    executor = KubernetesExecutor(settings)
    await executor.apply(_action("k8s_cordon", "n2"))
    assert fake.nodes["n2"]["spec"]["taints"][0] == other and len(fake.nodes["n2"]["spec"]["taints"]) == 2
    await executor.undo(_action("k8s_cordon", "n2"))
    assert fake.nodes["n2"]["spec"]["taints"] == [other]
    fake.nodes["n3"]["spec"]["unschedulable"] = True  # kubectl cordon by an operator
    with pytest.raises(ActionRefused, match="cordoned by someone else"):
        await executor.apply(_action("k8s_cordon", "n3"))
    assert (await executor.undo(_action("k8s_cordon", "n3"))).startswith(
        "n3 has no ranksight.io/finding taint"
    )
    assert fake.nodes["n3"]["spec"]["unschedulable"] is True


async def test_k8s_conflict_is_retried_and_forbidden_is_refused(
    apiserver: tuple[FakeApiServer, ActionSettings],
) -> None:
    fake, settings = apiserver
    fake.conflicts_left = 1
    _, steps = await _run(settings, _action("k8s_cordon"))
    assert [s.status for s in steps] == ["queued", "running", "retrying", "running", "done"]
    assert "HTTP 409" in steps[2].result
    fake.forbidden.add("n2")
    _, steps = await _run(settings, _action("k8s_cordon", "n2"))
    assert steps[-1].status == "refused" and "HTTP 403" in steps[-1].result
    with pytest.raises(ActionRefused, match="HTTP 401"):  # no token: another try cannot help
        bad = settings.model_copy(
            update={"kubernetes": settings.kubernetes.model_copy(update={"token_file": None})}
        )
        await KubernetesExecutor(bad).apply(_action("k8s_cordon", "n3"))
