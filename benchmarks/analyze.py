"""Offline straggler analysis throughput on a simulated 64-node x 8-GPU job, against a plain DuckDB GROUP BY.

Both sides start from the same dump files: ours reads, parses, validates and analyzes them (``ranksight analyze
inspector``'s path); the baseline lets DuckDB read the same JSON lines and compute per-operation median and minimum
exec time with one ``GROUP BY (id, coll, coll_sn)`` - the first step of any analysis, with no straggler logic at all.

    python benchmarks/analyze.py [--nodes 64] [--gpus 8] [--steps 40] [--capture ring|sampled]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import duckdb

from ranksight.agent.collectors.inspector.dumps import DumpReader
from ranksight.aggregator.models.straggler.engine import analyze_records
from ranksight.aggregator.models.straggler.findings import StragglerParams
from ranksight.simulate.inspector import Fault, JobSpec, write_job

BASELINE_SQL = """
SELECT header.id AS comm, coll_perf.coll AS coll, coll_perf.coll_sn AS sn,
       median(coll_perf.coll_exec_time_us) AS med, min(coll_perf.coll_exec_time_us) AS lo, count(*) AS n
FROM read_json(?, format = 'newline_delimited', columns = {
    header: 'STRUCT(id VARCHAR, rank BIGINT, n_ranks BIGINT)',
    metadata: 'STRUCT(hostname VARCHAR, pid BIGINT, dump_timestamp_us BIGINT)',
    coll_perf: 'STRUCT(coll VARCHAR, coll_sn BIGINT, coll_exec_time_us DOUBLE)'})
GROUP BY ALL
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--capture", choices=["ring", "sampled"], default="ring")
    args = ap.parse_args()
    spec = JobSpec(nodes=args.nodes, gpus_per_node=args.gpus, pp=4, steps=args.steps, capture=args.capture,
                   faults=[Fault("gpu", node=7, gpu=3, factor=1.5)])  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        started = time.perf_counter()
        write_job(spec, directory)
        print(f"simulated {args.nodes} nodes x {args.gpus} GPUs, {args.steps} steps in "
              f"{time.perf_counter() - started:.1f}s ({args.capture} model)")  # fmt: skip

        started = time.perf_counter()
        reader = DumpReader(directory)
        result = analyze_records(reader.records(), StragglerParams(window_s=1.0))
        ours_s = time.perf_counter() - started

        con = duckdb.connect()
        started = time.perf_counter()
        groups = con.execute(BASELINE_SQL, [str(directory / "*.log")]).fetchall()
        base_s = time.perf_counter() - started

    ours = result.records / ours_s
    base = result.records / base_s
    print(f"records: {result.records}, operations: {result.operations}, baseline groups: {len(groups)}")
    print(f"findings: {[(f.hostname, f.pid, f.kind, round(f.slowdown, 2)) for f in result.stragglers]}")
    print(f"ranksight analyze:  {ours:12,.0f} records/s ({ours_s:.2f}s, read+parse+analyze)")
    print(f"duckdb GROUP BY:    {base:12,.0f} records/s ({base_s:.2f}s, read+group only)")
    print(f"ratio (ours / baseline): {ours / base:.3f}")


if __name__ == "__main__":
    main()
