"""KV leases against a real nats-server: one holder at a time, renewal, expiry takeover, release."""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats

from ranksight.core.kvlease import KvLeases
from ranksight.core.natsserver import NatsServer


def test_one_holder_renewal_expiry_and_release(tmp_path: Path) -> None:
    server = NatsServer(tmp_path).start()

    async def scenario() -> None:
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        a = KvLeases(js, "leases", ttl_s=1.0, holder="a")
        b = KvLeases(js, "leases", ttl_s=1.0, holder="b")
        assert await a.hold("partition.0")
        assert not await b.hold("partition.0")
        await asyncio.sleep(0.5)
        assert await a.hold("partition.0")  # renewed before expiry
        await asyncio.sleep(0.6)
        assert not await b.hold("partition.0")  # still a's: the renewal restarted its clock
        await asyncio.sleep(1.6)  # a stopped renewing
        assert await b.hold("partition.0")
        assert not await a.hold("partition.0")  # a's stale revision no longer renews
        assert not a.holds("partition.0")
        await b.release("partition.0")
        assert await a.hold("partition.0")  # free at once, without waiting for expiry
        await nc.close()

    try:
        asyncio.run(scenario())
    finally:
        server.stop()


def test_a_restarted_holder_renews_its_own_lease_at_once(tmp_path: Path) -> None:
    """A new incarnation of the same holder (a restarted shard keeps its shard_id) knows no revision of its lease: it
    renews it rather than wait for it to expire, while another holder still cannot take it."""
    server = NatsServer(tmp_path).start()

    async def scenario() -> None:
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        before = KvLeases(js, "leases", ttl_s=30.0, holder="shard-a")
        assert await before.hold("partition.0")
        after = KvLeases(js, "leases", ttl_s=30.0, holder="shard-a")
        assert await after.hold("partition.0")
        assert not await KvLeases(js, "leases", ttl_s=30.0, holder="shard-b").hold("partition.0")
        assert await after.hold("partition.0")  # and renews it from then on
        await nc.close()

    try:
        asyncio.run(scenario())
    finally:
        server.stop()
