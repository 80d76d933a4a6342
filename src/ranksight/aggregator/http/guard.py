"""Connection bounds in front of aiohttp's protocol: a cap on open connections and a deadline for the first request's
head (slowloris: a client that opens connections and sends its headers a byte at a time holds nothing for long).

aiohttp's own ``keepalive_timeout`` (``idle_timeout_s``) closes a connection that waits for its next request, the first
one included; the header deadline here is tighter for a connection that has not yet sent one complete request head.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

_HEAD_END = b"\r\n\r\n"


class ConnectionGuard:
    """Protocol factory for ``loop.create_server`` wrapping aiohttp's (``runner.server``)."""

    def __init__(
        self, inner: Callable[[], asyncio.Protocol], max_connections: int, header_timeout_s: float
    ) -> None:
        self.inner = inner
        self.max_connections = max_connections
        self.header_timeout_s = header_timeout_s
        self.open = 0
        self.refused = 0  # over the cap
        self.timed_out = 0  # no complete request head in time

    def __call__(self) -> asyncio.Protocol:
        return _Guarded(self)


class _Guarded(asyncio.Protocol):
    """One connection: refused at the cap; closed unless its first request head is complete within the deadline."""

    def __init__(self, guard: ConnectionGuard) -> None:
        self.guard = guard
        self.inner: asyncio.Protocol | None = None
        self.transport: asyncio.Transport | None = None
        self.head_tail = b""  # last bytes seen, to find the head's end across reads
        self.deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        if self.guard.open >= self.guard.max_connections:
            self.guard.refused += 1
            transport.abort()
            return
        self.guard.open += 1
        self.transport = transport
        self.inner = self.guard.inner()
        self.inner.connection_made(transport)
        self.deadline = asyncio.get_running_loop().call_later(
            self.guard.header_timeout_s, self._head_too_slow
        )

    def _head_too_slow(self) -> None:
        self.deadline = None
        if self.transport is not None and not self.transport.is_closing():
            self.guard.timed_out += 1
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        if self.deadline is not None:
            seen = self.head_tail + data
            if _HEAD_END in seen:
                self.deadline.cancel()
                self.deadline = None
            self.head_tail = seen[-3:]
        if self.inner is not None:
            self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.inner is not None else None

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.inner is None:
            return
        self.guard.open -= 1
        if self.deadline is not None:
            self.deadline.cancel()
        self.inner.connection_lost(exc)
