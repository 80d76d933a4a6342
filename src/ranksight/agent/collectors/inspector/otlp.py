"""The agent's OTLP/HTTP receiver for the Inspector plugin's export (NCCL 2.32.3, ``NCCL_INSPECTOR_OTEL_EXPORT=1``):
a node can give Inspector data with no dump files at all.

What the plugin sends (``inspector_otel.cc``): one ``POST <path>`` (default ``http://localhost:4318/v1/metrics``)
per dump interval with ``Content-Type: application/json``, ``Connection: close`` and a ``Content-Length``; it reads
only the status line of the answer. So the receiver speaks that much HTTP/1.1 and no more: one request per
connection, JSON bodies only (an OTLP protobuf body is answered 415), never compressed (the plugin does not compress;
a ``Content-Encoding`` other than identity is answered 415 and nothing is ever inflated, so no small body can expand
past the byte bound), a length always given (411 without one).

Bounded, as everything the agent opens: it listens on loopback only; open connections, bytes per request and
requests per second (a one-second token bucket) are settings; a request not read within ``otlp_read_timeout_s`` is
dropped. A connection beyond ``otlp_max_connections`` is answered 503 (briefly lingering, so the client reads it);
beyond as many again being answered so, a flood, it is closed at once unanswered (``refused_flood``). Every refusal is answered with its status and counted in :attr:`OtlpReceiver.counts`; a body that is not an
OTLP metrics request gets 400, and records are handed on only for bodies that parse.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ranksight.agent.collectors.inspector.metrics import InspectorMetricsError, parse_otlp
from ranksight.errors import RanksightError
from ranksight.schemas.records import InspectorMetricsRecord

log = logging.getLogger(__name__)

METRICS_PATH = "/v1/metrics"
MAX_HEADER_BYTES = 16 << 10
LOOPBACK = ("127.0.0.1", "::1")
LINGER_BYTES, LINGER_S = 64 << 10, 0.2  # what is read of a refused request's rest before closing
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout",
            411: "Length Required", 413: "Payload Too Large", 415: "Unsupported Media Type",
            429: "Too Many Requests", 431: "Request Header Fields Too Large", 503: "Service Unavailable"}  # fmt: skip


@dataclass(frozen=True)
class OtlpLimits:
    max_body_bytes: int
    max_requests_per_s: float
    max_connections: int
    read_timeout_s: float


class OtlpRefused(RanksightError):
    """A request the receiver answers with an HTTP error status (``status``) and a reason."""

    def __init__(self, status: int, why: str) -> None:
        super().__init__(why)
        self.status = status


class OtlpReceiver:
    """Serves ``POST /v1/metrics`` on loopback ``port``; ``on_records`` gets each accepted request's records and the
    client's port (before the answer is sent: the sending process still holds its end of the connection)."""

    def __init__(self, port: int, limits: OtlpLimits,
                 on_records: Callable[[list[InspectorMetricsRecord], int], Awaitable[None]]) -> None:  # fmt: skip
        self.port = port
        self.limits = limits
        self.on_records = on_records
        self.servers: list[asyncio.Server] = []
        self.open = 0
        self.refusing = 0  # connections beyond the bound being answered 503
        self.tokens = limits.max_requests_per_s
        self.refilled = time.monotonic()
        self.counts: Counter[str] = Counter()  # requests, records, and each refusal by status
        self.last_error: str | None = None

    async def start(self) -> None:
        """Listen on every loopback address this host has (the plugin may resolve ``localhost`` to either)."""
        errors = []
        for host in LOOPBACK:
            try:
                self.servers.append(await asyncio.start_server(self._serve, host, self.port))
            except OSError as exc:
                errors.append(f"{host}: {exc}")
        if not self.servers:
            raise OSError(f"OTLP receiver cannot listen on port {self.port}: {'; '.join(errors)}")

    async def close(self) -> None:
        for server in self.servers:
            server.close()
            await server.wait_closed()
        self.servers = []

    def status(self) -> dict[str, object]:
        return {
            "port": self.port,
            "open": self.open,
            "counts": dict(self.counts),
            "last_error": self.last_error,
        }

    def _take_token(self) -> bool:
        now = time.monotonic()
        rate = self.limits.max_requests_per_s
        self.tokens = min(rate, self.tokens + (now - self.refilled) * rate)
        self.refilled = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.open >= self.limits.max_connections:
            if self.refusing >= self.limits.max_connections:
                self.counts["refused_flood"] += 1
                writer.transport.abort()
                return
            self.counts["refused_503"] += 1
            self.refusing += 1
            try:
                await _answer(reader, writer, 503, "too many connections")
            finally:
                self.refusing -= 1
            return
        self.open += 1
        try:
            status, why = 200, ""
            try:
                body = await asyncio.wait_for(self._read(reader), self.limits.read_timeout_s)
                records = await asyncio.to_thread(_records, body)
                self.counts["requests"] += 1
                self.counts["records"] += len(records)
                if records:
                    await self.on_records(records, writer.get_extra_info("peername")[1])
            except OtlpRefused as exc:
                status, why = exc.status, str(exc)
            except TimeoutError:
                status, why = 408, "request not read in time"
            except (ConnectionError, asyncio.IncompleteReadError):
                return
            if status != 200:
                self.counts[f"refused_{status}"] += 1
                self.last_error = f"{status}: {why}"
            await _answer(reader, writer, status, why)
        finally:
            self.open -= 1

    async def _read(self, reader: asyncio.StreamReader) -> bytes:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            raise OtlpRefused(431, "headers too long") from None
        if len(head) > MAX_HEADER_BYTES:
            raise OtlpRefused(431, "headers too long")
        request, *lines = head.decode("latin-1").split("\r\n")
        method, _, rest = request.partition(" ")
        path = rest.partition(" ")[0].partition("?")[0]
        headers = {}
        for line in lines:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        if path != METRICS_PATH:
            raise OtlpRefused(404, f"only {METRICS_PATH} is served")
        if method != "POST":
            raise OtlpRefused(405, "only POST")
        if "json" not in headers.get("content-type", "").lower():
            raise OtlpRefused(
                415, "only OTLP JSON (application/json) bodies; set the exporter's protocol to http/json"
            )
        encoding = headers.get("content-encoding", "identity").lower()
        if encoding not in ("", "identity"):
            raise OtlpRefused(
                415, f"Content-Encoding {encoding}: only uncompressed bodies (as the plugin sends)"
            )
        if "transfer-encoding" in headers:
            raise OtlpRefused(411, "a Content-Length is needed (no chunked bodies)")
        try:
            length = int(headers["content-length"])
        except (KeyError, ValueError):
            raise OtlpRefused(411, "a Content-Length is needed") from None
        if not 0 <= length <= self.limits.max_body_bytes:
            raise OtlpRefused(413, f"body of {length} bytes, more than otlp_max_body_bytes")
        if not self._take_token():
            raise OtlpRefused(429, "more requests per second than otlp_max_requests_per_s")
        return await reader.readexactly(length)


def _records(body: bytes) -> list[InspectorMetricsRecord]:
    try:
        records, _, _ = parse_otlp(body)
    except InspectorMetricsError as exc:
        raise OtlpRefused(400, str(exc)) from None
    return records


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, status: int, why: str) -> None:
    """Send the answer, then read what the client still sends, briefly and bounded: closing a socket with unread
    input resets the connection, and the client would lose the answer."""
    body = b"{}" if status == 200 else json.dumps({"message": why}).encode()
    head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n")  # fmt: skip
    if status == 429:
        head += "Retry-After: 1\r\n"
    with contextlib.suppress(ConnectionError):
        writer.write(head.encode() + b"\r\n" + body)
        await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(reader.read(LINGER_BYTES), LINGER_S)
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()
