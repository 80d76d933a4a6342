"""Chaos: kill -9 of the aggregator and of nats-server mid-stream (with poison in the stream), restart during replay.

Good records are stored exactly once; each poison pill is dead-lettered with its reason (at least once: a dead letter
committed just before a kill is committed again when its message is redelivered, like any unacknowledged message).
"""

from __future__ import annotations

import asyncio

import duckdb
import pytest

from ranksight.aggregator.store import Store
from ranksight.core.natsserver import NatsServer
from ranksight.schemas.subjects import Subjects
from ranksight.settings import Settings
from tests.chaos.support import RSS_BOUND, AggregatorProcess, db_rows, good_once, poison_pills, publish_raw
from tests.loadgen import SyntheticAgent
from tests.support import consumer_drained, wait_for

pytestmark = pytest.mark.chaos


async def test_kill9_aggregator_mid_stream_with_poison(settings: Settings) -> None:
    subjects = Subjects(settings.subject_prefix)
    pills = poison_pills("evil")
    await publish_raw(settings, [])
    agents = [await SyntheticAgent(settings, f"sim-{i}", records_per_batch=200).start() for i in range(2)]

    async def produce() -> None:
        for round_ in range(40):
            for a in agents:
                await a.emit(200)
            if round_ % 10 == 0:
                await publish_raw(settings, [(subjects.event("test", "evil", k), d) for k, d, _ in pills])
            await asyncio.sleep(0.02)

    agg = AggregatorProcess(settings).start()
    producer = asyncio.create_task(produce())
    try:
        await wait_for(lambda: agg.status(), timeout=60, interval=0.05)
        await wait_for(lambda: _committed(agg), timeout=60, interval=0.02)  # it is committing now
        agg.kill9()
        await producer
        for a in agents:
            assert await a.flush(60)
        agg.start()
        await wait_for(lambda: consumer_drained(settings), timeout=90, interval=0.3)
        assert agg.alive(), agg.log()
        assert agg.peak_rss() < RSS_BOUND
    finally:
        producer.cancel()
        for a in agents:
            await a.close()
        agg.stop()
    for i in range(2):
        assert good_once(settings, f"sim-{i}") == (8000, 8000)
    stored = {bytes(p): r for p, r in db_rows(settings, "SELECT payload, reason FROM dead_letters")}
    assert {data[:4096]: reason for _, data, reason in pills} == stored


async def _committed(agg: AggregatorProcess) -> bool:
    status = await agg.status()
    return bool(status and status["sequence"]["messages"] > 0)


async def test_kill9_nats_server_mid_stream(settings: Settings, nats_server: NatsServer) -> None:
    await publish_raw(settings, [])
    agg = AggregatorProcess(settings).start()
    sim = await SyntheticAgent(settings, "sim", records_per_batch=100).start()
    restarted: NatsServer | None = None
    try:
        await agg.wait_ready()
        for _ in range(20):
            await sim.emit(100)
            await asyncio.sleep(0.01)
        assert nats_server.process is not None
        nats_server.process.kill()  # kill -9: no shutdown of the store, connections cut
        nats_server.process.wait(10)
        for _ in range(20):  # accepted by the agent while the server is gone
            await sim.emit(100)
            await asyncio.sleep(0.01)
        await asyncio.sleep(1.0)
        restarted = NatsServer(nats_server.store_dir, port=nats_server.port).start()
        for _ in range(20):
            await sim.emit(100)
        assert await sim.flush(60), "publisher did not recover after the restart"
        await wait_for(lambda: consumer_drained(settings), timeout=60, interval=0.3)
        assert agg.alive(), agg.log()  # the aggregator rode it out: it never exited
        assert agg.peak_rss() < RSS_BOUND
    finally:
        await sim.close()
        agg.stop()
        if restarted is not None:
            restarted.stop()
    assert good_once(settings, "sim") == (6000, 6000)


def _history_with_bad_rows(settings: Settings, rows: int) -> None:
    """History as an older version could leave it: many rows to replay, some that live state cannot use."""
    store = Store(settings.db_path())
    store.open()
    try:
        store.con.execute(
            'INSERT INTO gpu (cluster, node, agent, seq, ts, recv_ts, ttl, "index", memory_used_bytes, '
            "throttle_reasons, links) SELECT 'test', 'old-' || (i % 50), 'inc-' || (i % 50), i // 50 + 1, now(), "
            "now(), 10.0, i % 8, i, '[]', '[]' FROM range(?) t(i)",
            [rows],
        )
        for seq, ts, ttl in [(1, "'infinity'", 10.0), (2, "now()", float("inf")), (3, "now()", float("nan"))]:
            store.con.execute(
                "INSERT INTO heartbeat (cluster, node, agent, seq, ts, recv_ts, ttl, hostname, version, pid, "
                f"started_ns) VALUES ('test', 'broken', 'broken-inc', {seq}, {ts}, now(), ?, 'h', '1', 1, 1)",
                [ttl],
            )
    finally:
        store.close_connection()
        store.shutdown()


async def test_restart_during_replay(settings: Settings) -> None:
    _history_with_bad_rows(settings, 150_000)
    await publish_raw(settings, [])
    agg = AggregatorProcess(settings).start()
    sim = await SyntheticAgent(settings, "fresh", records_per_batch=100).start()
    try:
        await sim.emit(500)  # waits in the stream while the aggregator replays
        assert await sim.flush(30)
        await wait_for(lambda: "replaying the last" in agg.log(), timeout=60, interval=0.02)
        # Replaying 150k rows takes seconds: the kill lands during replay.
        assert "rebuilt live state" not in agg.log(), "the kill must land before replay ends"
        agg.kill9()
        agg.start()
        status = await agg.wait_ready(timeout=120)
        assert status["sequence"]["replay_skipped"] == 3
        await sim.emit(500)
        assert await sim.flush(30)
        await wait_for(lambda: consumer_drained(settings), timeout=60, interval=0.3)
        assert agg.alive(), agg.log()
        assert agg.peak_rss() < RSS_BOUND  # replay of 150k rows included
    finally:
        await sim.close()
        agg.stop()
    assert good_once(settings, "fresh") == (1000, 1000)
    with duckdb.connect(str(settings.db_path()), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM heartbeat WHERE node = 'broken'").fetchone() == (3,)  # kept
