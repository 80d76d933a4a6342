"""The two payload loops both ends share: send for a time budget, receive and time on the receiving side."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from ranksight.agent.probe.protocol import CHUNK, ReceiveMeter

# Charges bytes against a budget as they move; False stops the transfer (the probe server's byte budget).
Charge = Callable[[int], bool]


def _free(nbytes: int) -> bool:
    return True


async def receive_timed(
    reader: asyncio.StreamReader, limit: int, deadline_s: float, io_timeout_s: float, charge: Charge = _free
) -> ReceiveMeter:
    """Read until ``limit`` bytes, EOF, the deadline or the end of the budget; time what arrives."""
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
        if not charge(len(data)):
            break
    return meter


async def send_for(
    writer: asyncio.StreamWriter, limit: int, budget_s: float, io_timeout_s: float, charge: Charge = _free
) -> int:
    """Write up to ``limit`` bytes within ``budget_s`` and the budget; returns the bytes written."""
    block = bytes(CHUNK)
    sent = 0
    end = time.monotonic() + budget_s
    while sent < limit and time.monotonic() < end:
        n = min(CHUNK, limit - sent)
        if not charge(n):
            break
        writer.write(block[:n])
        await asyncio.wait_for(writer.drain(), io_timeout_s)
        sent += n
    return sent
