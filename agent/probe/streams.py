"""The two payload loops both ends share: send for a time budget, receive and time on the receiving side."""

from __future__ import annotations

import asyncio
import time

from agent.probe.protocol import CHUNK, ReceiveMeter


async def receive_timed(
    reader: asyncio.StreamReader, limit: int, deadline_s: float, io_timeout_s: float
) -> ReceiveMeter:
    """Read until ``limit`` bytes, EOF or the deadline; time what arrives."""
    meter = ReceiveMeter()
    end = time.monotonic() + deadline_s
    while meter.total < limit:
        left = end - time.monotonic()
        if left <= 0:
            break
        data = await asyncio.wait_for(reader.read(min(CHUNK, limit - meter.total)), min(left, io_timeout_s))
        if not data:
            break
        meter.chunk(len(data), time.perf_counter_ns())
    return meter


async def send_for(writer: asyncio.StreamWriter, limit: int, budget_s: float, io_timeout_s: float) -> int:
    """Write up to ``limit`` bytes within ``budget_s``; returns the bytes written."""
    block = bytes(CHUNK)
    sent = 0
    end = time.monotonic() + budget_s
    while sent < limit and time.monotonic() < end:
        n = min(CHUNK, limit - sent)
        writer.write(block[:n])
        await asyncio.wait_for(writer.drain(), io_timeout_s)
        sent += n
    return sent
