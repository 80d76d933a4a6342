"""What each action kind does, and how it is undone. Thin I/O around pure parsing; each try is bounded by
``aggregator.actions.timeout_s`` (the runner's), raises :class:`ActionFailed` when another try may help and
:class:`ActionRefused` when none can.

- ``slurm_drain``: ``scontrol show node`` first (a node already DRAIN/DOWN/FAIL for another reason is someone else's:
  refused), then ``scontrol update NodeName=<node> State=DRAIN Reason="<prefix> <rule> <summary>"``; undone with
  ``State=RESUME`` only while the node is still drained with ranksight's reason prefix.
- ``k8s_cordon``: reads the Node from the API server; one JSON merge patch (RFC 7386) sets ``spec.unschedulable`` and
  adds a ``NoSchedule`` taint (key ``kubernetes.taint_key``, value the rule), carrying the read ``resourceVersion`` so
  a concurrent change answers 409 (retried). A node cordoned without ranksight's taint is someone else's: refused.
- ``nvrx_exclusion``: the node goes into nvidia-resiliency-ext's scheduler-exclusion artifact (:mod:`.nvrx`).
- ``webhook``: POST the finding as JSON, signed ``X-Ranksight-Signature: sha256=<HMAC-SHA256 hex of the body>``, with
  ``X-Ranksight-Action-Id`` for the receiver's own idempotence; 2xx is done, 408/429/5xx are retried, other 4xx refused.
- ``command``: the configured argv with the finding as JSON on stdin and ``RANKSIGHT_ACTION`` = apply | undo; exit 0
  is done, anything else is retried.
- ``job_signal``: asks the node's agent (its ``app_signal`` command) to tell the job's processes, through their
  ``ranksight.client`` connection, to checkpoint now or exit for a restart; done once at least one process was told,
  retried while none was (the agent down, no process of the job connected yet). A signal cannot be undone.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import re
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import aiohttp

from ranksight.aggregator.actions import nvrx
from ranksight.aggregator.actions.model import Action, ActionFailed, ActionRefused
from ranksight.aggregator.actions.settings import ActionSettings

MAX_OUTPUT = 2000  # characters of a command's output kept in the audit
MAX_REASON = 200  # characters of a Slurm reason (it shows in sinfo -R)
UNAVAILABLE = ("DRAIN", "DOWN", "FAIL")  # Slurm node state flags that take a node out of scheduling


class Executor(Protocol):
    async def apply(self, action: Action) -> str: ...

    async def undo(self, action: Action) -> str: ...


# -- Slurm ----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SlurmNode:
    state: str  # e.g. IDLE+DRAIN, MIXED, DOWN*+DRAIN
    reason: str  # empty when none

    @property
    def unavailable(self) -> bool:
        return any(flag in self.state for flag in UNAVAILABLE)


def parse_show_node(text: str) -> SlurmNode:
    """``scontrol show node NAME`` output -> state and reason. ``Reason=`` runs to the end of its line (it may hold
    spaces) and ends with `` [user@time]``, which Slurm appends."""
    state = re.search(r"\bState=(\S+)", text)
    if state is None:
        raise ActionFailed(f"scontrol show node: no State= in {text[:200]!r}")
    reason = re.search(r"\bReason=(.*)$", text, re.MULTILINE)
    why = re.sub(r"\s*\[[^\]]*@[^\]]*\]\s*$", "", reason.group(1)).strip() if reason else ""
    return SlurmNode(state.group(1), "" if why == "(null)" else why)


def slurm_reason(prefix: str, action: Action) -> str:
    """``<prefix> <rule> <summary>``, on one line, without quotes (scontrol's own quoting stays simple)."""
    text = re.sub(r"[\x00-\x1f\"'\\]+", " ", f"{prefix} {action.rule} {action.summary}")
    return " ".join(text.split())[:MAX_REASON]


Run = Callable[[list[str]], Awaitable[tuple[int, str]]]


async def run_command(
    argv: list[str], stdin: bytes = b"", env: dict[str, str] | None = None
) -> tuple[int, str]:
    """Run ``argv`` (no shell); its exit status and output (stdout and stderr, bounded)."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, **(env or {})})  # fmt: skip
    except OSError as exc:
        raise ActionFailed(f"{argv[0]} did not start: {exc.strerror or exc}") from None
    try:
        out, _ = await proc.communicate(stdin)
    except asyncio.CancelledError:
        proc.kill()
        await proc.wait()
        raise
    return proc.returncode or 0, out.decode(errors="replace")[-MAX_OUTPUT:]


class SlurmExecutor:
    def __init__(self, settings: ActionSettings, run: Run | None = None) -> None:
        self.scontrol = settings.slurm.scontrol
        self.prefix = settings.slurm.reason_prefix
        self.run = run or run_command

    async def _scontrol(self, *args: str) -> str:
        code, out = await self.run([self.scontrol, *args])
        if code != 0:
            raise ActionFailed(f"scontrol {args[0]} failed ({code}): {out.strip()}")
        return out

    async def show(self, node: str) -> SlurmNode:
        return parse_show_node(await self._scontrol("show", "node", node))

    async def apply(self, action: Action) -> str:
        node = _node(action)
        before = await self.show(node)
        if before.unavailable:
            if before.reason.startswith(self.prefix):
                return f"already drained by ranksight: {before.reason}"
            raise ActionRefused(
                f"{node} is already {before.state} by someone else: {before.reason or 'no reason'}"
            )
        reason = slurm_reason(self.prefix, action)
        await self._scontrol("update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}")
        after = await self.show(node)
        if "DRAIN" not in after.state:
            raise ActionFailed(f"{node} is {after.state} after the drain")
        return f"{node} {after.state}: {after.reason}"

    async def undo(self, action: Action) -> str:
        node = _node(action)
        before = await self.show(node)
        if not before.unavailable:
            return f"{node} is {before.state}: nothing to resume"
        if not before.reason.startswith(self.prefix):
            raise ActionRefused(
                f"{node} is {before.state} by someone else now ({before.reason}): not resumed"
            )
        await self._scontrol("update", f"NodeName={node}", "State=RESUME")
        after = await self.show(node)
        return f"{node} {after.state}"


def _node(action: Action) -> str:
    if not action.node:
        raise ActionRefused(f"{action.rule} names no node: {action.action} needs one")
    return action.node


# -- HTTP (Kubernetes, webhook) -------------------------------------------------------------------------------------
def _retryable(status: int) -> bool:
    return status in (408, 409, 429) or status >= 500


async def _http(session: aiohttp.ClientSession, method: str, url: str, what: str, **kw: Any) -> Any:
    try:
        async with session.request(method, url, **kw) as resp:
            body = await resp.read()
            if resp.status >= 300:
                text = body[:300].decode(errors="replace")
                error = ActionFailed if _retryable(resp.status) else ActionRefused
                raise error(f"{what}: HTTP {resp.status}: {text}")
            return json.loads(body) if body and resp.content_type == "application/json" else body
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise ActionFailed(f"{what}: {type(exc).__name__}: {exc}") from None


class KubernetesExecutor:
    def __init__(self, settings: ActionSettings) -> None:
        k = settings.kubernetes
        self.url, self.taint_key, self.timeout_s = k.api_url.rstrip("/"), k.taint_key, settings.timeout_s
        self.token_file, self.ca_file = k.token_file, k.ca_file

    def _session(self) -> aiohttp.ClientSession:
        headers = {"Accept": "application/json"}
        if (
            self.token_file is not None and self.token_file.exists()
        ):  # read each time: service account tokens rotate
            headers["Authorization"] = f"Bearer {self.token_file.read_text().strip()}"
        ctx = ssl.create_default_context(cafile=str(self.ca_file)) if self.ca_file else None
        return aiohttp.ClientSession(headers=headers, timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                                     connector=aiohttp.TCPConnector(ssl=ctx) if ctx else None)  # fmt: skip

    async def _patch(self, action: Action, cordon: bool) -> str:
        node = _node(action)
        path = f"{self.url}/api/v1/nodes/{node}"
        async with self._session() as session:
            current = await _http(session, "GET", path, f"get node {node}")
            spec, meta = current.get("spec", {}), current.get("metadata", {})
            taints = [t for t in spec.get("taints") or [] if t.get("key") != self.taint_key]
            ours = len(taints) != len(spec.get("taints") or [])
            if cordon:
                if spec.get("unschedulable") and not ours:
                    raise ActionRefused(f"{node} is already cordoned by someone else")
                taints.append({"key": self.taint_key, "value": action.rule, "effect": "NoSchedule"})
            elif not ours:
                return (
                    f"{node} has no {self.taint_key} taint: not uncordoned (someone else's cordon, or none)"
                )
            patch = {"metadata": {"resourceVersion": meta.get("resourceVersion")},
                     "spec": {"unschedulable": cordon or None, "taints": taints or None}}  # fmt: skip
            await _http(session, "PATCH", path, f"patch node {node}", data=json.dumps(patch),
                        headers={"Content-Type": "application/merge-patch+json"})  # fmt: skip
        return f"{node} {'cordoned, tainted' if cordon else 'uncordoned'} {self.taint_key}={action.rule}:NoSchedule"

    async def apply(self, action: Action) -> str:
        return await self._patch(action, cordon=True)

    async def undo(self, action: Action) -> str:
        return await self._patch(action, cordon=False)


def signature(secret: bytes, body: bytes) -> str:
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


class WebhookExecutor:
    def __init__(self, settings: ActionSettings) -> None:
        w = settings.webhook
        self.url, self.timeout_s = w.url or "", settings.timeout_s
        self.secret = w.secret.get_secret_value().encode() if w.secret else None

    async def _post(self, action: Action, event: str) -> str:
        body = json.dumps({"event": event, "finding": action.finding()}, sort_keys=True).encode()
        headers = {"Content-Type": "application/json", "X-Ranksight-Action-Id": action.id,
                   "X-Ranksight-Event": event}  # fmt: skip
        if self.secret is not None:
            headers["X-Ranksight-Signature"] = signature(self.secret, body)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s)) as session:
            await _http(session, "POST", self.url, "webhook", data=body, headers=headers)
        return f"webhook accepted {event}"

    async def apply(self, action: Action) -> str:
        return await self._post(action, "apply")

    async def undo(self, action: Action) -> str:
        return await self._post(action, "undo")


class CommandExecutor:
    def __init__(self, settings: ActionSettings) -> None:
        self.argv = list(settings.command.argv)

    async def _run(self, action: Action, event: str) -> str:
        body = json.dumps(action.finding()).encode()
        code, out = await run_command(self.argv, body, {"RANKSIGHT_ACTION": event})
        if code != 0:
            raise ActionFailed(f"{self.argv[0]} exited {code}: {out.strip()}")
        return out.strip() or f"{self.argv[0]} exited 0"

    async def apply(self, action: Action) -> str:
        return await self._run(action, "apply")

    async def undo(self, action: Action) -> str:
        return await self._run(action, "undo")


class ExclusionExecutor:
    def __init__(self, settings: ActionSettings) -> None:
        assert settings.exclusion.directory is not None  # the settings refuse a policy without it
        self.directory: Path = settings.exclusion.directory
        self.valid_s = settings.exclusion.valid_s
        self.lock = (
            asyncio.Lock()
        )  # one read-modify-write of an artifact at a time: workers run actions at once

    async def _update(self, action: Action, exclude: bool) -> str:
        if not action.job:
            raise ActionRefused(f"{action.rule} names no job: an exclusion is per Slurm job")
        async with self.lock:
            path = await asyncio.to_thread(nvrx.update, self.directory, action.job, _node(action),
                                           f"ranksight: {action.rule}", exclude, self.valid_s, time.time())  # fmt: skip
        return f"{'excluded' if exclude else 'removed'} {action.node} in {path}"

    async def apply(self, action: Action) -> str:
        return await self._update(action, exclude=True)

    async def undo(self, action: Action) -> str:
        return await self._update(action, exclude=False)


AskAgent = Callable[
    [str, str, str, dict[str, Any]], Awaitable[dict[str, Any]]
]  # cluster, node, command, body


class JobSignalExecutor:
    def __init__(self, ask_agent: AskAgent) -> None:
        self.ask_agent = ask_agent

    async def apply(self, action: Action) -> str:
        signal = action.detail.get("signal", "checkpoint")
        body = {"action": signal, "job": action.job, "id": action.id, "rule": action.rule,
                "reason": f"{action.rule}: {action.summary}"}  # fmt: skip
        answer = await self.ask_agent(action.cluster, _node(action), "app_signal", body)
        if not answer.get("delivered"):
            raise ActionFailed(
                f"no process of job {action.job or '(any)'} on {action.node} is connected to its agent"
            )
        return f"{signal} sent to {answer['delivered']} process(es) of job {action.job}: pids {answer.get('pids')}"

    async def undo(self, action: Action) -> str:
        raise ActionRefused("a signal to a job cannot be undone")


class NoAction:
    """``action = "none"``: the policy only records (and, in approve mode, asks): nothing runs."""

    async def apply(self, action: Action) -> str:
        return "recorded only (action none)"

    async def undo(self, action: Action) -> str:
        return "recorded only (action none)"


def executors(
    settings: ActionSettings, ask_agent: AskAgent | None = None
) -> dict[str, Callable[[], Executor]]:
    """Each action kind's executor, built when first used (a kind no policy uses needs no settings). ``ask_agent``:
    how a command reaches a node's agent (the aggregator's NATS connection)."""
    made: dict[str, Callable[[], Executor]] = {
        "slurm_drain": lambda: SlurmExecutor(settings), "k8s_cordon": lambda: KubernetesExecutor(settings),
        "nvrx_exclusion": lambda: ExclusionExecutor(settings), "webhook": lambda: WebhookExecutor(settings),
        "command": lambda: CommandExecutor(settings), "none": NoAction}  # fmt: skip
    if ask_agent is not None:
        made["job_signal"] = lambda: JobSignalExecutor(ask_agent)
    return made
