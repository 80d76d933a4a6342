"""Async RAS client, as faithful as ``ncclras``/``rcclras``.

Connects to every address the RAS host resolves to (``localhost`` is ``::1`` and ``127.0.0.1``; the server binds
one), speaks ``CLIENT PROTOCOL 2`` (the server's protocol number is read; a different one is logged once) then
``TIMEOUT <s>`` (whole seconds: the server parses it with ``strtol``; 0 disables it), probes features by sending the
command and reading ``OK`` or ``ERROR: Unknown command ...`` (``SET FORMAT json``, ``MONITOR``; cached per endpoint),
and reads a status to EOF: one status per connection, nothing sent after it. ``DIAGNOSTICS`` (2.31) is read to EOF
the same way; ``CONTROL PROFILER_MASK`` (2.31) is one command and its ``OK``.

Time limits are upstream's: a status may legitimately sit silent for the leg timeout plus the extra timeout (both the
collective timeout) before its body starts, so each read may wait ``2 x collective_timeout_s + 1`` s (``ncclras``
allows 11 s for the default 5), and ``timeout_s`` caps the whole exchange. Failures are the typed errors of
:mod:`agent.collectors.ras.errors`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from ranksight.agent.collectors.ras.errors import (
    RasClientError,
    RasOversized,
    RasRefused,
    RasReplyError,
    RasReset,
    RasTimeout,
)
from ranksight.agent.collectors.ras.parse_monitor import MonitorDecoder
from ranksight.schemas.records.ras import RasEvent

DEFAULT_PORT = 28028
PROTOCOL = 2
READ_CHUNK = 65536
MONITOR_GROUPS = ("lifecycle", "trace", "all")  # what MONITOR accepts, comma-separated (2.29+)
log = logging.getLogger(__name__)


def read_timeout_s(collective_timeout_s: int) -> float | None:
    """How long one read may wait: the server's leg timeout plus its extra timeout, and a second; None: no limit."""
    return 2 * collective_timeout_s + 1.0 if collective_timeout_s > 0 else None


def parse_ras_addr(value: str) -> tuple[str, int]:
    """``NCCL_RAS_ADDR`` syntax: ``host:port``, ``[v6]:port``, ``host`` or ``[v6]`` (default port 28028)."""
    value = value.strip()
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        port = rest.removeprefix(":")
    elif value.count(":") == 1:
        host, _, port = value.partition(":")
    else:
        host, port = value, ""  # a bare IPv6 address or a host name
    if not host:
        raise ValueError(f"invalid RAS address {value!r}")
    try:
        return host, int(port) if port else DEFAULT_PORT
    except ValueError:
        raise ValueError(f"invalid port in RAS address {value!r}") from None


@dataclass
class Features:
    json: bool | None = None  # None: not probed yet
    monitor: bool | None = None
    diagnostics: bool | None = None  # False: the endpoint answered DIAGNOSTICS with Unknown command


class _Deadline:
    """The overall cap of one exchange, and the inactivity limit of each read within it."""

    def __init__(self, seconds: float, per_read_s: float | None) -> None:
        self.seconds, self.per_read_s = seconds, per_read_s
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        left = self.end - time.monotonic()
        if left <= 0:
            raise RasTimeout(f"RAS exchange exceeded its {self.seconds:g}s cap")
        return left

    def read(self) -> float:
        left = self.left()
        return left if self.per_read_s is None else min(left, self.per_read_s)


