"""The aggregator's pull requests are bounded in bytes as well as messages (real nats-server, real consumer)."""

from __future__ import annotations

import asyncio
import time

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig

from ranksight.aggregator.pull import BoundedPull
from ranksight.aggregator.runtime import ensure_stream
from ranksight.schemas.subjects import Subjects
from ranksight.settings import Settings
from tests.loadgen import SyntheticAgent
from tests.support import aggregator, consumer_drained, gpu_rows, wait_for


async def test_fetch_stops_at_the_byte_bound_and_waits_when_quiet(settings: Settings) -> None:
    cfg = settings.aggregator
    nc = await nats.connect(settings.nats.url)
    try:
        js = nc.jetstream()
        await ensure_stream(js, settings)
        await js.add_consumer(
            cfg.stream, ConsumerConfig(durable_name="bounded", ack_policy=AckPolicy.EXPLICIT)
        )
        subject = Subjects(settings.subject_prefix).event("test", "n", "gpu")
        for i in range(10):
            await js.publish(subject, bytes([i]) * 600_000)
        # The bound is raised to twice the server's max_payload (1 MB), so the largest message always fits.
        pull = await BoundedPull(nc, cfg.stream, "bounded", batch=100, max_bytes=1).start()
        assert pull.max_bytes == 2 * nc.max_payload
        sizes = []
        while len(sizes) < 10:
            batch = await pull.fetch(timeout=2.0)
            assert 0 < sum(len(m.data) for m in batch) <= pull.max_bytes
            sizes += [len(m.data) for m in batch]
            for m in batch:
                await m.ack()
        assert sizes == [600_000] * 10
        started = time.monotonic()
        assert await pull.fetch(timeout=0.5) == []  # nothing left: waits about the timeout, then gives up
        assert 0.3 < time.monotonic() - started < 3
    finally:
        await nc.close()


async def test_the_aggregator_commits_a_fetch_over_the_record_bound_in_parts(settings: Settings) -> None:
    """A fetched batch holding more than ``fetch_max_records`` records: committed in several transactions, every
    message acknowledged once committed, nothing lost or doubled (a real aggregator, agents and nats-server)."""
    settings.aggregator.ingest.fetch_max_records = 100
    nc = await nats.connect(settings.nats.url)
    await ensure_stream(nc.jetstream(), settings)
    await nc.close()
    agents = [await SyntheticAgent(settings, f"sim-{i}", records_per_batch=40).start() for i in range(3)]
    try:
        for agent in agents:
            for _ in range(10):
                await agent.emit(40)
            assert await agent.flush(30)
        async with aggregator(settings) as agg:  # the stream holds it all: its first fetch is over the bound
            await wait_for(lambda: consumer_drained(settings), timeout=60, interval=0.2)
            assert agg.stats.messages == 30
            assert agg.stats.batches >= 30 * 40 // 100
    finally:
        for agent in agents:
            await agent.close()
    assert gpu_rows(settings) == (1200, 1200)


@pytest.mark.parametrize(("every_s", "batches"), [(0.5, range(1, 10)), (0.0, range(20, 61))])
async def test_a_caught_up_aggregator_commits_at_most_every_commit_every_s(
    settings: Settings, every_s: float, batches: range
) -> None:
    """Messages trickling in (one every 50 ms for 3 s) are gathered into a commit at most every ``commit_every_s``;
    at 0 each is committed as it comes. Nothing is lost either way."""
    settings.aggregator.ingest.commit_every_s = every_s
    agent = await SyntheticAgent(settings, "sim-0", records_per_batch=4).start()
    try:
        async with aggregator(settings) as agg:
            for _ in range(60):
                await agent.emit(4)
                await agent.batcher.flush()  # type: ignore[union-attr]
                await asyncio.sleep(0.05)
            assert await agent.flush(30)
            await wait_for(lambda: agg.stats.messages == 60, timeout=30, interval=0.1)
            assert agg.stats.batches in batches
    finally:
        await agent.close()
    assert gpu_rows(settings) == (240, 240)


async def test_a_backlog_is_read_on_without_pacing_whatever_bounds_the_fetch(settings: Settings) -> None:
    """Fetches cut short by the byte bound while messages wait behind them are committed one after the other, not
    every ``commit_every_s`` (the messages: 600 kB that are not msgpack, dead-lettered; what counts is the fetching)."""
    settings.aggregator.ingest.commit_every_s = 3.0
    settings.aggregator.ingest.fetch_max_bytes = (
        1 << 20
    )  # raised to 2 x max_payload (1 MB): 3 of these a fetch
    nc = await nats.connect(settings.nats.url)
    try:
        js = nc.jetstream()
        await ensure_stream(js, settings)
        subject = Subjects(settings.subject_prefix).event("test", "n", "gpu")
        for i in range(12):
            await js.publish(subject, bytes([i]) * 600_000)
    finally:
        await nc.close()
    async with aggregator(settings) as agg:
        started = time.monotonic()
        await wait_for(lambda: agg.stats.messages == 12, timeout=30, interval=0.1)
        assert agg.stats.batches >= 4  # the byte bound cut the backlog into several fetches
        assert time.monotonic() - started < 6  # paced, four fetches would take 9 s at least
        assert agg.stats.dead_letters == 12
