"""Chaos: hostile input on the event subjects never stops ingest, never loses or doubles a good record.

The aggregator runs as a real child process against a real nats-server (loopback); each test asserts it stays up (and
comes back up on restart with the history it wrote), every good record is stored exactly once, every bad message is
dead-lettered with its reason, and its peak memory stays within bound.
"""

from __future__ import annotations

from collections import Counter

import pytest

from ranksight.core.natsconn import connect
from ranksight.core.natsserver import NatsServer
from ranksight.schemas.subjects import Subjects
from ranksight.settings import Settings
from tests.chaos.support import (
    RSS_BOUND,
    AggregatorProcess,
    MiB,
    db_rows,
    envelope,
    good_once,
    poison_pills,
    publish_raw,
)
from tests.chaos.test_identity_spoofing import CLUSTER, NODE, OTHER, as_user, shipped  # noqa: F401 - a fixture
from tests.loadgen import SyntheticAgent
from tests.support import aggregator, consumer_drained, wait_for

pytestmark = pytest.mark.chaos


async def _restart_comes_up(settings: Settings) -> None:
    """A restart replays the history this test wrote: it must come up and stay up."""
    agg = AggregatorProcess(settings).start()
    try:
        await agg.wait_ready()
        assert agg.alive()
    finally:
        agg.stop()


async def test_poison_pills_of_every_field_type(settings: Settings) -> None:
    subjects = Subjects(settings.subject_prefix)
    pills = poison_pills("evil")
    await publish_raw(settings, [])
    agg = AggregatorProcess(settings).start()
    sim = await SyntheticAgent(settings, "good", records_per_batch=100).start()
    try:
        await agg.wait_ready()
        await sim.emit(500)
        await publish_raw(settings, [(subjects.event("test", "evil", kind), data) for kind, data, _ in pills])
        await sim.emit(500)
        assert await sim.flush(30)
        await wait_for(lambda: consumer_drained(settings), timeout=60, interval=0.3)
        assert await agg.status() is not None and agg.alive(), agg.log()
        assert agg.peak_rss() < RSS_BOUND
    finally:
        await sim.close()
        agg.stop()
    assert good_once(settings, "good") == (1000, 1000)
    reasons = Counter(r for (r,) in db_rows(settings, "SELECT reason FROM dead_letters"))
    assert reasons == Counter(reason for _, _, reason in pills)
    await _restart_comes_up(settings)


async def test_identity_spoofing_cannot_touch_another_node(settings: Settings) -> None:
    subjects = Subjects(settings.subject_prefix)
    await publish_raw(settings, [])
    agg = AggregatorProcess(settings).start()
    victim = await SyntheticAgent(settings, "victim", records_per_batch=100).start()
    try:
        await agg.wait_ready()
        await victim.emit(500)
        assert await victim.flush(30)
        # The attacker holds the credentials of its own node only: it publishes on its own subjects, once as the
        # victim (same incarnation id, read off the bus), once as itself under the victim's incarnation id; both with
        # a seq that would have overflowed the victim's gap table.
        own = subjects.event("test", "attacker", "gpu")
        await publish_raw(settings, [
            (own, envelope("gpu", "victim", victim.incarnation, seq=2**62)),
            (own, envelope("gpu", "attacker", victim.incarnation, seq=2**62)),
        ])  # fmt: skip
        await victim.emit(500)
        assert await victim.flush(30)
        await wait_for(lambda: consumer_drained(settings), timeout=60, interval=0.3)
        status = await agg.status()
        assert status is not None and status["sequence"]["gaps_open"] == 0
    finally:
        await victim.close()
        agg.stop()
    assert good_once(settings, "victim") == (1000, 1000)
    assert db_rows(settings, "SELECT reason, count(*) FROM dead_letters GROUP BY ALL") == [
        ("identity_mismatch", 1)
    ]


async def test_ten_thousand_malformed_messages(settings: Settings) -> None:
    subjects = Subjects(settings.subject_prefix)
    subject = subjects.event("test", "noisy", "gpu")
    junk = [
        b"\xc1" * 3000,  # not msgpack, 3 KB
        envelope("gpu", "noisy", "noisy-inc", [{"index": "zero"}] * 200),  # bad records
        envelope("gpu", "someone-else", "noisy-inc"),  # identity mismatch
        envelope("gpu", "noisy", "noisy-inc", ttl=float("nan")),
    ]
    burst = [
        (subject, junk[i % len(junk)] + (b"" if i % len(junk) != 0 else i.to_bytes(4))) for i in range(10_000)
    ]
    await publish_raw(settings, [])
    agg = AggregatorProcess(settings).start()
    sim = await SyntheticAgent(settings, "good", records_per_batch=100).start()
    try:
        await agg.wait_ready()
        await sim.emit(1000)
        await publish_raw(settings, burst)
        await sim.emit(1000)
        assert await sim.flush(60)
        await wait_for(lambda: consumer_drained(settings), timeout=120, interval=0.5)
        assert await agg.status() is not None and agg.alive(), agg.log()
        peak = agg.peak_rss()
    finally:
        await sim.close()
        agg.stop()
    assert peak < RSS_BOUND, f"peak RSS {peak / MiB:.0f} MiB"
    assert good_once(settings, "good") == (2000, 2000)
    ((dead, longest),) = db_rows(settings, "SELECT count(*), max(octet_length(payload)) FROM dead_letters")
    assert dead == 10_000 and longest <= settings.aggregator.ingest.dead_letter_payload_bytes


async def test_a_node_cannot_claim_another_under_the_shipped_config(
    request: pytest.FixtureRequest, settings: Settings
) -> None:
    """Its own subject, another node's name in the envelope: NATS lets it through, the aggregator dead-letters it."""
    server: NatsServer = request.getfixturevalue("shipped")  # the shipped deploy/nats/nats-server.conf
    node = as_user(settings, server, NODE, "change-me-node-001")
    async with aggregator(as_user(settings, server, "aggregator", "change-me-aggregator")) as agg:
        nc = await connect(node.nats, "spoofer")
        try:
            subjects = Subjects(settings.subject_prefix)
            claim = envelope("heartbeat", OTHER, "other-inc", cluster=CLUSTER)
            await nc.jetstream().publish(subjects.event(CLUSTER, NODE, "heartbeat"), claim)
        finally:
            await nc.close()
        await wait_for(lambda: agg.stats.dead_letters == 1, timeout=15)
        reasons = await agg.store.call(
            lambda: agg.store.con.execute("SELECT reason FROM dead_letters").fetchall()
        )
        assert reasons == [("identity_mismatch",)] and (CLUSTER, OTHER) not in agg.state.nodes.nodes
