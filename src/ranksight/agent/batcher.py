"""Turns collector output into envelopes: many records per message (batching is what makes the bus fast).

A kind's buffer is flushed when it holds ``max_records`` or has waited ``max_delay_s`` (or the delay its records
came with: raw Inspector samples wait for the summaries' cadence, evidence that needs no hurry). Each flush assigns the next
sequence number of this agent incarnation; an encoded batch larger than ``max_bytes`` is split in halves until it fits.
Batches are encoded in ``wire_format`` (compact columns by default; ``map`` for aggregators older than that form).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ranksight.agent.publisher import Outgoing, Publisher
from ranksight.schemas.codec import encode_event
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import Record
from ranksight.schemas.subjects import Subjects
from ranksight.schemas.wire import WireFormat, event_type


@dataclass
class _Buffer:
    ttl: float
    durable: bool
    max_delay: float
    records: list[Record] = field(default_factory=list)
    on_ack: list[Callable[[], None]] = field(default_factory=list)
    since: float = 0.0


class Batcher:
    def __init__(
        self,
        publisher: Publisher,
        subjects: Subjects,
        cluster: str,
        node: str,
        incarnation: str,
        max_records: int = 2000,
        max_bytes: int = 512 * 1024,
        max_delay_s: float = 0.25,
        wire_format: WireFormat = "compact",
    ) -> None:
        self._publisher = publisher
        self._subjects = subjects
        self._cluster, self._node, self._incarnation = cluster, node, incarnation
        self._max_records, self._max_bytes, self._max_delay = max_records, max_bytes, max_delay_s
        self._wire_format = wire_format
        self._buffers: dict[str, _Buffer] = {}
        self._seq = 0
        self._lock = asyncio.Lock()

    async def add(
        self,
        kind: str,
        records: Sequence[Record],
        ttl: float,
        durable: bool,
        on_ack: Callable[[], None] | None = None,
        max_delay_s: float | None = None,
    ) -> None:
        """Queue records; ``on_ack`` runs once every one of them is acknowledged by the stream; ``max_delay_s``
        overrides how long the kind's buffer may wait."""
        if not records:
            if on_ack:
                on_ack()
            return
        buf = self._buffers.get(kind)
        if buf is None:
            buf = self._buffers[kind] = _Buffer(ttl=ttl, durable=durable, max_delay=self._max_delay)
        if not buf.records:
            buf.since = time.monotonic()
        buf.records.extend(records)
        buf.ttl = ttl
        buf.max_delay = self._max_delay if max_delay_s is None else max_delay_s
        if on_ack:
            buf.on_ack.append(on_ack)
        if len(buf.records) >= self._max_records:
            await self._flush_kind(kind)

    async def run(self) -> None:
        """Flush buffers that waited long enough; runs until cancelled."""
        while True:
            await asyncio.sleep(self._max_delay / 2)
            await self.flush_due(time.monotonic())

    async def flush_due(self, now: float) -> None:
        """Flush the buffers that have waited their delay at ``now`` (``time.monotonic()``)."""
        for kind, buf in list(self._buffers.items()):
            if buf.records and now - buf.since >= buf.max_delay:
                await self._flush_kind(kind)

    async def flush(self, *kinds: str) -> None:
        """Flush the named kinds' buffers in that order (every buffer when none is named): what is flushed first takes
        the lower sequence number and the earlier envelope time."""
        for kind in kinds or list(self._buffers):
            await self._flush_kind(kind)

    async def _flush_kind(self, kind: str) -> None:
        async with self._lock:
            buf = self._buffers.get(kind)
            if buf is None or not buf.records:
                return
            records, callbacks = buf.records, buf.on_ack
            buf.records, buf.on_ack = [], []
            chunks = list(self._encode_chunks(kind, records, buf.ttl))
            # Callbacks fire when the last chunk is acked (the publisher acks in any order, so count them).
            remaining = [len(chunks)]

            def one_acked() -> None:
                remaining[0] -= 1
                if remaining[0] == 0:
                    for callback in callbacks:
                        callback()

            subject = self._subjects.event(self._cluster, self._node, kind)
            for seq, payload in chunks:
                msg_id = f"{self._incarnation}:{seq}"
                await self._publisher.submit(Outgoing(subject, payload, msg_id, buf.durable, [one_acked]))

    def _encode_chunks(self, kind: str, records: list[Record], ttl: float) -> list[tuple[int, bytes]]:
        self._seq += 1
        seq = self._seq
        envelope = Envelope(  # built without validation, as the records were
            type=event_type(kind),
            cluster=self._cluster,
            node=self._node,
            agent=self._incarnation,
            seq=seq,
            ts=time.time_ns(),
            ttl=ttl,
            records=records,
        )
        payload = encode_event(envelope, self._wire_format)
        if len(payload) <= self._max_bytes or len(records) == 1:
            return [(seq, payload)]
        self._seq -= 1  # this sequence number was not used; the halves take their own
        half = len(records) // 2
        return self._encode_chunks(kind, records[:half], ttl) + self._encode_chunks(kind, records[half:], ttl)