class RasClient:
    """One endpoint. ``status()`` and ``monitor()`` each open their own connection."""

    def __init__(self, addr: str = f"localhost:{DEFAULT_PORT}", *, timeout_s: float = 30.0,
                 collective_timeout_s: int = 5, max_reply_bytes: int = 64 << 20) -> None:  # fmt: skip
        self.host, self.port = parse_ras_addr(addr)
        self.endpoint = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
        self.timeout_s = timeout_s
        self.collective_timeout_s = collective_timeout_s
        self.max_reply_bytes = max_reply_bytes
        self.features = Features()
        self.server_protocol: int | None = None

    def _deadline(self) -> _Deadline:
        return _Deadline(self.timeout_s, read_timeout_s(self.collective_timeout_s))

    async def _connect(self, deadline: _Deadline) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        loop = asyncio.get_running_loop()
        limit = (
            deadline.left()
        )  # before the awaitable is made: an expired cap must not leave it never awaited
        try:
            infos = await asyncio.wait_for(
                loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM), limit
            )
        except socket.gaierror as exc:
            raise RasRefused(f"cannot resolve RAS host {self.host!r}: {exc}") from None
        except TimeoutError:
            raise RasTimeout(f"resolving {self.host!r} timed out") from None
        errors = []
        for family, _, _, _, sockaddr in dict.fromkeys(infos):
            limit = deadline.left()
            try:
                return await asyncio.wait_for(
                    asyncio.open_connection(str(sockaddr[0]), int(sockaddr[1]), family=family), limit
                )
            except TimeoutError:
                raise RasTimeout(f"connecting to {sockaddr[0]} port {self.port} timed out") from None
            except OSError as exc:
                errors.append(f"{sockaddr[0]}: {exc.strerror or exc}")
        raise RasRefused(f"no RAS endpoint at {self.endpoint} ({'; '.join(errors) or 'no address'})")

    async def _line(self, reader: asyncio.StreamReader, deadline: _Deadline) -> str:
        limit = deadline.read()
        try:
            raw = await asyncio.wait_for(reader.readline(), limit)
        except TimeoutError:
            raise RasTimeout(f"{self.endpoint} did not answer within {limit:g}s") from None
        except ConnectionError as exc:
            raise RasReset(f"connection to {self.endpoint} reset: {exc}") from None
        if not raw.endswith(b"\n"):
            raise RasReset(f"connection to {self.endpoint} closed while waiting for a reply")
        return raw.decode(errors="replace").rstrip("\r\n")

    async def _command(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, command: str,
                       deadline: _Deadline) -> str:  # fmt: skip
        writer.write(f"{command}\n".encode())
        await writer.drain()
        reply = await self._line(reader, deadline)
        if reply.startswith("ERROR:"):
            raise RasReplyError(reply)
        return reply

    async def _handshake(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         deadline: _Deadline) -> None:  # fmt: skip
        reply = await self._command(reader, writer, f"CLIENT PROTOCOL {PROTOCOL}", deadline)
        number = reply.removeprefix("SERVER PROTOCOL ").strip()
        if not reply.startswith("SERVER PROTOCOL ") or not number.isdigit():
            raise RasClientError(f"unexpected handshake reply {reply[:200]!r}")
        if self.server_protocol is None and int(number) != PROTOCOL:
            log.warning("RAS endpoint %s speaks protocol %s, this client %d: replies may not parse",
                        self.endpoint, number, PROTOCOL)  # fmt: skip
        self.server_protocol = int(number)
        await self._command(reader, writer, f"TIMEOUT {self.collective_timeout_s:d}", deadline)

    async def _try_json(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        deadline: _Deadline) -> bool:  # fmt: skip
        if self.features.json is False:
            return False
        try:
            await self._command(reader, writer, "SET FORMAT json", deadline)
        except RasReplyError as exc:
            if not exc.unknown_command:
                raise
            self.features.json = False
            return False
        self.features.json = True
        return True

    async def status(self, *, verbose: bool = False, prefer_json: bool = False) -> tuple[str, bytes]:
        """One status poll: ``("json" | "text", reply bytes)`` read to EOF; JSON only when preferred and supported."""
        deadline = self._deadline()
        reader, writer = await self._connect(deadline)
        try:
            await self._handshake(reader, writer, deadline)
            fmt = "json" if prefer_json and await self._try_json(reader, writer, deadline) else "text"
            writer.write(b"VERBOSE STATUS\n" if verbose else b"STATUS\n")
            await writer.drain()
            body = await self._read_to_eof(reader, deadline)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
        head = body.lstrip()[:200]
        if head.startswith(b"ERROR:"):
            raise RasReplyError(head.split(b"\n")[0].decode(errors="replace"))
        if not body:
            raise RasReset(f"{self.endpoint} closed the connection without a status reply")
        return fmt, body

    async def diagnostics(self) -> bytes:
        """One ``DIAGNOSTICS`` run (NCCL 2.31+): the reply read to EOF, as the server closes the connection after it;
        ``BUSY:`` and ``ERROR:`` replies are returned too (:func:`~.parse_diagnostics.parse_diagnostics` tells them
        apart). The text format is the server's default and the only one it runs diagnostics in."""
        deadline = self._deadline()
        reader, writer = await self._connect(deadline)
        try:
            await self._handshake(reader, writer, deadline)
            writer.write(b"DIAGNOSTICS\n")
            await writer.drain()
            first = (await self._line(reader, deadline)) + "\n"
            if first.startswith(("ERROR:", "BUSY:")):
                return first.encode()  # a server before 2.31 keeps the connection open after its refusal
            body = first.encode() + await self._read_to_eof(reader, deadline)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
        if not body:
            raise RasReset(f"{self.endpoint} closed the connection without a diagnostics reply")
        return body

    async def set_profiler_mask(self, value: str) -> None:
        """``CONTROL PROFILER_MASK <value>`` (NCCL 2.31+), sent on to every process of the job. A refusal is a
        :class:`RasReplyError` (``unknown_command``: the release has no CONTROL)."""
        deadline = self._deadline()
        reader, writer = await self._connect(deadline)
        try:
            await self._handshake(reader, writer, deadline)
            reply = await self._command(reader, writer, f"CONTROL PROFILER_MASK {value}", deadline)
        finally:
            writer.close()
        if reply != "OK":
            raise RasClientError(f"unexpected reply to CONTROL: {reply[:200]!r}")

    async def _read_to_eof(self, reader: asyncio.StreamReader, deadline: _Deadline) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            limit = deadline.read()
            try:
                chunk = await asyncio.wait_for(reader.read(READ_CHUNK), limit)
            except TimeoutError:
                raise RasTimeout(f"status from {self.endpoint} stalled or exceeded the {self.timeout_s:g}s cap "
                                 f"after {size} bytes") from None  # fmt: skip
            except ConnectionError as exc:
                raise RasReset(
                    f"connection to {self.endpoint} reset mid-reply after {size} bytes: {exc}"
                ) from None
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > self.max_reply_bytes:
                raise RasOversized(f"status from {self.endpoint} exceeds {self.max_reply_bytes} bytes")
            chunks.append(chunk)

    async def probe_monitor(self) -> bool:
        """Whether the endpoint supports MONITOR (cached): sent on its own connection, which is then closed."""
        if self.features.monitor is None:
            deadline = self._deadline()
            reader, writer = await self._connect(deadline)
            try:
                await self._handshake(reader, writer, deadline)
                await self._command(reader, writer, "MONITOR", deadline)
                self.features.monitor = True
            except RasReplyError as exc:
                if not exc.unknown_command:
                    raise
                self.features.monitor = False
            finally:
                writer.close()
        return self.features.monitor

    async def monitor(self, groups: str = "lifecycle") -> AsyncIterator[RasEvent]:
        """MONITOR events until the endpoint closes (the job ended). Unsupported: RasReplyError (unknown command)."""
        deadline = self._deadline()
        reader, writer = await self._connect(deadline)
        try:
            await self._handshake(reader, writer, deadline)
            await self._try_json(reader, writer, deadline)
            try:
                await self._command(reader, writer, f"MONITOR {groups}", deadline)
            except RasReplyError as exc:
                if exc.unknown_command:
                    self.features.monitor = False
                raise
            self.features.monitor = True
            decoder = MonitorDecoder()
            while True:
                try:
                    chunk = await reader.read(READ_CHUNK)
                except ConnectionError as exc:
                    raise RasReset(f"MONITOR connection to {self.endpoint} reset: {exc}") from None
                if not chunk:
                    return
                for event in decoder.feed(chunk):
                    yield event
        finally:
            writer.close()
