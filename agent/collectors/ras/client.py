"""Async RAS client, as faithful as ``ncclras``/``rcclras``.

Connects to every address the RAS host resolves to (``localhost`` is ``::1`` and ``127.0.0.1``; the server binds
one), speaks ``CLIENT PROTOCOL 2`` then ``TIMEOUT <s>``, probes features by sending the command and reading ``OK`` or
``ERROR: Unknown command ...`` (``SET FORMAT json``, ``MONITOR``; cached per endpoint), and reads a status to EOF under
one overall deadline: one status per connection, nothing sent after it. Failures are the typed errors of
:mod:`agent.collectors.ras.errors`.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from agent.collectors.ras.errors import (
    RasClientError,
    RasOversized,
    RasRefused,
    RasReplyError,
    RasReset,
    RasTimeout,
)
from agent.collectors.ras.parse_monitor import MonitorDecoder
from schemas.records.ras import RasEvent

DEFAULT_PORT = 28028
PROTOCOL = 2
READ_CHUNK = 65536


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


class _Deadline:
    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        left = self.end - time.monotonic()
        if left <= 0:
            raise RasTimeout("RAS reply deadline passed")
        return left


class RasClient:
    """One endpoint. ``status()`` and ``monitor()`` each open their own connection."""

    def __init__(self, addr: str = f"localhost:{DEFAULT_PORT}", *, timeout_s: float = 10.0,
                 collective_timeout_s: float = 5.0, max_reply_bytes: int = 64 << 20) -> None:  # fmt: skip
        self.host, self.port = parse_ras_addr(addr)
        self.endpoint = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
        self.timeout_s = timeout_s
        self.collective_timeout_s = collective_timeout_s
        self.max_reply_bytes = max_reply_bytes
        self.features = Features()

    async def _connect(self, deadline: _Deadline) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        loop = asyncio.get_running_loop()
        try:
            infos = await asyncio.wait_for(
                loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM), deadline.left()
            )
        except socket.gaierror as exc:
            raise RasRefused(f"cannot resolve RAS host {self.host!r}: {exc}") from None
        except TimeoutError:
            raise RasTimeout(f"resolving {self.host!r} timed out") from None
        errors = []
        for family, _, _, _, sockaddr in dict.fromkeys(infos):
            try:
                return await asyncio.wait_for(
                    asyncio.open_connection(str(sockaddr[0]), int(sockaddr[1]), family=family),
                    deadline.left(),
                )
            except TimeoutError:
                raise RasTimeout(f"connecting to {sockaddr[0]} port {self.port} timed out") from None
            except OSError as exc:
                errors.append(f"{sockaddr[0]}: {exc.strerror or exc}")
        raise RasRefused(f"no RAS endpoint at {self.endpoint} ({'; '.join(errors) or 'no address'})")

    async def _line(self, reader: asyncio.StreamReader, deadline: _Deadline) -> str:
        try:
            raw = await asyncio.wait_for(reader.readline(), deadline.left())
        except TimeoutError:
            raise RasTimeout("RAS server did not answer in time") from None
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
        if reply.startswith(("ERROR:", "BUSY:")):
            raise RasReplyError(reply)
        return reply

    async def _handshake(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         deadline: _Deadline) -> None:  # fmt: skip
        reply = await self._command(reader, writer, f"CLIENT PROTOCOL {PROTOCOL}", deadline)
        if not reply.startswith("SERVER PROTOCOL "):
            raise RasClientError(f"unexpected handshake reply {reply[:200]!r}")
        await self._command(reader, writer, f"TIMEOUT {self.collective_timeout_s:g}", deadline)

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

    async def status(self, *, verbose: bool = False, prefer_json: bool = True) -> tuple[str, bytes]:
        """One status poll: ``("json" | "text", reply bytes)`` read to EOF."""
        deadline = _Deadline(self.timeout_s)
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
        if head.startswith((b"ERROR:", b"BUSY:")):
            raise RasReplyError(head.split(b"\n")[0].decode(errors="replace"))
        if not body:
            raise RasReset(f"{self.endpoint} closed the connection without a status reply")
        return fmt, body

    async def _read_to_eof(self, reader: asyncio.StreamReader, deadline: _Deadline) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            try:
                chunk = await asyncio.wait_for(reader.read(READ_CHUNK), deadline.left())
            except TimeoutError:
                raise RasTimeout(f"status from {self.endpoint} incomplete after {self.timeout_s:g}s "
                                 f"({size} bytes)") from None  # fmt: skip
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
            deadline = _Deadline(self.timeout_s)
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
        deadline = _Deadline(self.timeout_s)
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
