"""``inspector`` streaming collector: tails the dump directory, summarizes every record per window
(``inspector_summary``, :mod:`agent.collectors.inspector.summary`) and publishes the summaries, a rate-limited share
of the raw records (:mod:`agent.collectors.inspector.sampler`) and every v4.1+ dump marker's record and drop counts
(``inspector_dump_stats``), durably. The dump files keep every record on the node. The plugin's other outputs become
``inspector_metrics`` records: its Prometheus textfiles in the dump directory (:mod:`.promfiles`) and, when
``otlp_port`` is set, its OTLP/HTTP export to the agent's loopback receiver (:mod:`.otlp`), which also works with no
dump directory at all. The verbose export's operations whose process and rank the agent can tell
(:mod:`.senders`) are fed to the summaries and the raw share as dump records are; the rest stay metrics records.

Offsets are checkpointed in ``<state_dir>/inspector-offsets.json`` only after the stream acknowledged a chunk's raw
share (``emit(records, on_ack=...)``), so an outage of NATS or of the aggregator loses nothing (design §3). Summaries are
published in parts every ``summary_publish_s`` (the records read since the last part); the one being built lives in
memory and is published at shutdown, and a crash loses it (the records stay in the dump files). The raw share waits
as long to be batched: it is evidence, not news, and one message a second instead of four per node is what an
aggregator of a thousand nodes saves most on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from ranksight.agent.collectors.base import Emit, StreamingCollector
from ranksight.agent.collectors.inspector.metrics import as_operations
from ranksight.agent.collectors.inspector.otlp import OtlpLimits, OtlpReceiver
from ranksight.agent.collectors.inspector.promfiles import PromFiles
from ranksight.agent.collectors.inspector.raw import RawLimits, check_request, read_page
from ranksight.agent.collectors.inspector.sampler import RawSampler
from ranksight.agent.collectors.inspector.senders import SenderFinder
from ranksight.agent.collectors.inspector.summary import Summarizer
from ranksight.agent.collectors.inspector.tailer import Chunk, Tailer
from ranksight.schemas.records import InspectorMetricsRecord, InspectorRecord, InspectorSummaryRecord
from ranksight.schemas.records.inspector import RawRecordsPage, RawRecordsRequest
from ranksight.schemas.structs import to_builtins

if TYPE_CHECKING:
    from ranksight.agent.collectors.inspector.settings import InspectorSettings
    from ranksight.agent.runtime import AgentContext

log = logging.getLogger(__name__)


class InspectorCollector(StreamingCollector):
    name = "inspector"
    kind = "inspector"
    durable = True  # raw records are facts about the job: backpressure, never drops

    def __init__(self, ctx: AgentContext, settings: InspectorSettings) -> None:
        super().__init__(ctx, settings)
        self.cfg = settings
        self.tailer: Tailer | None = None
        self.summarizer = Summarizer(settings.summary_window_s, settings.summary_slice_s, settings.summary_publish_s,
                                     max_keys=settings.summary_max_keys)  # fmt: skip
        self.sampler = RawSampler(settings.raw_rate_per_s)
        self._emit: Emit | None = None
        self.proms: PromFiles | None = None
        self.receiver: OtlpReceiver | None = None
        self.senders = SenderFinder()
        self.otlp_ops = self.otlp_unattributed = (
            0  # verbose operations fed as dump records, and those that were not
        )
        ctx.add_command("inspector", self._status)
        ctx.add_command("inspector_raw", self._raw)

    def _dump_dir(self) -> Path | None:
        return self.cfg.dump_dir

    async def detect(self) -> bool:
        directory = self._dump_dir()
        return (directory is not None and directory.is_dir()) or self.cfg.otlp_port is not None

    async def run(self, emit: Emit) -> None:
        self._emit = emit
        directory = self._dump_dir()
        if self.cfg.otlp_port is not None:
            await self._start_receiver(emit)
        if directory is None or not directory.is_dir():
            while True:  # the receiver alone: it serves, and its operations are summarized, until cancelled
                await asyncio.sleep(self.cfg.summary_publish_s)
                await self._publish_summaries(emit, self.summarizer.take(time.time_ns() // 1000))
        state_file = self.ctx.settings.state_dir / "inspector-offsets.json"
        tailer = self.tailer = Tailer(directory, state_file, self.cfg.read_chunk_bytes)
        proms = self.proms = PromFiles(directory, self.cfg.read_chunk_bytes) if self.cfg.prom_files else None
        await asyncio.to_thread(tailer.load)
        warned: set[str] = set()
        parts_due = time.monotonic() + self.cfg.summary_publish_s
        while True:
            started = time.monotonic()
            chunks = await asyncio.to_thread(tailer.poll)
            if not any(chunk.more for chunk in chunks):
                # read to the end of every file: the heartbeat's last success is then how far this agent has read,
                # which the hang finder needs (a rank is silent only if its agent read past the stall and found nothing)
                self.health.success(time.monotonic() - started)
            if tailer.skipped:  # reported, not fatal: the other files are read
                self.health.last_error = "skipped, not regular files: " + ", ".join(
                    f"{Path(p).name} ({kind})" for p, kind in sorted(tailer.skipped.items())
                )
            # the raw share is sampled over the whole pass: every file's communicators compete for it
            every = [rec for chunk in chunks for rec in chunk.records]
            raw = {id(rec) for rec in self.sampler.take(every, time.monotonic())}
            for rec in every:
                self.summarizer.add(rec)
            for chunk in chunks:
                if chunk.first_error and chunk.path not in warned:
                    warned.add(chunk.path)  # once per file: no per-interval log spam
                    log.warning("inspector: bad line(s) in %s: %s", chunk.path, chunk.first_error)
                # the chunk's offset is committed once its raw share and its dump markers are both in the stream
                on_ack = self._on_ack(tailer, chunk, parts=2 if chunk.dump_stats else 1)
                if chunk.dump_stats:
                    await emit(chunk.dump_stats, on_ack, kind="inspector_dump_stats",
                               max_delay_s=self.cfg.summary_publish_s)  # fmt: skip
                # the wire's typed record is built only for the few operations published raw
                await emit([op for op in chunk.records if id(op) in raw], on_ack,
                           max_delay_s=self.cfg.summary_publish_s)  # fmt: skip
            if proms is not None and (metrics := await asyncio.to_thread(proms.poll)):
                await emit(metrics, kind="inspector_metrics", max_delay_s=self.cfg.summary_publish_s)
            if time.monotonic() >= parts_due:
                parts_due = time.monotonic() + self.cfg.summary_publish_s
                await self._publish_summaries(emit, self.summarizer.take(time.time_ns() // 1000))
            if tailer.dirty:
                await asyncio.to_thread(tailer.save)
            if not chunks:
                await asyncio.sleep(self.cfg.interval_s)

    async def _start_receiver(self, emit: Emit) -> None:
        cfg, port = self.cfg, self.cfg.otlp_port
        assert port is not None
        limits = OtlpLimits(cfg.otlp_max_body_bytes, cfg.otlp_max_requests_per_s, cfg.otlp_max_connections,
                            cfg.otlp_read_timeout_s)  # fmt: skip

        async def publish(records: list[InspectorMetricsRecord], client_port: int) -> None:
            ops: list[InspectorRecord] = []
            if any(r.shape == "op" for r in records):
                sender = await asyncio.to_thread(self.senders.find, client_port, port)
                if sender is not None:
                    ops, records = as_operations(records, sender.pid, sender.rank_in)
            self.otlp_ops += len(ops)
            self.otlp_unattributed += sum(r.shape == "op" for r in records)
            for op in ops:
                self.summarizer.add(op)
            if raw := self.sampler.take(ops, time.monotonic()):
                await emit(raw, max_delay_s=cfg.summary_publish_s)
            if records:
                await emit(records, kind="inspector_metrics", max_delay_s=cfg.summary_publish_s)

        self.receiver = OtlpReceiver(port, limits, publish)
        await self.receiver.start()

    @staticmethod
    def _on_ack(tailer: Tailer, chunk: Chunk, parts: int) -> Any:
        """A callback that commits the chunk's offset at its ``parts``-th call (one per message of the chunk)."""
        left = [parts]

        def acked() -> None:
            left[0] -= 1
            if left[0] == 0:
                tailer.acked(chunk)

        return acked

    async def _publish_summaries(self, emit: Emit, summaries: list[InspectorSummaryRecord]) -> None:
        if summaries:
            await emit(summaries, kind="inspector_summary", ttl=self.cfg.summary_ttl())

    async def close(self) -> None:
        if self.receiver is not None:
            await self.receiver.close()
        if self._emit is not None:
            await self._publish_summaries(self._emit, self.summarizer.take())
        if self.tailer is not None and self.tailer.dirty:
            await asyncio.to_thread(self.tailer.save)

    async def _status(self, request: dict[str, Any]) -> dict[str, Any]:
        status = (
            self.tailer.status()
            if self.tailer is not None
            else {"directory": str(self._dump_dir()), "files": {}, "bad_lines": 0}
        )
        s = self.summarizer
        # late: records read after their window's summary was published; parts never leave one out (kept: the shape)
        status["summaries"] = {"records": s.records, "open": s.open_keys, "late": 0, "overflow": s.overflow,
                               "parts": s.parts}  # fmt: skip
        status["raw"] = {"rate_per_s": self.sampler.rate, "published": self.sampler.kept,
                         "kept_on_node": self.sampler.skipped}  # fmt: skip
        if self.proms is not None:
            status["prom_files"] = {"read": len(self.proms.seen), "errors": dict(self.proms.errors)}
        if self.receiver is not None:
            status["otlp"] = {**self.receiver.status(), "operations": self.otlp_ops,
                              "operations_unattributed": self.otlp_unattributed}  # fmt: skip
        return status

    async def _raw(self, request: dict[str, Any]) -> dict[str, Any]:
        """One page of raw records of some comms within a dump-time window, read from the dump files (off the loop)."""
        req = msgspec.convert(request, RawRecordsRequest)
        cfg = self.cfg
        # half the server's max_payload: the JSON of a page's other fields and escaping stay well within it
        limits = RawLimits(cfg.raw_max_records, min(cfg.raw_max_bytes, self.ctx.nc.max_payload // 2),
                           cfg.raw_scan_bytes, cfg.raw_max_window_s)  # fmt: skip
        check_request(req, limits)
        directory = self._dump_dir()
        if directory is None:
            raise ValueError("no Inspector dump directory is configured on this node")
        page = await asyncio.to_thread(read_page, directory, req, limits)
        answer = RawRecordsPage(node=self.ctx.node, incarnation=self.ctx.incarnation, records=[], next=page.next,
                                scanned_bytes=page.scanned_bytes, bad_lines=page.bad_lines)  # fmt: skip
        return {**to_builtins(answer), "records": page.records}  # records: already plain, measured values
