"""Probe server abuse over real TCP on loopback: the attacker connects from 127.0.0.2, the legitimate prober from
127.0.0.1 (both loopback on Linux, so the server sees two peers)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import pytest

from ranksight.agent.probe.client import ProbeBudget, run_probe
from ranksight.agent.probe.protocol import REPLY_SIZE, Op, Reply, Request, Status
from ranksight.agent.probe.server import ProbeServer, ServerLimits
from tests.support import wait_for

pytestmark = pytest.mark.chaos

ATTACKER = ("127.0.0.2", 0)
LEGIT = ProbeBudget(echo_count=10, bytes=8 * 1024**2, seconds=0.3)


@contextlib.asynccontextmanager
async def probe_server(limits: ServerLimits) -> AsyncIterator[ProbeServer]:
    server = await ProbeServer("127.0.0.1", 0, limits=limits).start()
    try:
        yield server
    finally:
        await server.stop()


async def _attacker(server: ProbeServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", server.port, local_addr=ATTACKER)


async def test_tiny_requests_do_not_deny_a_legitimate_probe() -> None:
    limits = ServerLimits(max_bytes=32 * 1024**2, max_bytes_per_minute=64 * 1024**2)
    async with probe_server(limits) as server:
        for _ in range(16):  # each asks for the most, takes the grant, moves nothing
            reader, writer = await _attacker(server)
            writer.write(Request(Op.UPLOAD, 32 * 1024**2, 0, 5000).encode())
            grant = Reply.decode(await reader.readexactly(REPLY_SIZE))
            assert grant.status is Status.OK
            writer.close()
            await wait_for(lambda: server.active == 0, timeout=5)
        result = await run_probe("127.0.0.1", server.port, LEGIT)
    assert result.upload_bps and result.download_bps


async def test_two_idle_connections_do_not_hold_all_slots() -> None:
    async with probe_server(ServerLimits(max_concurrent=2, max_per_peer=1)) as server:
        idle = [await _attacker(server) for _ in range(2)]  # connect, say nothing
        second = Reply.decode(await asyncio.wait_for(idle[1][0].readexactly(REPLY_SIZE), 5))
        assert second.status is Status.BUSY  # one slot per peer
        started = time.monotonic()
        result = await run_probe("127.0.0.1", server.port, LEGIT)
        assert result.rtt_us is not None and result.upload_bps
        assert time.monotonic() - started < server.limits.handshake_timeout_s  # at once, not after a timeout
        for _, writer in idle:
            writer.close()


async def test_slow_peer_is_cut_at_the_timeout() -> None:
    limits = ServerLimits(handshake_timeout_s=0.5, max_seconds=0.5, idle_timeout_s=1.0)
    async with probe_server(limits) as server:
        # a slow handshake: the request one byte at a time
        reader, writer = await _attacker(server)
        started = time.monotonic()
        request = Request(Op.ECHO, 1, 1000).encode()
        with contextlib.suppress(ConnectionError):
            for byte in request:
                writer.write(bytes([byte]))
                await writer.drain()
                if reader.at_eof():
                    break
                await asyncio.sleep(0.1)  # 24 bytes: 2.4 s when not cut
        assert await asyncio.wait_for(reader.read(), 5) == b""
        assert time.monotonic() - started < 2.4
        writer.close()
        # slow echoes: each within the idle timeout, 1000 of them would hold the slot for 500 s
        reader, writer = await _attacker(server)
        writer.write(request)
        assert Reply.decode(await reader.readexactly(REPLY_SIZE)).status is Status.OK
        started = time.monotonic()
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            for _ in range(1000):
                writer.write(b"x")
                await writer.drain()
                await asyncio.wait_for(reader.readexactly(1), 5)
                await asyncio.sleep(0.5)
        elapsed = time.monotonic() - started
        assert limits.connection_s - 0.6 < elapsed < limits.connection_s + 3, elapsed
        writer.close()
        await wait_for(lambda: server.active == 0, timeout=5)
