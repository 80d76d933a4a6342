"""Running actions in their own task: the tick hands decisions over (never waits), workers audit and execute them.

Every step is one ``action_audit`` row (who, what, why, result). The queue is bounded (``queue_size``): a decision
that does not fit is refused, counted and logged, never waited for. An executor's try is bounded by ``timeout_s``; a
failure another try may fix is retried ``max_attempts`` times with a doubling delay (``retry_base_s`` up to
``retry_max_s``); a refusal is final. Sharded, an action is claimed in the alert KV bucket (``action.<id>``, created
only if absent) before it runs, so an analysis lead that takes over never runs what its predecessor ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from ranksight.aggregator.actions.executors import AskAgent, Executor, executors
from ranksight.aggregator.actions.model import Action, ActionFailed, ActionRefused, Status
from ranksight.aggregator.actions.planner import ActionPlanner
from ranksight.aggregator.actions.settings import ActionSettings
from ranksight.aggregator.timefmt import iso
from ranksight.core.aio import cancel_all

log = logging.getLogger(__name__)
WORKERS = 4  # actions run at once: one slow API server must not hold up a drain elsewhere

Audit = Callable[[list[Action]], Awaitable[None]]  # where steps are written
Claim = Callable[[Action], Awaitable[bool]]  # True if this aggregator may run the action (sharded: KV create)


@dataclass
class RunnerStats:
    refused_full: int = 0  # decisions the full queue refused
    audit_failed: int = 0  # audit rows that could not be written (logged)
    done: int = 0
    failed: int = 0


@dataclass(frozen=True)
class Job:
    kind: Literal["record", "apply", "undo"]
    action: Action


class ActionRunner:
    def __init__(self, settings: ActionSettings, planner: ActionPlanner, audit: Audit, claim: Claim | None = None,
                 ask_agent: AskAgent | None = None, share: Audit | None = None) -> None:  # fmt: skip
        self.settings, self.planner, self.audit, self.claim = settings, planner, audit, claim
        self.share = share  # sharded: each step also where the next analysis lead reads it
        self.queue: asyncio.Queue[Job] = asyncio.Queue(settings.queue_size)
        self.make = executors(settings, ask_agent)
        self.built: dict[str, Executor] = {}
        self.stats = RunnerStats()
        self.idle = asyncio.Event()
        self.idle.set()
        self._busy = 0

    # -- handing over (never blocks) ---------------------------------------------------------------------------------
    def submit(self, actions: list[Action]) -> None:
        """Decisions of a tick: ``queued`` ones to run, the others to audit."""
        for action in actions:
            self._put(Job("apply" if action.status == "queued" else "record", action))

    def request_undo(self, action: Action, who: str, why: str) -> Action:
        """Undo a done action (an operator's ``action undo``, or its incident resolved)."""
        moving = action.moved("undoing", time.time_ns(), who=who, why=why)
        self.planner.record(moving)
        self._put(Job("undo", moving))
        return moving

    def _put(self, job: Job) -> None:
        try:
            self.queue.put_nowait(job)
            self.idle.clear()
        except asyncio.QueueFull:
            self.stats.refused_full += 1
            log.error("action queue full (aggregator.actions.queue_size %d): %s %s on %s not %s",
                      self.settings.queue_size, job.action.policy, job.action.action, job.action.node,
                      "run" if job.kind != "record" else "audited")  # fmt: skip

    # -- the task ----------------------------------------------------------------------------------------------------
    async def run(self) -> None:
        workers = [asyncio.create_task(self._work(), name=f"action-{i}") for i in range(WORKERS)]
        try:
            await asyncio.gather(*workers)
        finally:
            await cancel_all(workers)

    async def _work(self) -> None:
        while True:
            job = await self.queue.get()
            self._busy += 1
            try:
                if job.kind == "record":
                    await self._step(job.action)
                else:
                    await self._execute(job)
            except Exception:  # an action must never end the runner
                log.exception("action %s failed unexpectedly", job.action.id)
            finally:
                self._busy -= 1
                self.queue.task_done()
                if self.queue.empty() and not self._busy:
                    self.idle.set()

    async def _step(self, action: Action, shared: bool = True) -> Action:
        """Record, audit and (sharded) share a step; ``shared=False``: this aggregator's own view only."""
        self.planner.record(action)
        try:
            await self.audit([action])
            if self.share is not None and shared:
                await self.share([action])
        except Exception:
            self.stats.audit_failed += 1
            log.exception("audit of action %s (%s) not written", action.id, action.status)
        return action

    async def _execute(self, job: Job) -> None:
        action = job.action
        undo = job.kind == "undo"
        if not undo and self.claim is not None and not await self.claim(action):
            # the lead that claimed it says where it stands (sharded): this view stays with this aggregator
            await self._step(action, shared=False)
            await self._step(action.moved("skipped", time.time_ns(), why="claimed by another analysis lead"),
                             shared=False)  # fmt: skip
            return
        await self._step(action)
        executor = self.built.get(action.action) or self.built.setdefault(
            action.action, self.make[action.action]()
        )
        done: Status = "undone" if undo else "done"
        failed: Status = "undo_failed" if undo else "failed"
        delay = self.settings.retry_base_s
        for attempt in range(1, self.settings.max_attempts + 1):
            now = time.time_ns()
            action = action.moved("undoing" if undo else "running", now, attempts=attempt, result="")
            if not undo:
                await self._step(action)
            try:
                call = executor.undo(action) if undo else executor.apply(action)
                result = await asyncio.wait_for(call, self.settings.timeout_s)
            except ActionRefused as exc:
                await self._step(
                    action.moved("refused" if not undo else failed, time.time_ns(), result=str(exc))
                )
                self.stats.failed += 1
                return
            except (ActionFailed, TimeoutError) as exc:
                why = str(exc) or f"no answer within timeout_s ({self.settings.timeout_s:g} s)"
                if attempt == self.settings.max_attempts:
                    await self._step(
                        action.moved(failed, time.time_ns(), result=f"gave up after {attempt} tries: {why}")
                    )
                    self.stats.failed += 1
                    return
                await self._step(action.moved("retrying", time.time_ns(), result=f"try {attempt}: {why}; "
                                              f"next in {delay:g} s"))  # fmt: skip
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.settings.retry_max_s)
                continue
            await self._step(action.moved(done, time.time_ns(), result=result))
            self.stats.done += 1
            return

    async def wait_idle(self, timeout_s: float) -> None:
        """Until every handed-over job has been audited and run (tests, a clean stop)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.idle.wait(), timeout_s)


_SEQ = itertools.count()


def audit_rows(actions: list[Action]) -> list[dict[str, Any]]:
    """``action_audit`` rows of action steps."""
    return [{"id": a.id, "step_at": iso(a.at_ns), "seq": next(_SEQ), "step": a.status, "who": a.who, "why": a.why, "result": a.result,
             "policy": a.policy, "action": a.action, "mode": a.mode, "cluster": a.cluster, "node": a.node,
             "job": a.job, "rule": a.rule, "severity": a.severity, "fingerprint": a.fingerprint,
             "incident_started": a.incident_started, "summary": a.summary, "attempts": a.attempts,
             "detail": json.dumps(a.detail, default=str)} for a in actions]  # fmt: skip
