"""The ``ras`` collector: every agent holds a MONITOR connection (``ras_event`` records); the job's lease holder polls
``STATUS`` every ``interval_s`` (``ras`` records): the text status every poll, with a JSON status's communicator detail
merged in every ``detail_every`` polls (:mod:`agent.collectors.ras.poll`), in as many records as it takes to stay
under the server's ``max_payload`` (:mod:`agent.collectors.ras.parts`). No RAS endpoint means no job on this node:
``absent``, not an error.

When an endpoint that served a job stops answering (MONITOR EOF or a refused poll), one ``ENDPOINT_CLOSED`` event (group
``RANKSIGHT``) is published for that job, so the aggregator can tell a normal end (ranks FINALIZE, then the port closes)
from a failure.

The lease holder also runs RAS diagnostics (NCCL 2.31+) once per new job, in the background and never two at once,
and publishes the report as a ``ras_diagnostics`` record (:mod:`agent.collectors.ras.diagnostics`); the
``ras_profile`` command (off unless ``profile_control``) sends ``CONTROL PROFILER_MASK`` to the endpoint.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgspec
import nats.errors

from ranksight.agent.collectors.base import Emit, StreamingCollector
from ranksight.agent.collectors.ras.control import parse_profiler_mask, profile_value
from ranksight.agent.collectors.ras.diagnostics import run_diagnostics
from ranksight.agent.collectors.ras.errors import RasClientError, RasParseError, RasRefused
from ranksight.agent.collectors.ras.jobid import (
    derived_job_id,
    endpoint_job_id,
    listener_pid,
    scheduler_job_id,
)
from ranksight.agent.collectors.ras.lease import Lease
from ranksight.agent.collectors.ras.parts import split_status
from ranksight.agent.collectors.ras.poll import client_for, poll_status
from ranksight.schemas.records import RasDiagnosticsRecord, RasEventRecord, RasRecord
from ranksight.schemas.records.ras import RasEvent, RasStatus
from ranksight.schemas.structs import to_builtins

if TYPE_CHECKING:
    from ranksight.agent.collectors.ras.settings import RasSettings
    from ranksight.agent.runtime import AgentContext

ENDPOINT_CLOSED = "ENDPOINT_CLOSED"
log = logging.getLogger(__name__)


def stop_if_cancelled() -> None:
    """End a loop whose task was asked to stop: on Python 3.11 ``wait_for`` inside a NATS or socket call can swallow
    the cancel (and a caught timeout then looks like any failed poll), so the loop checks the request itself."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class RasCollector(StreamingCollector):
    name = "ras"
    kind = "ras"
    durable = True  # job facts and events: never dropped

    def __init__(self, ctx: AgentContext, settings: RasSettings) -> None:
        super().__init__(ctx, settings)
        self.cfg = settings
        self.client = client_for(settings)
        self.lease = Lease(ctx.nc.jetstream(), settings.lease_ttl_s or 3 * settings.interval_s,
                           f"{ctx.node}:{ctx.incarnation}", replicas=ctx.settings.nats.jetstream_replicas)  # fmt: skip
        self.poll_lock = asyncio.Lock()  # never two polls at once against this node's endpoint
        self.job_id: str | None = None
        self.endpoint_id: str | None = None  # the node-local fallback id, until a job-wide one is known
        self.listener: int | None = None  # the pid last found holding the RAS port
        self.last_status: RasStatus | None = None
        self.polls = 0
        self.cycle = 0  # counts ends seen: a poll that an end overtook belongs to the ended job
        self.diagnosed: set[str] = set()  # jobs whose diagnostics ran (or were refused): once per job
        self.diagnosing: asyncio.Task[None] | None = None  # never two runs at once
        ctx.add_command("ras_status", self._status_command)
        ctx.add_command("ras_profile", self._profile_command)

    def _identify(self, status: RasStatus | None = None) -> str:
        """Scheduler id when readable; else from the communicators (a status that lists them all: JSON detail); else
        from this node's endpoint."""
        pid = self.listener = listener_pid(self.cfg.proc_root, self.client.port, self.listener)
        job = scheduler_job_id(self.cfg.proc_root, pid) if pid is not None else None
        if job is None and status is not None and status.all_communicators:  # a partial list: another id
            job = derived_job_id(c.hash for c in status.communicators)
        if job is None and self.job_id is not None and self.job_id != self.endpoint_id:
            return self.job_id  # job-wide already: a text poll does not change it
        if job is None:
            self.endpoint_id = job = endpoint_job_id(self.ctx.node, self.client.endpoint, pid)
        return job

    async def run(self, emit: Emit) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self._poll_loop(emit))
            if self.cfg.monitor:
                group.create_task(self._monitor_loop())

    async def poll_once(self) -> RasStatus | None:
        """Poll if this agent holds the job's lease; None when another agent polls."""
        job, cycle = self.job_id or self._identify(), self.cycle
        if not await self.lease.hold(job):
            return None
        # a job without a job-wide id yet gets the full communicator list at once (the id derives from it)
        detail = job == self.endpoint_id or self.polls % self.cfg.detail_every == 0
        async with self.poll_lock:
            status = await poll_status(self.client, verbose=self.cfg.verbose, detail=detail)
        if cycle != self.cycle:  # the MONITOR saw the endpoint close meanwhile: published after the end, this
            return None  # status would start a new cycle of the job that just ended
        self.polls += 1
        self.job_id = self._identify(status)
        if self.job_id != job:  # the id became job-wide: poll under that lease from now on
            await self.lease.release()
        self.last_status = status
        return status

    async def _poll_loop(self, emit: Emit) -> None:
        interval = self.cfg.interval_s
        while True:
            stop_if_cancelled()
            started = time.monotonic()
            try:
                status = await self.poll_once()
            except RasRefused as exc:
                await self._job_gone()
                self.health.state, self.health.last_error = "absent", str(exc)
            # nats: the lease's KV request timed out under load; the next poll retries (the MONITOR stays up)
            except (RasClientError, RasParseError, nats.errors.Error) as exc:
                self.health.failure(exc, time.monotonic() - started)
            else:
                self.health.success(time.monotonic() - started)
                if status is not None:
                    record = RasRecord(
                        job_id=self.job_id, endpoint=self.client.endpoint, **msgspec.structs.asdict(status)
                    )
                    # half the server's max_payload per part: the envelope and the wire format's own bytes fit
                    await emit(split_status(record, self.ctx.nc.max_payload // 2, self.polls))
                    self._maybe_diagnose(emit)
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))

    def _maybe_diagnose(self, emit: Emit) -> None:
        """Start the job's one diagnostics run in the background (it is a job-wide collective that takes a while)."""
        job = self.job_id
        if (not self.cfg.diagnostics or job is None or job == self.endpoint_id or job in self.diagnosed
                or self.client.features.diagnostics is False
                or (self.diagnosing is not None and not self.diagnosing.done())):  # fmt: skip
            return
        self.diagnosed.add(job)
        self.diagnosing = asyncio.create_task(self._diagnose(job, emit))

    async def _diagnose(self, job: str, emit: Emit) -> None:
        try:
            report = await run_diagnostics(self.client)
        except (RasClientError, RasParseError) as exc:
            log.info("ras: diagnostics of job %s failed: %s", job, exc)
            self.diagnosed.discard(job)  # a transport failure: the next poll tries again
            return
        if report.status == "unsupported":
            self.client.features.diagnostics = False
        if report.status == "busy":
            self.diagnosed.discard(job)  # someone else's run: ours on a later poll
        record = RasDiagnosticsRecord(
            job_id=job, endpoint=self.client.endpoint, **msgspec.structs.asdict(report)
        )
        await emit([record], kind="ras_diagnostics")

    async def _profile_command(self, request: dict[str, Any]) -> dict[str, Any]:
        """``ras_profile``: CONTROL PROFILER_MASK on this node's endpoint, when the operator allowed it."""
        if not self.cfg.profile_control:
            raise ValueError("profile control is off on this agent (agent.collectors.ras.profile_control)")
        value = profile_value(str(request.get("value", "")))
        mask = parse_profiler_mask(value)
        if mask is None:
            raise ValueError(f"invalid profiler mask {value!r}")
        await self.client.set_profiler_mask(value)
        return {"job_id": self.job_id, "endpoint": self.client.endpoint, "mask": mask}

    async def _monitor_loop(self) -> None:
        while True:
            stop_if_cancelled()
            try:
                if not await self.client.probe_monitor():
                    return  # this release has no MONITOR; polls still run
                self.job_id = self.job_id or self._identify()
                async for event in self.client.monitor():
                    await self._publish_events([event])
                await self._job_gone()
            except RasRefused:
                await self._job_gone()
            except (RasClientError, RasParseError) as exc:
                self.health.failure(exc)
            await asyncio.sleep(self.cfg.interval_s)

    async def _publish_events(self, events: Sequence[RasEvent]) -> None:
        records = [
            RasEventRecord(job_id=self.job_id, endpoint=self.client.endpoint, **msgspec.structs.asdict(e))
            for e in events
        ]
        await self.ctx.batcher.add("ras_event", records, self.ttl, True)

    async def _job_gone(self) -> None:
        """The endpoint closed: report it once for the job, forget the job and the endpoint's cached features.

        Statuses still queued go out first and the end at once: the aggregator takes a status stamped after the end
        for a new cycle of the job (the kinds' buffers otherwise flush in either order)."""
        self.cycle += 1
        if self.job_id is not None:
            closed = RasEvent(event=ENDPOINT_CLOSED, event_group="RANKSIGHT", details="RAS endpoint closed")
            await self.ctx.batcher.flush(self.kind)
            await self._publish_events([closed])
            await self.ctx.batcher.flush("ras_event")
            await self.lease.release()
        self.job_id, self.endpoint_id, self.last_status = None, None, None
        self.client.features.json = self.client.features.monitor = None

    async def _status_command(self, request: dict[str, Any]) -> dict[str, Any]:
        return {"job_id": self.job_id, "endpoint": self.client.endpoint, "holds_lease": self.lease.revision is not None,
                "status": to_builtins(self.last_status) if self.last_status else None}  # fmt: skip

    async def close(self) -> None:
        if self.diagnosing is not None:
            self.diagnosing.cancel()
        await self.lease.release()
