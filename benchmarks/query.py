"""Query API latency: p50/p95 of ``status`` and of a per-rank straggler query over N stored Inspector records.

Runs a real nats-server and a real aggregator on a temporary DuckDB file holding ``--rows`` (default 10 million)
Inspector rows generated with DuckDB SQL. The baseline, measured in the same run, is the same per-rank SQL on a plain
DuckDB cursor (no NATS, no sandbox) with the aggregator's DuckDB threads (``aggregator.query.sql_threads``, which
``RANKSIGHT_AGGREGATOR__QUERY__SQL_THREADS`` sets for both): the ratio is what the API adds.

    .venv/bin/python benchmarks/query.py [--rows 10000000] [--n 30]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ranksight.aggregator.runtime import Aggregator
from ranksight.aggregator.store import Store
from ranksight.api.client import query
from ranksight.core.natsserver import NatsServer
from ranksight.settings import load_settings

RANKS, NODES, COMMS = 512, 64, 16

GENERATE = f"""
INSERT INTO inspector BY NAME
SELECT 'bench' AS cluster, 'node-' || (i % {NODES}) AS node, 'agent-' || (i % {NODES}) AS agent, i // 1000 AS seq,
       TIMESTAMP '2025-01-01' + to_microseconds(i * 100) AS ts, TIMESTAMP '2025-01-01' + to_microseconds(i * 100) AS recv_ts,
       3.0 AS ttl, 'comm-' || (i // {RANKS} % {COMMS}) AS comm_id, (i % {RANKS}) AS rank, {RANKS} AS n_ranks,
       {NODES} AS nnodes, 'node-' || (i % {NODES}) AS hostname, 1000 + i % {RANKS} AS pid, 'coll' AS op_kind,
       'AllReduce' AS op, i // ({RANKS} * {COMMS}) AS sn, 1048576 AS msg_size_bytes,
       CASE WHEN i % {RANKS} = 17 THEN 60.0 ELSE 100.0 + random() * 10 END AS exec_time_us, 'kernel' AS timing_source,
       10.0 AS algobw_gbs, 18.0 AS busbw_gbs, i AS dump_ts_us
FROM range(?) t(i)
"""

PER_RANK = (
    "SELECT rank, count(*) AS ops, median(exec_time_us) AS median_us, quantile_cont(exec_time_us, 0.95) AS p95_us "
    "FROM inspector WHERE comm_id = 'comm-3' AND ts >= TIMESTAMP '2025-01-01' GROUP BY rank ORDER BY median_us LIMIT 10"
)


def percentiles(samples: list[float]) -> tuple[float, float]:
    qs = statistics.quantiles(samples, n=100, method="inclusive")
    return qs[49], qs[94]


async def timed(n: int, fn: Callable[[], Awaitable[Any]]) -> list[float]:
    out = []
    for _ in range(n):
        started = time.perf_counter()
        await fn()
        out.append((time.perf_counter() - started) * 1000)
    return out


async def bench(rows: int, n: int, root: Path) -> None:
    db = root / "bench.duckdb"
    threads = load_settings(None).aggregator.query.sql_threads
    store = Store(db)
    store.open()
    store.con.execute(f"SET threads = {threads}")  # the baseline runs with the aggregator's threads
    started = time.perf_counter()
    store.con.execute(GENERATE, [rows])
    store.con.execute("CHECKPOINT")
    print(f"generated {rows:,} inspector rows in {time.perf_counter() - started:.1f}s")
    cursor = store.reader()

    async def direct() -> None:
        await asyncio.to_thread(lambda: cursor.execute(PER_RANK).fetchall())

    baseline = await timed(n, direct)
    store.close_connection()
    store.shutdown()

    server = NatsServer(root / "nats").start()
    try:
        settings = load_settings(None, cluster="bench", state_dir=root, nats={"url": server.url},
                                 aggregator={"db_path": db, "retention_days": 36500,  # keep the 2025 rows
                                             "query": {"sql_time_limit_s": 60}})  # fmt: skip
        agg = Aggregator(settings)
        stop = asyncio.Event()
        task = asyncio.create_task(agg.run(stop))
        await agg.ready.wait()
        try:
            status = await timed(n, lambda: query(settings, "status"))

            async def per_rank() -> None:
                response = await query(settings, "sql", {"sql": PER_RANK}, timeout=70)
                assert response.ok and response.rows[0]["rank"] == 17, response.error

            api = await timed(n, per_rank)
        finally:
            stop.set()
            await task
    finally:
        server.stop()

    print(f"DuckDB threads (aggregator.query.sql_threads), API and baseline alike: {threads}")
    print(f"{'query':<40}{'p50 ms':>10}{'p95 ms':>10}")
    for name, samples in (("status (NATS API)", status), ("per-rank stats, sql endpoint (NATS API)", api),
                          ("per-rank stats, direct DuckDB (baseline)", baseline)):  # fmt: skip
        p50, p95 = percentiles(samples)
        print(f"{name:<40}{p50:>10.2f}{p95:>10.2f}")
    print(f"API / baseline, p50: {percentiles(api)[0] / percentiles(baseline)[0]:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--n", type=int, default=30, help="requests per query")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(bench(args.rows, args.n, Path(tmp)))


if __name__ == "__main__":
    main()
