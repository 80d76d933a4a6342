"""Nothing lost, nothing doubled: aggregator SIGKILLed mid-stream, NATS restarted while agents publish."""

from __future__ import annotations

import asyncio
import signal
import subprocess

import duckdb
import nats

from ranksight.aggregator.runtime import ensure_stream
from ranksight.api.client import ApiUnavailable, query
from ranksight.core.natsserver import NatsServer
from ranksight.settings import Settings
from tests.loadgen import SyntheticAgent
from tests.support import aggregator, consumer_drained, gpu_rows, ranksight_cmd, settings_env, wait_for


async def _ingested(settings: Settings) -> int:
    try:
        response = await query(settings, "status", timeout=2)
    except ApiUnavailable:
        return 0
    return int(response.meta["sequence"]["messages"]) if response.ok else 0


async def test_sigkill_aggregator_mid_stream_exactly_once(settings: Settings) -> None:
    env = settings_env(settings)
    nc = await nats.connect(settings.nats.url)
    await ensure_stream(nc.jetstream(), settings)  # agents may publish before the aggregator runs
    await nc.close()
    chunk = 500
    agents = [await SyntheticAgent(settings, f"sim-{i}", records_per_batch=chunk).start() for i in range(3)]
    killed = asyncio.Event()
    rounds_after_kill = 20  # the stream goes on after the kill, so the kill always lands mid-stream
    emitted = 0  # per agent

    async def produce() -> None:
        nonlocal emitted
        left, rounds = rounds_after_kill, 0
        while left > 0 and rounds < 2000:  # bounded, should the aggregator never start
            rounds += 1
            for a in agents:
                await a.emit(chunk)
            emitted += chunk
            if killed.is_set():
                left -= 1
            await asyncio.sleep(0.01)

    producer = asyncio.create_task(produce())
    log_path = settings.state_dir / "aggregator.log"  # the children's stderr, for a failure's report
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = log_path.open("ab")
    proc = subprocess.Popen(ranksight_cmd("aggregator"), env=env, stderr=log)
    try:
        await wait_for(lambda: _ingested(settings), timeout=60, interval=0.05)  # it is committing now
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        killed.set()
        committed_before_kill, _ = gpu_rows(settings)
        await producer
        for a in agents:
            assert await a.flush(60), "agent could not deliver its events"
        assert 0 < committed_before_kill < 3 * emitted, "the kill must land mid-stream"
        proc = subprocess.Popen(ranksight_cmd("aggregator"), env=env, stderr=log)
        await wait_for(lambda: consumer_drained(settings), timeout=60, interval=0.3)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)  # faulthandler: every thread's stack into the log
            await asyncio.sleep(1)
            proc.kill()
            raise AssertionError(f"aggregator did not stop: {log_path.read_text()}") from None
        for a in agents:
            await a.close()
    assert gpu_rows(settings) == (3 * emitted, 3 * emitted)
    con = duckdb.connect(str(settings.db_path()), read_only=True)
    (gaps,) = con.execute("SELECT coalesce(sum(gaps_open), 0) FROM agent_seq").fetchone()
    assert gaps == 0


async def test_nats_restart_while_publishing_loses_nothing(
    settings: Settings, nats_server: NatsServer
) -> None:
    async with aggregator(settings):
        sim = await SyntheticAgent(settings, "sim-r", records_per_batch=100).start()
        try:
            for _ in range(20):
                await sim.emit(100)
                await asyncio.sleep(0.01)
            port, store = nats_server.port, nats_server.store_dir
            nats_server.stop()
            for _ in range(20):  # accepted while the server is down
                await sim.emit(100)
                await asyncio.sleep(0.01)
            await asyncio.sleep(1.0)
            restarted = NatsServer(store, port=port).start()
            try:
                for _ in range(20):
                    await sim.emit(100)
                assert await sim.flush(60), "publisher did not recover after the restart"
                await wait_for(lambda: consumer_drained(settings), timeout=60, interval=0.3)
            finally:
                await sim.close()
        finally:
            pass
    restarted.stop()
    assert gpu_rows(settings) == (6000, 6000)
