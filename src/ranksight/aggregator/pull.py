"""Pull requests on the event consumer bounded in messages *and* bytes (nats-py's ``fetch`` has no byte bound).

A JetStream pull request (``$JS.API.CONSUMER.MSG.NEXT.<stream>.<durable>``) takes ``batch`` and ``max_bytes``; the
server ends it with a status message (404 no messages, 408 expired, 409 limit reached). Each fetch first asks without
waiting for what is there; when nothing is, it waits up to ``timeout`` for one message, so a quiet stream costs one
request per timeout and a busy one is read in full batches. Deliveries are collected by a subscription callback (not
``next_msg``, which makes two tasks and a uuid4 per message: a fifth of the event loop's time at 4k messages/s); one
that comes after its request ended is kept for the next fetch.
"""

from __future__ import annotations

import asyncio
import contextlib
import json

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.api import Header, StatusCode

_END = {StatusCode.NO_MESSAGES, StatusCode.REQUEST_TIMEOUT, StatusCode.CONFLICT}


class BoundedPull:
    def __init__(self, nc: Client, stream: str, durable: str, batch: int, max_bytes: int) -> None:
        self.nc = nc
        self.subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}"
        self.batch = batch
        # A message larger than max_bytes would never be delivered (409 forever): leave room for the largest one.
        self.max_bytes = max(max_bytes, 2 * nc.max_payload)
        self.inbox = nc.new_inbox()
        self._sub: Subscription | None = None
        self._delivered: list[Msg] = []
        self._wanted = 0
        self._ended = asyncio.Event()

    async def start(self) -> BoundedPull:
        self._sub = await self.nc.subscribe(self.inbox, cb=self._on_msg)
        return self

    async def stop(self) -> None:
        """Unsubscribe the inbox (a sharded aggregator starts and stops one pull per partition it holds)."""
        if self._sub is not None:
            sub, self._sub = self._sub, None
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()

    async def _on_msg(self, msg: Msg) -> None:
        status = msg.headers.get(Header.STATUS) if msg.headers else None
        if status is None:
            self._delivered.append(msg)
            if len(self._delivered) >= self._wanted:
                self._ended.set()
        elif status in _END:
            self._ended.set()  # this request is over (or an earlier one's end came late: harmless, the next asks again)

    async def fetch(self, timeout: float) -> list[Msg]:
        """Up to ``batch`` messages of at most ``max_bytes`` together; [] when none came within ``timeout``."""
        msgs = await self._request(
            {"batch": self.batch, "max_bytes": self.max_bytes, "no_wait": True}, timeout
        )
        if msgs:
            return msgs
        expires = int(timeout * 1e9)
        return await self._request(
            {"batch": 1, "max_bytes": self.max_bytes, "expires": expires}, timeout + 0.5
        )

    async def _request(self, request: dict[str, object], timeout: float) -> list[Msg]:
        assert self._sub is not None, "start() first"
        self._wanted = int(request["batch"])  # type: ignore[call-overload]
        self._ended.clear()
        if len(self._delivered) < self._wanted:  # else: enough came after an earlier request ended
            await self.nc.publish(self.subject, json.dumps(request).encode(), reply=self.inbox)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ended.wait(), timeout)
        msgs, self._delivered = self._delivered[: self._wanted], self._delivered[self._wanted :]
        return msgs
