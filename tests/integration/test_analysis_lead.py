"""Sharded aggregators: one analysis lead raises the cluster-wide alerts, and a lead failover re-fires nothing.

Real parts: a nats-server, three ``ranksight aggregator`` processes (shards, each its own state dir), simulated agents
publishing GPU facts on the real subjects, the lead SIGKILLed mid-stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections import Counter
from pathlib import Path

import nats

from ranksight.aggregator.alerts import AlertEngine, Condition
from ranksight.aggregator.component_settings import AlertSettings
from ranksight.aggregator.lead import LEAD_KEY, AlertBook, LeadFeed, drain_key
from ranksight.aggregator.runtime import Aggregator, ensure_stream
from ranksight.aggregator.state import NS, LiveState
from ranksight.aggregator.store import Store
from ranksight.aggregator.timefmt import iso
from ranksight.api.client import query
from ranksight.core.aio import cancel_all
from ranksight.core.kvlease import key_value
from ranksight.core.natsconn import connect
from ranksight.schemas.alerts import Alert, Matcher, Silence
from ranksight.schemas.codec import encode_event
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import GpuRecord
from ranksight.schemas.subjects import Subjects
from ranksight.schemas.wire import event_type
from ranksight.settings import Settings
from tests.shard_topology import ShardTopology
from tests.support import aggregator, wait_for

PARTITIONS = 4
LEASE_TTL_S = 3.0
NODES = [f"node{i}" for i in range(12)]
LATE = NODES[-1]  # turns faulty after the failover


def _sharded(settings: Settings) -> Settings:
    shards = settings.aggregator.shards.model_copy(update={"partitions": PARTITIONS})
    return settings.model_copy(
        update={"aggregator": settings.aggregator.model_copy(update={"shards": shards})}
    )


class Agents:
    """Simulated agents: every node reports GPU 0 each ``interval_s``; ``faulty`` nodes with uncorrectable ECC."""

    def __init__(self, settings: Settings, faulty: set[str]) -> None:
        self.settings, self.faulty = settings, faulty
        self.subjects = Subjects(settings.subject_prefix)
        self.incarnation = uuid.uuid4().hex[:16]
        self.seq: Counter[str] = Counter()
        self.stop = asyncio.Event()  # a flag, not a cancel: nats-py's waits can swallow one (Python 3.11)

    async def run(self, interval_s: float = 0.3) -> None:
        nc = await connect(self.settings.nats, "test-agents")
        js = nc.jetstream()
        try:
            while not self.stop.is_set():
                for node in NODES:
                    await self.publish(js, node)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stop.wait(), interval_s)
        finally:
            await nc.close()

    async def publish(self, js: nats.js.JetStreamContext, node: str) -> None:
        self.seq[node] += 1
        record = GpuRecord(index=0, name="sim", ecc_uncorrectable=3 if node in self.faulty else 0)
        env = Envelope(type=event_type("gpu"), cluster=self.settings.cluster, node=node,
                       agent=f"{self.incarnation}{node}", seq=self.seq[node], ts=time.time_ns(), ttl=5.0,
                       records=[record])  # fmt: skip
        with contextlib.suppress(nats.errors.Error):  # a publish lost in a test's teardown is harmless
            await js.publish(self.subjects.event(self.settings.cluster, node, "gpu"), encode_event(env),
                             headers={"Nats-Msg-Id": env.msg_id})  # fmt: skip


async def _observer(settings: Settings) -> tuple[nats.NATS, list[Alert]]:
    """A connection that made the stream (agents publish before any shard runs) and the alerts it receives."""
    nc = await connect(settings.nats, "test-observer")
    await ensure_stream(nc.jetstream(), settings)
    alerts: list[Alert] = []

    async def on_alert(msg: nats.aio.msg.Msg) -> None:
        alerts.append(Alert.model_validate_json(msg.data))

    await nc.subscribe(Subjects(settings.subject_prefix).alerts_filter(), cb=on_alert)
    return nc, alerts


async def _lead_holder(kv: nats.js.kv.KeyValue) -> str | None:
    try:
        entry = await kv.get(LEAD_KEY)
    except nats.js.errors.KeyNotFoundError:
        return None
    return (entry.value or b"").decode() or None


async def test_lead_failover_fires_each_alert_once(settings: Settings, tmp_path: Path) -> None:
    settings = _sharded(settings)
    subjects = Subjects(settings.subject_prefix)
    nc, transitions = await _observer(settings)
    js = nc.jetstream()
    faulty = set(NODES) - {LATE}
    agents = Agents(settings, faulty)
    publishing = asyncio.create_task(agents.run())
    topology = ShardTopology(settings, tmp_path / "shards", PARTITIONS, LEASE_TTL_S, env_extra={
        "RANKSIGHT_AGGREGATOR__TICK_S": "0.2",
        "RANKSIGHT_AGGREGATOR__REPLAY_WINDOW_S": "60",
        # fire and resolve at once: the failover, not the hold-down, is under test
        "RANKSIGHT_AGGREGATOR__ALERTS__RULES": json.dumps({"gpu_ecc_uncorrectable": {"for_s": 0, "clear_s": 0}}),
    })  # fmt: skip
    shards = {name: topology.start(name) for name in ("s0", "s1", "s2")}

    def fired(state: str, node: str) -> int:
        return sum(
            a.state == state and a.node == node and a.rule == "gpu_ecc_uncorrectable" for a in transitions
        )

    try:
        try:
            await wait_for(lambda: all(fired("firing", n) for n in faulty), timeout=90)
        except AssertionError:
            raise AssertionError(f"alerts did not fire: {transitions}\n{topology.logs()}") from None
        # the faulty nodes' events are stored in every partition: each ingested by the shard holding it, and the one
        # lead raised them all
        info = await js.stream_info(
            settings.aggregator.stream, subjects_filter=f"{settings.subject_prefix}.evp.>"
        )
        stored = info.state.subjects or {}
        partitions = {subj.split(".")[3] for subj in stored if subjects.parse_event(subj).node in faulty}
        assert partitions == {str(p) for p in range(PARTITIONS)}, partitions

        kv = await js.key_value(settings.aggregator.shards.bucket)
        lead = await _lead_holder(kv)
        assert lead in shards
        shards[lead].kill()
        killed_at = time.monotonic()

        async def new_lead() -> str | None:
            holder = await _lead_holder(kv)
            return holder if holder not in (None, lead) else None

        successor = await wait_for(new_lead, timeout=LEASE_TTL_S + 15, interval=0.1)
        took_over_s = time.monotonic() - killed_at
        assert took_over_s < LEASE_TTL_S + 10, took_over_s

        # the successor evaluates: a fault that begins now fires, once
        agents.faulty.add(LATE)
        try:
            await wait_for(lambda: fired("firing", LATE), timeout=30)
        except AssertionError:
            raise AssertionError(f"{successor} raised nothing: {transitions}\n{topology.logs()}") from None
        await asyncio.sleep(3 * LEASE_TTL_S)  # several of the successor's evaluations
        for node in NODES:
            assert (fired("firing", node), fired("resolved", node)) == (1, 0), (node, transitions)

        # a resolved fault resolves once
        agents.faulty.discard("node0")
        await wait_for(lambda: fired("resolved", "node0"), timeout=30)
        await asyncio.sleep(2)
        assert (fired("firing", "node0"), fired("resolved", "node0")) == (1, 1), transitions
    finally:
        agents.stop.set()
        await asyncio.wait_for(publishing, 30)
        topology.stop()
        await nc.close()


class Holds:
    """A rule that sees the conditions it is given."""

    for_s = clear_s = 0.0

    def __init__(self, name: str, *conds: Condition) -> None:
        self.name, self.conds = name, conds

    def evaluate(self, state: LiveState, now_ns: int) -> list[Condition]:
        return [c for c in self.conds if c.rule == self.name]


async def test_alert_book_carries_firing_clearing_and_pending_over(settings: Settings) -> None:
    """What a new lead loads is what the engine needs: the firing alert (not re-fired), since when an absent
    condition has been clearing (it resolves on time, not a clear time later) and a pending hold-down (it fires on
    time, not a hold-down later)."""
    timing = AlertSettings.model_validate({"rules": {"gpu_ecc_uncorrectable": {"for_s": 0, "clear_s": 60},
                                                     "gpu_throttled": {"for_s": 60, "clear_s": 0}}})  # fmt: skip
    ecc1 = Condition("gpu_ecc_uncorrectable", "critical", "test", "ecc", node="n1", key="0")
    ecc2 = Condition("gpu_ecc_uncorrectable", "critical", "test", "ecc", node="n2", key="0")
    slow = Condition("gpu_throttled", "warning", "test", "slow", node="n3", key="0")

    def rules(*conds: Condition) -> list[Holds]:
        return [Holds("gpu_ecc_uncorrectable", *conds), Holds("gpu_throttled", *conds)]

    nc = await connect(settings.nats, "test-alert-book")
    try:
        t0 = time.time_ns()
        engine = AlertEngine(settings=timing)
        book = AlertBook(nc.jetstream(), "test_alerts", 1024 * 1024, 1)
        assert len(engine.evaluate(rules(ecc1, ecc2, slow), LiveState(), t0)) == 2  # ecc1, ecc2 fire
        assert await book.save(engine, t0) == 3  # 2 firing, 1 pending
        assert engine.evaluate(rules(ecc1, slow), LiveState(), t0 + NS) == []  # ecc2 clearing, slow pending
        assert await book.save(engine, t0 + NS) == 1  # only ecc2 changed (clearing since t0)
        assert await book.save(engine, t0 + NS) == 0  # nothing changed: nothing written

        successor = AlertEngine(settings=timing)
        await AlertBook(nc.jetstream(), "test_alerts", 1024 * 1024, 1).load(successor)
        assert successor.active.keys() == {ecc1.fingerprint, ecc2.fingerprint}
        changes = successor.evaluate(rules(ecc1, slow), LiveState(), t0 + 61 * NS)
        assert sorted((a.node, a.state) for a in changes) == [("n2", "resolved"), ("n3", "firing")]
    finally:
        await nc.close()


async def test_a_snapshot_holds_every_key_the_bucket_holds(settings: Settings) -> None:
    """What a new lead loads and the silences it purges come from a snapshot of the bucket: it holds every key under
    the prefixes asked for, each with its value now, and none deleted or purged; however soon it follows the writes."""
    nc = await connect(settings.nats, "test-alert-book")
    try:
        book = AlertBook(nc.jetstream(), "test_snapshot", 1024 * 1024, 1)
        kv = await book.kv()
        for round_ in range(40):
            for i in range(10):
                await kv.put(f"firing.fp{round_}x{i}", f"{round_}".encode())
            await kv.put(f"pending.fp{round_}", b"p")
            await kv.delete(f"firing.fp{round_}x0")
            await kv.purge(f"firing.fp{round_}x1")
            await kv.put(f"silence.s{round_}", b"s")
            snap = await book.snapshot("firing.", "pending.")
            want = {f"firing.fp{r}x{i}" for r in range(round_ + 1) for i in range(2, 10)}
            assert snap.keys() == want | {f"pending.fp{r}" for r in range(round_ + 1)}, round_
            assert snap[f"firing.fp{round_}x9"] == f"{round_}".encode()
    finally:
        await nc.close()


async def test_a_lead_whose_renewal_is_refused_raises_nothing_more(
    settings: Settings, tmp_path: Path
) -> None:
    """Another shard holds the lead now (this one's renewal is refused, as after a NATS partition): from that round
    on this aggregator evaluates no rule, so a fault that begins then raises nothing here."""
    settings = _sharded(settings)
    shards = settings.aggregator.shards.model_copy(update={"lease_ttl_s": 1.5, "shard_id": "s0"})
    settings = settings.model_copy(
        update={"aggregator": settings.aggregator.model_copy(update={"shards": shards})}
    )
    nc, fired = await _observer(settings)
    js = nc.jetstream()
    agents = Agents(settings, {"node0"})
    publishing = asyncio.create_task(agents.run(interval_s=0.2))
    try:
        async with aggregator(settings) as agg:
            await wait_for(lambda: agg.lead is not None and agg.lead.ready(), timeout=20)
            await wait_for(lambda: any(a.node == "node0" for a in fired), timeout=20)  # it leads, and raises
            assert (await query(settings, "stragglers")).meta["analysis_lead"] is True
            # its consumer lost (as with the NATS server that held it): a new one goes on after the last message read
            assert agg.lead.feed is not None
            await js.delete_consumer(settings.aggregator.stream, agg.lead.feed.name)
            await wait_for(lambda: agg.lead.feed.recreated == 1, timeout=10)
            agents.faulty.add("node2")
            await wait_for(lambda: any(a.node == "node2" for a in fired), timeout=10)
            kv = await js.key_value(settings.aggregator.shards.bucket)

            async def s1_holds_the_lead() -> None:
                revision = await kv.put(LEAD_KEY, b"s1")
                while True:
                    await asyncio.sleep(0.3)
                    revision = await kv.update(LEAD_KEY, b"s1", last=revision)

            s1 = asyncio.create_task(s1_holds_the_lead())
            await wait_for(lambda: not agg.lead.leading, timeout=2 * 1.5)
            assert not agg.engine.active  # the alerts are the next lead's
            # cluster-wide analysis is answered by the lead alone (a query front unions the shards' answers)
            assert (await query(settings, "stragglers")).meta["analysis_lead"] is False
            agents.faulty.add("node1")
            await asyncio.sleep(2.0)
            assert not s1.done()
            s1.cancel()
            assert [a.node for a in fired] == ["node0", "node2"]
    finally:
        agents.stop.set()
        await asyncio.wait_for(publishing, 30)
        await nc.close()


async def test_silences_and_drains_reach_every_shard(settings: Settings) -> None:
    """A drain or silence any shard's API receives goes to the KV bucket; every shard's engine, and its store (its
    ``drains`` and ``silences`` answers), applies those of the others."""
    settings = _sharded(settings)
    async with aggregator(settings) as agg:
        assert agg.lead is not None
        await query(settings, "drain", {"nodes": ["here"], "reason": "api"})
        kv = await agg.lead.book.kv()
        assert (await kv.get(drain_key(settings.cluster, "here"))).value
        other = AlertBook(agg.lead.js, settings.aggregator.shards.alerts_bucket, 1024 * 1024, 1)
        await other.put_drains(settings.cluster, ["node.with dots"], True, "another shard")
        now = time.time_ns()
        silence = Silence(id=str(uuid.uuid4()), matchers=[Matcher.parse("node=x")], starts_at=iso(now) or "",
                          ends_at=iso(now + 60 * NS) or "")  # fmt: skip
        await other.put_silence(silence)
        await wait_for(lambda: (settings.cluster, "node.with dots") in agg.engine.drained)
        await wait_for(lambda: silence.id in agg.engine.silences)
        drains = await query(settings, "drains")
        assert {r["node"] for r in drains.rows} == {"here", "node.with dots"}
        await other.put_drains(settings.cluster, ["node.with dots"], False, "")
        await wait_for(lambda: (settings.cluster, "node.with dots") not in agg.engine.drained)
        assert {r["node"] for r in (await query(settings, "drains")).rows} == {"here"}
        # the lead keeps the bucket to what is in force: ended silences go
        ended = silence.model_copy(update={"id": str(uuid.uuid4()), "ends_at": iso(now - NS) or ""})
        await other.put_silence(ended)
        assert await agg.lead.book.purge_ended_silences(time.time_ns()) == 1
        assert set(await agg.lead.book.snapshot("silence.")) == {f"silence.{silence.id}"}


async def test_a_shard_that_led_before_announces_nothing_from_its_history(settings: Settings) -> None:
    """A shard restarted while another leads: the alerts its DuckDB says it raised when it led are not its own to
    re-send (Alertmanager) or show as firing; the lead's bucket has the firing set."""
    settings = _sharded(settings)
    old = Alert(rule="gpu_ecc_uncorrectable", severity="critical", fingerprint="0123456789abcdef", state="firing",
                cluster=settings.cluster, node="node0", summary="ecc", started_at=iso(time.time_ns()) or "",
                updated_at=iso(time.time_ns()) or "")  # fmt: skip
    store = Store(settings.db_path())
    store.open()
    store.write_alerts([old])
    store.close_connection()
    store.shutdown()
    nc = await connect(settings.nats, "test-other-lead")
    kv = await key_value(nc.jetstream(), settings.aggregator.shards.bucket, ttl=15.0)
    await kv.put(LEAD_KEY, b"s1")  # s1 leads (for the lease time: longer than this test)
    try:
        async with aggregator(settings) as agg:
            assert agg.lead is not None and not agg.lead.leading
            assert not agg.engine.active
    finally:
        await nc.close()


async def test_the_feed_is_caught_up_once_it_read_what_the_stream_held(settings: Settings) -> None:
    """The lead evaluates only once its state holds every message the stream had when it began to lead: a rule run on
    half a replay would resolve the alerts of the nodes not read yet, and fire them again a batch later."""
    settings = _sharded(settings).model_copy(update={"aggregator": _sharded(settings).aggregator.model_copy(
        update={"fetch_batch": 10})})  # fmt: skip
    nc, _ = await _observer(settings)
    agents = Agents(settings, set())
    try:
        js = nc.jetstream()
        for _ in range(20):
            for node in NODES:
                await agents.publish(js, node)
        agg = Aggregator(settings)
        agg.nc = nc
        feed = LeadFeed(agg, js, agg.new_state(), "s0")
        reading = asyncio.create_task(feed.run())
        try:
            await asyncio.wait_for(feed.caught_up.wait(), 20)
            assert feed.messages >= 20 * len(NODES)
        finally:
            await cancel_all([reading])
            feed.state.stragglers.close()
            agg.state.stragglers.close()
    finally:
        await nc.close()
