"""The probe server every agent runs: answers echo, upload and download requests from allowed peers, within limits.

It cannot be used to exhaust the node: peers outside ``allow`` are refused before any payload moves; at most
``max_concurrent`` probes run at once (others get ``BUSY`` at once, nothing queues); every grant is clamped to
``max_bytes`` and ``max_seconds`` per probe and to ``max_bytes_per_minute`` over all probes; every read has a timeout, so
an idle or slow client cannot hold a slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass

from agent.probe.protocol import REQUEST_SIZE, Op, ProtocolError, Reply, Request, Status
from agent.probe.streams import receive_timed, send_for

log = logging.getLogger(__name__)

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class ServerLimits:
    max_concurrent: int = 2
    max_bytes: int = 256 * 1024**2  # per probe
    max_seconds: float = 5.0  # per upload or download
    max_bytes_per_minute: int = 4 * 1024**3  # all probes together
    max_echo_count: int = 1000
    max_echo_size: int = 64 * 1024
    io_timeout_s: float = 5.0  # any single read or write


def parse_networks(cidrs: Sequence[str]) -> list[IpNetwork]:
    """``["10.0.0.0/8", "::1"]`` -> networks; raises ``ValueError`` naming the bad entry."""
    nets = []
    for cidr in cidrs:
        try:
            nets.append(ipaddress.ip_network(cidr.strip(), strict=False))
        except ValueError as exc:
            raise ValueError(f"not an address or CIDR: {cidr!r} ({exc})") from None
    return nets


def is_allowed(peer_ip: str, allow: Sequence[IpNetwork]) -> bool:
    """An empty allow list accepts anyone (``ranksight probe serve`` without ``--allow``)."""
    if not allow:
        return True
    try:
        addr = ipaddress.ip_address(peer_ip.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped:
        addr = addr.ipv4_mapped
    return any(addr.version == net.version and addr in net for net in allow)


def _any_address_socket(port: int) -> socket.socket:
    """One dual-stack listening socket for all addresses, so that port 0 yields one port for IPv4 and IPv6."""
    try:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        bind: tuple[str, int] = ("::", port)
    except OSError:  # no IPv6 on this host
        sock, bind = socket.socket(socket.AF_INET, socket.SOCK_STREAM), ("0.0.0.0", port)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(bind)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


class ProbeServer:
    def __init__(
        self,
        host: str | None,
        port: int,
        allow: Sequence[IpNetwork] = (),
        limits: ServerLimits = ServerLimits(),
    ) -> None:
        self.host, self.port = host, port
        self.allow = list(allow)
        self.limits = limits
        self.active = 0
        self.served = 0
        self.rejected = 0
        self._window_start = time.monotonic()
        self._window_bytes = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> ProbeServer:
        if self.host is None:
            self._server = await asyncio.start_server(self._handle, sock=_any_address_socket(self.port))
        else:
            self._server = await asyncio.start_server(self._handle, self.host, self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]  # the real port when 0 was asked
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    async def serve_forever(self) -> None:
        assert self._server is not None
        await self._server.serve_forever()

    def _take_bytes(self, wanted: int) -> int:
        """Grant up to ``wanted`` from the per-minute byte budget."""
        now = time.monotonic()
        if now - self._window_start >= 60:
            self._window_start, self._window_bytes = now, 0
        granted = max(0, min(wanted, self.limits.max_bytes_per_minute - self._window_bytes))
        self._window_bytes += granted
        return granted

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername") or ("?", 0)
        try:
            if not is_allowed(str(peer[0]), self.allow):
                self.rejected += 1
                writer.write(Reply(Status.REFUSED).encode())
                return
            if self.active >= self.limits.max_concurrent:
                self.rejected += 1
                writer.write(Reply(Status.BUSY).encode())
                return
            self.active += 1
            try:
                await self._serve(reader, writer)
                self.served += 1
            finally:
                self.active -= 1
        except (ProtocolError, OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
            log.debug("probe from %s ended: %s", peer[0], exc)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.drain(), self.limits.io_timeout_s)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        lim = self.limits
        req = Request.decode(await asyncio.wait_for(reader.readexactly(REQUEST_SIZE), lim.io_timeout_s))
        if req.op is Op.ECHO:
            size, count = min(req.nbytes, lim.max_echo_size), min(req.count, lim.max_echo_count)
            if size < 1 or count < 1:
                writer.write(Reply(Status.BAD_REQUEST).encode())
                return
            writer.write(Reply(Status.OK, size, count).encode())
            for _ in range(count):
                data = await asyncio.wait_for(reader.readexactly(size), lim.io_timeout_s)
                writer.write(data)
                await asyncio.wait_for(writer.drain(), lim.io_timeout_s)
            return
        budget_ms = min(req.budget_ms, int(lim.max_seconds * 1000))
        nbytes = self._take_bytes(min(req.nbytes, lim.max_bytes))
        if nbytes < 1 or budget_ms < 1:
            writer.write(Reply(Status.BUSY if req.nbytes and req.budget_ms else Status.BAD_REQUEST).encode())
            return
        writer.write(Reply(Status.OK, nbytes, 0, budget_ms).encode())
        if req.op is Op.UPLOAD:
            meter = await receive_timed(reader, nbytes, budget_ms / 1000 + lim.io_timeout_s, lim.io_timeout_s)
            writer.write(Reply(Status.OK, meter.total, meter.timed, meter.elapsed_ns).encode())
        else:
            await send_for(writer, nbytes, budget_ms / 1000, lim.io_timeout_s)
