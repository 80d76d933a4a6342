"""Partition ownership between live shards: joins and clean stops hand partitions over without losing or doubling a
record (no lease waits out its time), and a shard whose lease another holder took stops ingesting that partition."""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats

from ranksight.aggregator.runtime import Aggregator
from ranksight.aggregator.shards import assignment, partition_key
from ranksight.core.kvlease import KvLeases
from ranksight.settings import Settings
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
        assert topology.shards["a"].stop() == 0
        holders, members = await topology.bucket()
        assert "a" not in holders.values() and "a" not in members, "a stopped shard left its leases to expire"
        await wait_for(lambda: topology.settled(["b", "c"]), timeout=30, interval=0.2)
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
        assert agg.nc is not None
        subscriptions = len(agg.nc._subs)
        nc = await nats.connect(settings.nats.url)
        try:
            kv = await nc.jetstream().key_value(shards.bucket)
            for _ in range(4):
                ingest = agg.shards.held[0].task
                await kv.delete(
                    partition_key(0)
                )  # as if the lease had expired, and then another shard took it
                await kv.create(partition_key(0), b"intruder")
                await wait_for(lambda: agg.shards is not None and agg.shards.ingesting == [1], timeout=5)
                await wait_for(ingest.done, timeout=5)  # its loop fetches nothing more
                assert agg.status_meta()["shard"] == {"id": "only", "partitions": [1], "members": ["only"]}
                await kv.delete(partition_key(0))  # the intruder lets go: it is this shard's share again
                await wait_for(lambda: agg.shards is not None and agg.shards.ingesting == [0, 1], timeout=5)
            # each stopped loop unsubscribed its pull's inbox (one more may be a round's bucket listing, in flight)
            assert len(agg.nc._subs) <= subscriptions + 1
        finally:
            await nc.close()


async def test_a_member_that_does_not_take_its_share_leaves_it_to_others_without_thrashing(
    settings: Settings, tmp_path: Path
) -> None:
    """A member key whose shard takes nothing (here: refreshed by the test alone): its share stays free for a lease
    time, then another shard takes it and keeps it, instead of handing it back every round."""
    shards = settings.aggregator.shards.model_copy(
        update={"partitions": 2, "shard_id": "only", "lease_ttl_s": 3.0}
    )
    sharded = settings.model_copy(
        update={"aggregator": settings.aggregator.model_copy(update={"shards": shards})}
    )
    nc = await nats.connect(settings.nats.url)
    kv = await KvLeases(nc.jetstream(), shards.bucket, shards.lease_ttl_s, "test").kv()
    ghostly = True

    async def ghost() -> None:
        while ghostly:
            await kv.put("member.ghost", b"{}")
            await asyncio.sleep(0.3)

    haunting = asyncio.create_task(ghost())
    try:
        async with running(Aggregator(sharded)) as agg:
            await wait_for(
                lambda: agg.shards is not None and agg.shards.members == ["ghost", "only"], timeout=10
            )
            assert agg.shards is not None
            await wait_for(
                lambda: agg.shards is not None and len(agg.shards.ingesting) == 1
            )  # its own share first
            await wait_for(lambda: agg.shards is not None and agg.shards.ingesting == [0, 1], timeout=20)
            taken = agg.shards.held.copy()
            await asyncio.sleep(4 * agg.shards.interval_s)
            assert agg.shards.held == taken  # kept: not released, not taken again
    finally:
        ghostly = False
        await haunting
        await nc.close()
