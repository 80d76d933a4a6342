"""The only NATS publisher of the agent: asynchronous JetStream publishes with acks tracked, retries and a bounded queue.

Every message carries ``Nats-Msg-Id: <agent>:<seq>``, so a retry after a lost ack is de-duplicated by the stream and,
beyond its window, by the aggregator's per-agent sequence high-water marks. Nothing accepted is dropped silently:
durable messages (Inspector, RAS events, job signals) wait for room in the queue (backpressure on their collector);
gauges (GPU, NIC, heartbeat) make room by dropping the oldest gauge, and every drop is counted in ``dropped``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import nats.errors
from nats.js import JetStreamContext

from ranksight.agent.backoff import backoff_s
from ranksight.schemas.records import PublisherStats

log = logging.getLogger(__name__)

MSG_ID_HEADER = "Nats-Msg-Id"


@dataclass
class Outgoing:
    subject: str
    payload: bytes
    msg_id: str
    durable: bool
    on_ack: list[Callable[[], None]] = field(default_factory=list)
    attempts: int = 0


class Publisher:
    def __init__(
        self,
        js: JetStreamContext,
        max_queue: int = 10_000,
        max_inflight: int = 512,
        ack_timeout_s: float = 5.0,
        max_backoff_s: float = 5.0,
    ) -> None:
        self._js = js
        self._queue: deque[Outgoing] = deque()
        self._max_queue = max_queue
        self._inflight = asyncio.Semaphore(max_inflight)
        self._inflight_n = 0
        self._ack_timeout = ack_timeout_s
        self._max_backoff = max_backoff_s
        self._ready = asyncio.Event()
        self._room = asyncio.Condition()
        self._idle = asyncio.Event()
        self._idle.set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.published = self.acked = self.retries = self.dropped = 0

    @property
    def stats(self) -> PublisherStats:
        return PublisherStats(published=self.published, acked=self.acked, retries=self.retries, dropped=self.dropped,
                              pending=len(self._queue) + self._inflight_n)  # fmt: skip

    # -- producer side ------------------------------------------------------------------------------------------
    async def submit(self, msg: Outgoing) -> None:
        if len(self._queue) >= self._max_queue:
            if msg.durable:
                async with self._room:
                    await self._room.wait_for(lambda: len(self._queue) < self._max_queue)
            elif not self._drop_oldest_gauge():
                self.dropped += 1
                return
        self._enqueue(msg)

    def _enqueue(self, msg: Outgoing, front: bool = False) -> None:
        (self._queue.appendleft if front else self._queue.append)(msg)
        self._idle.clear()
        self._ready.set()

    def _drop_oldest_gauge(self) -> bool:
        for i, queued in enumerate(self._queue):
            if not queued.durable:
                del self._queue[i]
                self.dropped += 1
                return True
        return False

    # -- worker -------------------------------------------------------------------------------------------------
    async def run(self) -> None:
        try:
            while True:
                await self._ready.wait()
                if not self._queue:
                    self._ready.clear()
                    continue
                await self._inflight.acquire()
                if not self._queue:  # drained while we waited
                    self._inflight.release()
                    continue
                msg = self._queue.popleft()
                self._inflight_n += 1
                async with self._room:
                    self._room.notify_all()
                task = asyncio.create_task(self._publish_one(msg))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        finally:
            for task in list(self._tasks):
                task.cancel()

    async def _publish_one(self, msg: Outgoing) -> None:
        try:
            msg.attempts += 1
            future = await self._js.publish_async(
                msg.subject, msg.payload, headers={MSG_ID_HEADER: msg.msg_id}
            )
            if msg.attempts == 1:
                self.published += 1  # sent to the server (retries are counted apart)
            await asyncio.wait_for(future, self._ack_timeout)
        except asyncio.CancelledError:
            raise
        except nats.errors.MaxPayloadError:
            # one record over the server's max_payload (batches are split down to one record): it can never be
            # sent, and retrying it would hold its source's place forever; said loudly, counted, and passed
            self.dropped += 1
            log.error(
                "dropped %s: %d bytes, over the NATS server's max_payload (one record alone; raise the server's "
                "max_payload, e.g. deploy/nats/nats-server.conf)",
                msg.subject,
                len(msg.payload),
            )
            for callback in msg.on_ack:
                callback()
        except Exception as exc:
            self.retries += 1
            if msg.attempts == 1 or msg.attempts % 20 == 0:
                log.warning(
                    "publish of %s failed (attempt %d): %s", msg.msg_id, msg.attempts, exc or type(exc)
                )
            await asyncio.sleep(backoff_s(msg.attempts - 1, 0.1, self._max_backoff))
            self._enqueue(msg, front=True)
        else:
            self.acked += 1
            for callback in msg.on_ack:
                callback()
        finally:
            self._inflight_n -= 1
            self._inflight.release()
            if not self._queue and self._inflight_n == 0:
                self._idle.set()

    async def flush(self, timeout: float) -> bool:
        """Wait until everything queued is acknowledged; False if the timeout passed first."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout)
        return self._idle.is_set()
