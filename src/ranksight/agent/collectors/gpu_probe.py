"""``gpu_probe``: measure each GPU actively (matmul TFLOPS, memory bandwidth) while the node is idle; results live 1 h.

The measurement runs in a subprocess (:mod:`agent.gpuprobe.runner`); this collector decides when (a persisted
schedule, staggered across nodes) and whether (never while a job uses the node: it publishes a ``skipped`` record
with the reason instead).
"""

from __future__ import annotations

import asyncio
import importlib.util
import time
from typing import TYPE_CHECKING

import msgspec

from ranksight.agent.collectors.base import CollectorUnavailable, Emit, StreamingCollector
from ranksight.agent.gpuprobe.busy import check_busy
from ranksight.agent.gpuprobe.runner import ProbeOutcome, run_probe
from ranksight.agent.gpuprobe.schedule import LastAttempt, load_last, next_due_s, save_last, stagger_offset_s
from ranksight.agent.gpuprobe.settings import GpuProbeSettings
from ranksight.schemas.records import GpuProbeRecord
from ranksight.schemas.subjects import sanitize_token

if TYPE_CHECKING:
    from ranksight.agent.collector_settings import CollectorSettings
    from ranksight.agent.runtime import AgentContext

NODE_INDEX = -1  # a record about the node, not one GPU


def outcome_records(outcome: ProbeOutcome) -> list[GpuProbeRecord]:
    """One ``ok`` record per measured GPU, one ``error`` per failed GPU, and one node record if the run failed."""
    records = [
        GpuProbeRecord(status="ok", backend=outcome.backend, **msgspec.structs.asdict(g))
        for g in outcome.gpus
    ]
    records += [
        GpuProbeRecord(index=e.index, status="error", reason=e.error, backend=outcome.backend)
        for e in outcome.errors
    ]
    if outcome.status != "ok":
        records.append(GpuProbeRecord(index=NODE_INDEX, status=outcome.status, reason=outcome.reason,
                                      backend=outcome.backend, duration_s=outcome.duration_s))  # fmt: skip
    return records


class GpuProbeCollector(StreamingCollector):
    name = "gpu_probe"
    kind = "gpu_probe"
    durable = True  # rare, costly measurements: never dropped

    def __init__(self, ctx: AgentContext, settings: CollectorSettings) -> None:
        super().__init__(ctx, settings)
        assert isinstance(settings, GpuProbeSettings)
        self.cfg = settings
        token = f"{sanitize_token(ctx.cluster)}-{sanitize_token(ctx.node)}"
        self.state_path = ctx.settings.state_dir / "gpu_probe" / f"{token}.json"
        self.last = load_last(self.state_path)
        self.started_s = time.time()
        self.offset_s = stagger_offset_s(ctx.cluster, ctx.node, settings.stagger_s)
        self.last_skip: str | None = None

    async def detect(self) -> bool:
        if self.cfg.worker_command or importlib.util.find_spec("torch") is not None:
            return True
        raise CollectorUnavailable("PyTorch is not installed")

    def next_due_s(self) -> float:
        return next_due_s(self.last, self.started_s, self.offset_s, self.ttl)

    async def run(self, emit: Emit) -> None:
        while True:
            if time.time() >= self.next_due_s():
                await self.probe_once(emit)
            wait = min(self.cfg.interval_s, self.next_due_s() - time.time())
            await asyncio.sleep(max(0.05, wait))

    async def probe_once(self, emit: Emit) -> None:
        now, started = time.time(), time.monotonic()
        reasons = await check_busy(self.cfg)
        if reasons:
            reason = "node busy: " + "; ".join(reasons)
            if reason != self.last_skip:  # say it once per busy spell, not at every check
                self.last_skip = reason
                await emit([GpuProbeRecord(index=NODE_INDEX, status="skipped", reason=reason)])
            return
        self.last_skip = None
        outcome = await run_probe(self.cfg)
        attempt = self.last = LastAttempt(now, outcome.status)
        await emit(outcome_records(outcome), lambda: save_last(self.state_path, attempt))  # type: ignore[call-arg]
        if outcome.status == "error":
            self.health.failure(RuntimeError(outcome.reason), time.monotonic() - started)
        else:
            self.health.success(time.monotonic() - started)
            self.health.source = outcome.backend or outcome.reason
