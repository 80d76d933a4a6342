"""What both ends share: the two payload loops (send for a time budget, receive and time on the receiving side) and the
stall meter that says whether a measurement timed the link or the host."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from ranksight.agent.probe.protocol import CHUNK, ReceiveMeter

STALL_TICK_S = 0.01  # the stall meter's wake-up period while a bandwidth phase runs
STALL_SLACK_S = 0.002  # lateness an idle loop shows anyway (timer granularity): not a stall

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
        # a read of data already buffered does not yield: let the loop (and the stall meter) run
        await asyncio.sleep(0)
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
        await asyncio.sleep(0)  # drain() below the high-water mark does not yield: let the loop run
    return sent


class StallMeter:
    """The share of a measurement during which this end's event loop could not run it: a timer due every
    ``STALL_TICK_S`` wakes late when the loop is busy with other work, the process waits for the GIL or the host has no
    CPU to give. A slow link stalls nothing (the loop waits, idle, for data), so a high share says the rate measured
    the host, not the link (as iperf3 reports each end's CPU beside its rate)."""

    def __init__(self) -> None:
        self.stalled_s = 0.0
        self.elapsed_s = 0.0
        self._task: asyncio.Task[None] | None = None
        self._started = self._due = 0.0

    async def __aenter__(self) -> StallMeter:
        self._started = time.perf_counter()
        self._due = self._started + STALL_TICK_S
        self._task = asyncio.create_task(self._watch())
        return self

    async def __aexit__(self, *exc: object) -> None:
        now = time.perf_counter()
        self.elapsed_s = now - self._started
        self._count(now)  # a stall that ends the measurement counts too
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                # The watcher's own cancellation ends here; one aimed at the measurement (shutdown) goes on up:
                # swallowing it would leave the probe running and the process unable to stop.
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(max(0.0, self._due - time.perf_counter()))
            self._count(time.perf_counter())

    def _count(self, now: float) -> None:
        late = now - self._due
        if late > STALL_SLACK_S:
            self.stalled_s += late
        self._due = now + STALL_TICK_S  # counted once

    @property
    def share(self) -> float:
        """Stalled time over the measurement's time, within [0, 1] (0 when nothing was timed)."""
        return 0.0 if self.elapsed_s <= 0 else min(1.0, self.stalled_s / self.elapsed_s)
