"""Ingest benchmark: simulated agents -> real nats-server (JetStream) -> aggregator -> DuckDB.

Prints end-to-end events/s of the real aggregator and, measured in the same run on the same server, the ceiling of a bare
pipeline (a plain subscriber that msgpack-decodes the same batches and inserts them into DuckDB as Arrow, with no
validation, de-duplication, acks or state), and the ratio. Target: >= 100k events/s end to end on 2 cores, ratio >= 0.5.

Publishers run in a child process (as agents would on other nodes), publishing pre-encoded envelopes through the agent's
own Publisher, so the measured process is the aggregator (or the baseline subscriber) alone.

Each round runs on a fresh server and state directory, the aggregator first (it reads the whole stream), then the
baseline; the figures are medians over the rounds (the pair of one round shares its conditions, so the ratio is the
median of per-round ratios).

    python benchmarks/ingest.py [--agents 8] [--batches 25] [--records 1000] [--rounds 3] [--fetch-batch 200]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import msgpack
import nats
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ranksight.agent.publisher import Outgoing, Publisher
from ranksight.aggregator.runtime import Aggregator, ensure_stream
from ranksight.core.natsserver import NatsServer
from ranksight.schemas.codec import encode_event
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import GpuRecord
from ranksight.schemas.subjects import Subjects
from ranksight.schemas.wire import event_type
from ranksight.settings import Settings, load_settings


def _payloads(cluster: str, agents: int, batches: int, records: int) -> list[tuple[str, str, bytes]]:
    subjects = Subjects()
    out = []
    for a in range(agents):
        node, incarnation = f"sim-{a:03d}", f"{cluster}-agent-{a}"
        for b in range(batches):
            recs = [GpuRecord(index=i % 8, name="MI300X", utilization_pct=97.0, power_w=712.5,
                              memory_used_bytes=150_000_000_000, temperature_junction_c=81.0, sclk_hz=2.1e9)
                    for i in range(records)]  # fmt: skip
            env = Envelope(type=event_type("gpu"), cluster=cluster, node=node, agent=incarnation,
                                           seq=b + 1, ts=time.time_ns(), ttl=15.0, records=recs)  # fmt: skip
            payload = encode_event(env, "map")  # the bare baseline reads maps
            out.append((subjects.event(cluster, node, "gpu"), f"{incarnation}:{b + 1}", payload))
    return out


def _publisher_process(url: str, cluster: str, agents: int, batches: int, records: int, go: mp.Event) -> None:
    payloads = _payloads(cluster, agents, batches, records)

    async def main() -> None:
        nc = await nats.connect(url)
        publisher = Publisher(
            nc.jetstream(publish_async_max_pending=4096), max_queue=100_000, max_inflight=1024
        )
        task = asyncio.create_task(publisher.run())
        go.wait()
        for subject, msg_id, payload in payloads:
            await publisher.submit(Outgoing(subject, payload, msg_id, durable=True))
        if not await publisher.flush(120):
            raise SystemExit(f"publisher could not deliver: {publisher.stats}")
        task.cancel()
        await nc.close()

    asyncio.run(main())


def _start_publisher(url: str, cluster: str, args: argparse.Namespace) -> tuple[mp.Process, mp.Event]:
    go = mp.get_context("spawn").Event()
    proc = mp.get_context("spawn").Process(
        target=_publisher_process, args=(url, cluster, args.agents, args.batches, args.records, go)
    )
    proc.start()
    return proc, go


async def run_aggregator(settings: Settings, args: argparse.Namespace, total: int) -> float:
    agg = Aggregator(settings, rules=[])
    stop = asyncio.Event()
    task = asyncio.create_task(agg.run(stop))
    await agg.ready.wait()
    proc, go = _start_publisher(settings.nats.url, "e2e", args)
    await asyncio.sleep(3)  # let the child pre-encode its payloads before the clock starts
    started = time.perf_counter()
    go.set()
    while agg.stats.records < total:  # noqa: ASYNC110 - polling a counter is the measurement
        await asyncio.sleep(0.01)
    elapsed = time.perf_counter() - started
    stop.set()
    await task
    proc.join()
    return elapsed


def _insert(con: duckdb.DuckDBPyConnection, table: pa.Table) -> None:
    con.register("batch", table)
    con.execute("INSERT INTO gpu_bare BY NAME SELECT * FROM batch")
    con.unregister("batch")


async def run_baseline(url: str, db: Path, args: argparse.Namespace, total: int) -> float:
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE gpu_bare (cluster VARCHAR, node VARCHAR, agent VARCHAR, seq BIGINT, \"index\" BIGINT, "
                "name VARCHAR, utilization_pct DOUBLE, power_w DOUBLE, memory_used_bytes BIGINT, "
                "temperature_junction_c DOUBLE, sclk_hz DOUBLE)")  # fmt: skip
    nc = await nats.connect(url)
    sub = await nc.subscribe(Subjects().events_filter("bare"), pending_msgs_limit=1_000_000,
                             pending_bytes_limit=2**31)  # fmt: skip
    proc, go = _start_publisher(url, "bare", args)
    await asyncio.sleep(3)
    started = time.perf_counter()
    go.set()
    done = 0
    fields = (
        "index",
        "name",
        "utilization_pct",
        "power_w",
        "memory_used_bytes",
        "temperature_junction_c",
        "sclk_hz",
    )
    while done < total:
        msgs = [await sub.next_msg(timeout=30)]
        while len(msgs) < 200 and sub.pending_msgs:
            msgs.append(await sub.next_msg())
        cols: dict[str, list] = {k: [] for k in ("cluster", "node", "agent", "seq", *fields)}  # type: ignore[type-arg]
        for m in msgs:
            env = msgpack.unpackb(m.data)
            n = len(env["records"])
            for k in ("cluster", "node", "agent", "seq"):
                cols[k].extend([env[k]] * n)
            for f in fields:
                cols[f].extend(r.get(f) for r in env["records"])
            done += n
        await asyncio.to_thread(_insert, con, pa.table(cols))
    elapsed = time.perf_counter() - started
    await nc.close()
    proc.join()
    con.close()
    return elapsed


async def one_round(tmp: Path, args: argparse.Namespace, total: int) -> tuple[float, float]:
    """(end-to-end events/s, bare events/s), both on one fresh server."""
    with NatsServer(tmp / "nats") as server:
        settings = load_settings(None, state_dir=tmp / "state", nats={"url": server.url},
                                 aggregator={"fetch_batch": args.fetch_batch})  # fmt: skip
        nc = await nats.connect(server.url)
        await ensure_stream(nc.jetstream(), settings)
        await nc.close()
        # The aggregator first: it reads the whole stream, and the baseline's events must not count for it.
        e2e_s = await run_aggregator(settings, args, total)
        baseline_s = await run_baseline(server.url, tmp / "bare.duckdb", args, total)
    return total / e2e_s, total / baseline_s


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--batches", type=int, default=25)
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3, help="rounds on fresh servers; medians are reported")
    parser.add_argument("--fetch-batch", type=int, default=200,
                        help="the aggregator's fetch_batch (messages per commit at most); 200 bounds a commit of "
                             "1000-record envelopes to 200k rows")  # fmt: skip
    args = parser.parse_args()
    total = args.agents * args.batches * args.records
    tmp = Path(tempfile.mkdtemp(prefix="rs-bench-"))
    print(
        f"events: {total} per round ({args.agents} agents x {args.batches} batches x {args.records} records)"
    )
    e2e, bare, ratios = [], [], []
    for n in range(1, args.rounds + 1):
        e2e_rate, bare_rate = await one_round(tmp / f"round-{n}", args, total)
        e2e.append(e2e_rate)
        bare.append(bare_rate)
        ratios.append(e2e_rate / bare_rate)
        print(f"round {n}: bare {bare_rate:,.0f} events/s, end to end {e2e_rate:,.0f} events/s, "
              f"ratio {e2e_rate / bare_rate:.2f}")  # fmt: skip
    print(f"bare pipeline (decode + Arrow insert), median: {statistics.median(bare):,.0f} events/s")
    print(
        f"ranksight end to end (validate, dedupe, commit, ack, state), median: {statistics.median(e2e):,.0f} events/s"
    )
    print(f"ratio end-to-end / bare, median of rounds: {statistics.median(ratios):.2f}   "
          "(targets: >= 100,000 events/s, ratio >= 0.5)")  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
