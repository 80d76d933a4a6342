"""Simulated agents for the delivery and chaos tests: the real batcher and publisher, fed synthetic records.

Each :class:`SyntheticAgent` is one agent incarnation with its own NATS connection; ``emit(n)`` publishes ``n`` GPU
records of an 8-GPU node whose ``memory_used_bytes`` is a running counter, so a test can check that every record
arrived exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid

from nats.aio.client import Client

from ranksight.agent.batcher import Batcher
from ranksight.agent.publisher import Publisher
from ranksight.core.natsconn import connect
from ranksight.schemas.records import GpuRecord
from ranksight.schemas.subjects import Subjects
from ranksight.settings import Settings


class SyntheticAgent:
    def __init__(
        self, settings: Settings, node: str, durable: bool = True, records_per_batch: int = 500
    ) -> None:
        self.settings = settings
        self.node = node
        self.durable = durable
        self.records_per_batch = records_per_batch
        self.incarnation = uuid.uuid4().hex[:16]
        self.sent = 0
        self.nc: Client | None = None
        self.publisher: Publisher | None = None
        self.batcher: Batcher | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> SyntheticAgent:
        cfg = self.settings.agent
        self.nc = await connect(self.settings.nats, name=f"synthetic:{self.node}")
        self.publisher = Publisher(self.nc.jetstream(publish_async_max_pending=cfg.max_inflight * 2),
                                   cfg.queue_max_messages, cfg.max_inflight, cfg.publish_timeout_s)  # fmt: skip
        self.batcher = Batcher(self.publisher, Subjects(self.settings.subject_prefix), self.settings.cluster, self.node,
                               self.incarnation, self.records_per_batch, cfg.batch_max_bytes, cfg.batch_max_delay_s,
                               cfg.wire_format)  # fmt: skip
        self._task = asyncio.create_task(self.publisher.run())
        return self

    def make_records(self, n: int) -> list[GpuRecord]:
        first = self.sent
        self.sent += n
        return [GpuRecord(index=i % 8, name="synthetic", utilization_pct=float(i % 100), power_w=300.0,
                          memory_used_bytes=i) for i in range(first, first + n)]  # fmt: skip

    async def emit(self, n: int) -> None:
        assert self.batcher is not None
        await self.batcher.add("gpu", self.make_records(n), ttl=15.0, durable=self.durable)

    async def flush(self, timeout: float = 60.0) -> bool:
        assert self.batcher is not None and self.publisher is not None
        await self.batcher.flush()
        return await self.publisher.flush(timeout)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.nc is not None:
            await self.nc.close()
