"""Profiling on demand: turn a job's profiler events on when its RAS or hardware signals look wrong, and off again
after a bounded time (``aggregator.profile_on_demand``, off by default).

When an alert of the configured rules fires for a job, the aggregator asks the agent that polls the job (the job's
``node`` in live state) to send RAS ``CONTROL PROFILER_MASK`` (its ``ras_profile`` command; the agent refuses unless its
``profile_control`` is on), so an Inspector plugin loaded with mask 0 starts recording; ``on_s`` later it asks for 0
again. Only a job whose RAS status names NCCL 2.31 or later is asked (older releases have no CONTROL). Guard rails: at
most ``max_jobs`` jobs at once, one profiling period per job at a time (an alert firing again within it changes
nothing), every failure counted and logged, never raised into the alert path; at shutdown the jobs still profiled are
turned off.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import nats.errors

from ranksight.aggregator.component_settings import ProfileOnDemandSettings
from ranksight.schemas.alerts import Alert

if TYPE_CHECKING:
    from ranksight.aggregator.runtime import Aggregator

log = logging.getLogger(__name__)
COMMAND = "ras_profile"
CONTROL_SINCE = (2, 31)
_VERSION = re.compile(r"(\d+)\.(\d+)")


def supports_control(version: str | None) -> bool:
    """Whether a RAS status version (``2.31.0``, ``NCCL 2.32.3``) has CONTROL PROFILER_MASK."""
    match = _VERSION.search(version or "")
    return match is not None and (int(match[1]), int(match[2])) >= CONTROL_SINCE


@dataclass
class ProfilingStats:
    turned_on: int = 0
    turned_off: int = 0
    unsupported: int = 0  # the job's NCCL has no CONTROL, or its version is unknown
    over_limit: int = 0  # max_jobs were profiled already
    failed: int = 0  # the agent refused or did not answer


class ProfileOnDemand:
    def __init__(self, settings: ProfileOnDemandSettings) -> None:
        self.settings = settings
        self.stats = ProfilingStats()
        self.active: dict[tuple[str, str], str] = {}  # (cluster, job) -> the agent node asked
        self._tasks: set[asyncio.Task[None]] = set()

    def submit(self, agg: Aggregator, transitions: list[Alert]) -> None:
        cfg = self.settings
        if not cfg.enabled or agg.nc is None:
            return
        for alert in transitions:
            if alert.state != "firing" or alert.rule not in cfg.rules or alert.job is None:
                continue
            key = (alert.cluster, alert.job)
            job = agg.state.jobs.jobs.get(key)
            if job is None or key in self.active:
                continue
            if not supports_control(job.version):
                self.stats.unsupported += 1
                continue
            if len(self.active) >= cfg.max_jobs:
                self.stats.over_limit += 1
                continue
            self.active[key] = job.node
            task = asyncio.create_task(
                self._period(agg, key, job.node, alert.rule), name=f"profile-{alert.job}"
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _period(self, agg: Aggregator, key: tuple[str, str], node: str, rule: str) -> None:
        try:
            if not await self._ask(agg, key, node, self.settings.value):
                return
            self.stats.turned_on += 1
            log.info("profiling job %s on (%s fired), off in %gs", key[1], rule, self.settings.on_s)
            await asyncio.sleep(self.settings.on_s)
            if await self._ask(agg, key, node, "off"):
                self.stats.turned_off += 1
        finally:
            self.active.pop(key, None)

    async def _ask(self, agg: Aggregator, key: tuple[str, str], node: str, value: str) -> bool:
        assert agg.nc is not None
        subject = agg.subjects.agent(key[0], node, COMMAND)
        try:
            msg = await agg.nc.request(
                subject, json.dumps({"value": value}).encode(), timeout=self.settings.timeout_s
            )
        except (nats.errors.Error, OSError) as exc:
            self.stats.failed += 1
            log.warning("profiling job %s: agent %s did not answer %s: %s", key[1], node, value, exc)
            return False
        error = (msg.headers or {}).get("Nats-Service-Error")
        if error:
            self.stats.failed += 1
            log.warning("profiling job %s: agent %s refused %s: %s", key[1], node, value, error)
            return False
        return True

    async def stop(self, agg: Aggregator) -> None:
        """Cancel the periods and turn profiling off for the jobs still profiled (best effort)."""
        active = dict(self.active)
        for task in list(self._tasks):
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if agg.nc is not None:
            for key, node in active.items():
                if await self._ask(agg, key, node, "off"):
                    self.stats.turned_off += 1
