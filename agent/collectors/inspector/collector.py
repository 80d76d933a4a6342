"""``inspector`` streaming collector: tails the dump directory and publishes typed records, durably.

Offsets are checkpointed in ``<state_dir>/inspector-offsets.json`` only after the stream acknowledged the records
(``emit(records, on_ack=...)``), so an outage of NATS or of the aggregator loses nothing (design §3).
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ranksight.agent.collectors.base import Emit, StreamingCollector
from ranksight.agent.collectors.inspector.tailer import Chunk, Tailer

if TYPE_CHECKING:
    from ranksight.agent.runtime import AgentContext
    from ranksight.config import InspectorSettings

log = logging.getLogger(__name__)


class InspectorCollector(StreamingCollector):
    name = "inspector"
    kind = "inspector"
    durable = True  # raw records are facts about the job: backpressure, never drops

    def __init__(self, ctx: AgentContext, settings: InspectorSettings) -> None:
        super().__init__(ctx, settings)
        self.cfg = settings
        self.tailer: Tailer | None = None
        ctx.add_command("inspector", self._status)

    def _dump_dir(self) -> Path | None:
        return self.cfg.dump_dir

    async def detect(self) -> bool:
        directory = self._dump_dir()
        return directory is not None and directory.is_dir()

    async def run(self, emit: Emit) -> None:
        directory = self._dump_dir()
        assert directory is not None
        state_file = self.ctx.settings.state_dir / "inspector-offsets.json"
        tailer = self.tailer = Tailer(directory, state_file, self.cfg.read_chunk_bytes)
        await asyncio.to_thread(tailer.load)
        warned: set[str] = set()
        while True:
            started = time.monotonic()
            chunks = await asyncio.to_thread(tailer.poll)
            self.health.success(time.monotonic() - started)
            if tailer.skipped:  # reported, not fatal: the other files are read
                self.health.last_error = "skipped, not regular files: " + ", ".join(
                    f"{Path(p).name} ({kind})" for p, kind in sorted(tailer.skipped.items())
                )
            for chunk in chunks:
                if chunk.first_error and chunk.path not in warned:
                    warned.add(chunk.path)  # once per file: no per-interval log spam
                    log.warning("inspector: bad line(s) in %s: %s", chunk.path, chunk.first_error)
                await emit(chunk.records, self._on_ack(tailer, chunk))
            if tailer.dirty:
                await asyncio.to_thread(tailer.save)
            if not chunks:
                await asyncio.sleep(self.cfg.interval_s)

    @staticmethod
    def _on_ack(tailer: Tailer, chunk: Chunk) -> Any:
        return lambda: tailer.acked(chunk.path, chunk.inode, chunk.end)

    async def close(self) -> None:
        if self.tailer is not None and self.tailer.dirty:
            await asyncio.to_thread(self.tailer.save)

    async def _status(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.tailer is None:
            return {"directory": str(self._dump_dir()), "files": {}, "bad_lines": 0}
        return self.tailer.status()
