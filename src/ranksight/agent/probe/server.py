"""The probe server every agent runs: answers echo, upload and download requests from allowed peers, within limits.

It cannot be used to exhaust the node, nor can one peer shut the others out: peers outside ``allow`` are refused before
any payload moves; at most ``max_concurrent`` probes run at once and at most ``max_per_peer`` from one address (others
get ``BUSY`` at once, nothing queues); every grant is clamped to ``max_bytes`` and ``max_seconds``; the per-minute byte
budgets (all peers, and each peer) are charged as bytes move, so requests that move nothing cost nothing; a peer must
send its request within ``handshake_timeout_s``, each read or write must progress within ``idle_timeout_s``, and a
connection ends at ``handshake_timeout_s + max_seconds + idle_timeout_s`` whatever it does, so a silent or slow
client cannot hold a slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import logging
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ranksight.agent.probe.protocol import REQUEST_SIZE, Op, ProbeProtocolError, Reply, Request, Status
from ranksight.agent.probe.streams import StallMeter, receive_timed, send_for

log = logging.getLogger(__name__)

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class ServerLimits:
    max_concurrent: int = 2
    max_per_peer: int = 1  # connections at once from one address
    max_bytes: int = 256 * 1024**2  # per probe
    max_seconds: float = 5.0  # per upload or download
    max_bytes_per_minute: int = 4 * 1024**3  # all probes together
    max_bytes_per_peer_per_minute: int = 1024**3  # one address
    max_echo_count: int = 1000
    max_echo_size: int = 64 * 1024
    handshake_timeout_s: float = 2.0  # connect to a complete request
    idle_timeout_s: float = 5.0  # any single read or write

    @property
    def connection_s(self) -> float:
        """The most one connection lasts, whatever the peer does."""
        return self.handshake_timeout_s + self.max_seconds + self.idle_timeout_s


class ByteBudget:
    """Bytes moved per minute, over all peers and per peer; charged chunk by chunk as they move."""

    def __init__(self, limits: ServerLimits, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits, self.clock = limits, clock
        self._window_start = clock()
        self._total = 0
        self._per_peer: dict[str, int] = {}

    def _roll(self) -> None:
        now = self.clock()
        if now - self._window_start >= 60:
            self._window_start, self._total = now, 0
            self._per_peer.clear()

    def exhausted(self, peer: str) -> bool:
        self._roll()
        return (self._total >= self.limits.max_bytes_per_minute
                or self._per_peer.get(peer, 0) >= self.limits.max_bytes_per_peer_per_minute)  # fmt: skip

    def charge(self, peer: str, nbytes: int) -> bool:
        """Charge ``nbytes`` (about to be sent, or just received); False: over budget, stop the transfer."""
        if self.exhausted(peer):
            return False
        self._total += nbytes
        self._per_peer[peer] = self._per_peer.get(peer, 0) + nbytes
        return True


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
        self.budget = ByteBudget(limits)
        self._per_peer: dict[str, int] = {}  # address -> connections holding a slot
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

    def _admit(self, peer: str) -> Status:
        if not is_allowed(peer, self.allow):
            return Status.REFUSED
        if (
            self.active >= self.limits.max_concurrent
            or self._per_peer.get(peer, 0) >= self.limits.max_per_peer
        ):
            return Status.BUSY
        return Status.OK

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = str((writer.get_extra_info("peername") or ("?", 0))[0])
        try:
            admitted = self._admit(peer)
            if admitted is not Status.OK:
                self.rejected += 1
                writer.write(Reply(admitted).encode())
                return
            self.active += 1
            self._per_peer[peer] = self._per_peer.get(peer, 0) + 1
            try:
                async with asyncio.timeout(self.limits.connection_s):
                    await self._serve(peer, reader, writer)
                self.served += 1
            finally:
                self.active -= 1
                self._per_peer[peer] -= 1
                if not self._per_peer[peer]:
                    del self._per_peer[peer]
        except (ProbeProtocolError, OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
            log.debug("probe from %s ended: %s", peer, exc)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.drain(), self.limits.idle_timeout_s)
            writer.close()

    async def _serve(self, peer: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        lim = self.limits
        req = Request.decode(
            await asyncio.wait_for(reader.readexactly(REQUEST_SIZE), lim.handshake_timeout_s)
        )
        if self.budget.exhausted(peer):
            writer.write(Reply(Status.BUSY).encode())
            return
        if req.op is Op.ECHO:
            size, count = min(req.nbytes, lim.max_echo_size), min(req.count, lim.max_echo_count)
            if size < 1 or count < 1:
                writer.write(Reply(Status.BAD_REQUEST).encode())
                return
            writer.write(Reply(Status.OK, size, count).encode())
            for _ in range(count):
                data = await asyncio.wait_for(reader.readexactly(size), lim.idle_timeout_s)
                if not self.budget.charge(peer, 2 * size):
                    return  # the client sees the connection close: its probe fails, the budget holds
                writer.write(data)
                await asyncio.wait_for(writer.drain(), lim.idle_timeout_s)
            return
        budget_ms = min(req.budget_ms, int(lim.max_seconds * 1000))
        nbytes = min(req.nbytes, lim.max_bytes)
        if nbytes < 1 or budget_ms < 1:
            writer.write(Reply(Status.BAD_REQUEST).encode())
            return
        writer.write(Reply(Status.OK, nbytes, 0, budget_ms).encode())
        charge = functools.partial(self.budget.charge, peer)
        if req.op is Op.UPLOAD:
            async with StallMeter() as stall:
                meter = await receive_timed(reader, nbytes, budget_ms / 1000 + lim.idle_timeout_s,
                                            lim.idle_timeout_s, charge)  # fmt: skip
            writer.write(Reply(Status.OK, meter.total, meter.timed, meter.elapsed_ns,
                               round(stall.share * 1000)).encode())  # fmt: skip
        else:
            await send_for(writer, nbytes, budget_ms / 1000, lim.idle_timeout_s, charge)
