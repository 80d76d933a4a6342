"""Partition ownership between live shards: joins and clean stops hand partitions over without losing or doubling a
record (no lease waits out its time), and a shard whose lease another holder took stops ingesting that partition."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import nats

from ranksight.aggregator.runtime import Aggregator
from ranksight.aggregator.shards import assignment, partition_key
from ranksight.config import Settings
from tests.loadgen import SyntheticAgent
from tests.shard_topology import ShardTopology, published, tally
from tests.support import running, wait_for

LEASE_TTL_S = 6.0


async def test_joining_and_stopping_shards_hand_partitions_over_exactly_once(
    settings: Settings, tmp_path: Path
) -> None:
    topology = ShardTopology(settings, tmp_path / "shards", 4, LEASE_TTL_S)
    await topology.create_stream()
    agents = [await SyntheticAgent(settings, f"sim-{i}", records_per_batch=20).start() for i in range(8)]
    publishing = True

    async def produce() -> None:
        while publishing:
            for a in agents:
                await a.emit(20)
            await asyncio.sleep(0.1)

    producer = asyncio.create_task(produce())
    try:
        for shard_id in ("a", "b"):
            topology.start(shard_id)
        await wait_for(lambda: topology.settled(["a", "b"]), timeout=60, interval=0.3)
        topology.start("c")
        await wait_for(lambda: topology.settled(["a", "b", "c"]), timeout=60, interval=0.3)
        holders, _ = await topology.bucket()
        assert holders == assignment(4, ["a", "b", "c"])
        stopped_at = time.monotonic()
        assert topology.shards["a"].stop() == 0
        await wait_for(lambda: topology.settled(["b", "c"]), timeout=30, interval=0.2)
        assert time.monotonic() - stopped_at < LEASE_TTL_S, (
            "a released partition waited for its lease to expire"
        )
        publishing = False
        await producer
        for a in agents:
            assert await a.flush(30)
        await wait_for(topology.drained, timeout=60, interval=0.3)
    except BaseException:
        print(topology.logs())
        raise
    finally:
        publishing = False
        for a in agents:
            await a.close()
        topology.stop()
    result = tally(published(agents), topology.shards.values())
    assert result.lost == 0 and result.stray == 0, result
    assert result.doubled_across_live == 0, result
    assert result.doubled_in_a_shard == {"a": 0, "b": 0, "c": 0}, result
    # every shard ingested some of it
    assert all(shard.records() for shard in topology.shards.values())


async def test_a_lease_taken_by_another_holder_stops_that_partition_at_once(
    settings: Settings, tmp_path: Path
) -> None:
    shards = settings.aggregator.shards.model_copy(
        update={"partitions": 2, "shard_id": "only", "lease_ttl_s": 3.0}
    )
    sharded = settings.model_copy(
        update={"aggregator": settings.aggregator.model_copy(update={"shards": shards})}
    )
    async with running(Aggregator(sharded)) as agg:
        await wait_for(lambda: agg.shards is not None and agg.shards.ingesting == [0, 1], timeout=20)
        assert agg.shards is not None
        ingest = agg.shards.held[0].task
        nc = await nats.connect(settings.nats.url)
        try:
            kv = await nc.jetstream().key_value(shards.bucket)
            await kv.delete(partition_key(0))  # as if the lease had expired, and then another shard took it
            await kv.create(partition_key(0), b"intruder")
            await wait_for(lambda: agg.shards is not None and agg.shards.ingesting == [1], timeout=5)
            await wait_for(ingest.done, timeout=5)  # its loop fetches nothing more
            assert agg.status_meta()["shard"] == {"id": "only", "partitions": [1], "members": ["only"]}
            await kv.delete(partition_key(0))  # the intruder lets go: it is this shard's share again
            await wait_for(lambda: agg.shards is not None and agg.shards.ingesting == [0, 1], timeout=5)
        finally:
            await nc.close()
