"""The sharded stream's subject layout: NATS's partition transform and the helpers that read it back."""

from __future__ import annotations

import asyncio
import collections
from pathlib import Path

import nats
import pytest
from nats.js.api import StreamConfig, SubjectTransform

from ranksight.core.natsserver import NatsServer
from ranksight.schemas.subjects import SubjectError, Subjects


def test_partitioned_subject_parses_to_the_published_one() -> None:
    s = Subjects()
    assert s.parse_event("ranksight.v1.evp.3.c1.n7.gpu") == s.parse_event(s.event("c1", "n7", "gpu"))
    for bad in ("ranksight.v1.evp.x.c1.n7.gpu", "ranksight.v1.evp.3.c1.gpu"):
        with pytest.raises(SubjectError):
            s.parse_event(bad)


def test_nats_puts_every_event_of_a_node_in_one_partition(tmp_path: Path) -> None:
    subjects = Subjects()
    server = NatsServer(tmp_path).start()

    async def partitions_of_nodes() -> dict[str, set[str]]:
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        src, dest = subjects.partition_transform(4)
        await js.add_stream(
            StreamConfig(
                name="T", subjects=[subjects.events_filter()], subject_transform=SubjectTransform(src, dest)
            )
        )
        for i in range(60):
            await js.publish(subjects.event("c1", f"node{i % 20}", ("gpu", "nic", "heartbeat")[i % 3]), b"x")
        seen: dict[str, set[str]] = collections.defaultdict(set)
        for p in range(4):
            sub = await js.pull_subscribe(subjects.partition_filter(p), durable=f"p{p}", stream="T")
            with_timeout = await sub.fetch(100, timeout=2)
            for msg in with_timeout:
                seen[subjects.parse_event(msg.subject).node].add(str(p))
        await nc.close()
        return seen

    try:
        seen = asyncio.run(partitions_of_nodes())
    finally:
        server.stop()
    assert len(seen) == 20  # every event was delivered to some partition
    assert all(len(parts) == 1 for parts in seen.values())  # and each node to exactly one
    assert len({p for parts in seen.values() for p in parts}) > 1  # and nodes are spread over partitions
