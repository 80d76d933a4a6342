"""The HTTP face under slowloris: half-open connections are closed at the header deadline, the connection cap holds,
idle keep-alive connections end, and legitimate requests are still answered (real aiohttp server, real TCP)."""

from __future__ import annotations

import asyncio
import time

import aiohttp

from ranksight.aggregator.runtime import Aggregator
from ranksight.settings import Settings
from tests.http_cluster import http_settings
from tests.support import aggregator, wait_for


async def half_open(agg: Aggregator) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection that starts a request and never finishes its head."""
    assert agg.http.url
    host, port = agg.http.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"GET /api/status HTTP/1.1\r\nHost: x\r\n")
    await writer.drain()
    return reader, writer


async def closed_by_server(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, seconds: float
) -> bool:
    """Keep dribbling header lines; True once the server has closed the connection."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            writer.write(b"X-Slow: 1\r\n")
            await writer.drain()
            if await asyncio.wait_for(reader.read(100), 0.2) == b"":
                return True
        except TimeoutError:  # still open (before OSError: TimeoutError is one)
            continue
        except OSError:
            return True
    return False


async def status_ok(agg: Aggregator) -> bool:
    timeout = aiohttp.ClientTimeout(total=5)
    async with aiohttp.ClientSession(timeout=timeout) as http, http.get(f"{agg.http.url}/api/status") as resp:
        return resp.status == 200 and (await resp.json())["ok"]


async def test_slowloris_connections_are_closed_and_real_requests_answered(settings: Settings) -> None:
    cfg = http_settings(settings, header_timeout_s=1.5, idle_timeout_s=3.0, max_connections=60)
    async with aggregator(cfg) as agg:
        slow = [await half_open(agg) for _ in range(40)]
        assert await status_ok(agg)  # below the cap: answered while the slow ones hang
        started = time.monotonic()
        results = await asyncio.gather(*(closed_by_server(r, w, 10) for r, w in slow))
        assert (
            all(results) and time.monotonic() - started < 5
        )  # closed at the header deadline, not after 90 s
        assert agg.http.guard is not None and agg.http.guard.timed_out >= 40
        for _, w in slow:
            w.close()

        # 200 at once: those over the cap are closed at once, the rest at the deadline; then all is well again
        flood = [await half_open(agg) for _ in range(200)]
        assert all(await asyncio.gather(*(closed_by_server(r, w, 10) for r, w in flood)))
        assert agg.http.guard.refused >= 140
        for _, w in flood:
            w.close()
        await wait_for(lambda: agg.http.guard is not None and agg.http.guard.open == 0, timeout=5)
        assert await status_ok(agg)


async def test_idle_keepalive_connection_is_closed(settings: Settings) -> None:
    cfg = http_settings(settings, header_timeout_s=5.0, idle_timeout_s=1.0)
    async with aggregator(cfg) as agg:
        assert agg.http.url
        host, port = agg.http.url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        started = time.monotonic()
        while await asyncio.wait_for(reader.read(65536), 10):  # the body, then EOF when the server closes
            pass
        assert time.monotonic() - started < 4
        writer.close()
