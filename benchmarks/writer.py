"""Writer benchmark: the CPU the aggregator's DuckDB writer spends on N nodes' traffic, by commit size and by kind.

The messages are ``scale.py``'s (the agent's own summarizer and raw sampler on the job simulator's blocks, the GPU,
NIC and heartbeat templates at their intervals, each node's gauges in their own phase), ``--seconds`` of them for
``--nodes`` nodes, put in arrival order; a real :class:`~aggregator.store.Store` on a fresh DuckDB file commits them
in batches of each ``--batches`` size in turn (a fresh file each), on this thread, as ingest's writer thread does. It
prints per size the writer's CPU (``RUSAGE_THREAD``: decoding, Arrow, DuckDB's insert and commit) per second of
traffic, i.e. the cores it needs, per message, and the ratio to the first size; then each kind's decoding alone. The
cyclic GC runs as in the aggregator (:class:`aggregator.runtime.IngestGc`: collections between commits).

The default sizes: 85 messages a commit is what the aggregator committed at 256 nodes taking each fetch as it came
(about 7 commits a second of 745 messages), 372 half a second of them (``ingest.commit_every_s``), 745 a second.

``--memory`` measures instead what committing costs in memory, in fresh processes (the allocator's settings are read
when DuckDB loads): the RSS the process grows by over the commits of the first size, its peak and its mean over the
second half, with DuckDB's jemalloc as the aggregator sets it (freed pages returned after 50 ms: ``aggregator``'s
``ALLOCATOR_CONF``) against jemalloc's own defaults (freed pages kept about 10 s), and the writer's CPU of each.

    python benchmarks/writer.py [--nodes 256] [--seconds 10] [--batches 85,372,745] [--kind inspector_summary]
                                [--memory]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import scale
from ranksight.aggregator.runtime import IngestGc

US = 1_000_000
INGEST_GC = IngestGc()


def traffic(nodes: int, seconds: float) -> list[tuple[int, str, str, bytes]]:
    """(due µs, kind, subject, payload) of every message ``nodes`` nodes send in ``seconds``, in arrival order."""
    base_us, templates, _ = scale.build_templates(seconds + 10, seconds)
    start_us = int(time.time() * US) - int((seconds + 10) * US)  # ts within the admission bounds
    gauges = scale.gauge_templates("ethtool")
    out = []
    for k, node in enumerate(scale.SimulatedNode(b, i) for b in range(max(1, nodes // scale.BLOCK))
                             for i in range(scale.BLOCK)):  # fmt: skip
        block, index = divmod(k, scale.BLOCK)
        for at, template in scale.inspector_schedule(templates[block == 0][index], start_us - base_us):
            if start_us <= at < start_us + seconds * US:
                subject, data, _ = node.message(template)
                out.append((at, template.kind, subject, data))
        for interval, cycle in gauges:
            at, turn = start_us + scale.gauge_phase_s(k, interval) * US, k
            while at < start_us + seconds * US:
                template = cycle[turn % len(cycle)]
                subject, data, _ = node.message(template)
                out.append((int(at), template.kind, subject, data))
                at, turn = at + interval * US, turn + 1
    return sorted(out, key=lambda m: m[0])


def thread_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return usage.ru_utime + usage.ru_stime


def rss_mib() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024


def commit_cpu_s(
    messages: list[tuple[int, str, str, bytes]], batch: int, rss: list[float] | None = None
) -> float:
    """The writer's CPU seconds to commit ``messages`` in batches of ``batch`` into a fresh database; ``rss`` gets the
    process's RSS (MiB) before the first commit and after each."""
    from ranksight.aggregator.ingest.pipeline import Incoming
    from ranksight.aggregator.store import Store

    with tempfile.TemporaryDirectory(prefix="ranksight-writer-") as tmp:
        store = Store(Path(tmp) / "history.duckdb")
        store.open()
        recv_ns = time.time_ns() // 1000 * 1000
        if rss is not None:
            rss.append(rss_mib())
        started = thread_cpu_s()
        for i in range(0, len(messages), batch):
            store.commit_batch(
                [Incoming(subject, data, recv_ns) for _, _, subject, data in messages[i : i + batch]]
            )
            INGEST_GC.between_batches()
            if rss is not None:
                rss.append(rss_mib())
        spent = thread_cpu_s() - started
        store.close_connection()
    return spent


def memory(args: argparse.Namespace) -> None:
    """``--memory``: each allocator setting in a fresh process (this script, ``--memory-child``), side by side."""
    from ranksight.aggregator import ALLOCATOR_CONF, ALLOCATOR_CONF_ENV

    batch = args.batches.split(",")[0]
    print(f"{args.nodes} nodes x {args.seconds:g} s, {batch} messages per commit: RSS grown by (MiB); ranksight's "
          f"{ALLOCATOR_CONF_ENV}={ALLOCATOR_CONF}")  # fmt: skip
    print(f"{'DuckDB jemalloc':>20}  {'peak':>6}  {'mean':>6}  {'writer CPU':>10}")
    figures = []
    for label, conf in (("jemalloc defaults", ""), ("ranksight's", ALLOCATOR_CONF)):
        argv = [sys.executable, __file__, "--nodes", str(args.nodes), "--seconds", str(args.seconds), "--batches",
                batch, "--memory-child", *(["--kind", args.kind] if args.kind else [])]  # fmt: skip
        out = subprocess.run(argv, env={**os.environ, ALLOCATOR_CONF_ENV: conf}, capture_output=True, text=True,
                             check=True).stdout.split()  # fmt: skip
        peak, mean, cpu = map(float, out[-3:])
        figures.append((peak, mean, cpu))
        print(f"{label:>20}  {peak:>6.0f}  {mean:>6.0f}  {cpu:>5.3f} core")
    (peak0, mean0, cpu0), (peak1, mean1, cpu1) = figures
    print(f"{'ratio':>20}  {peak1 / peak0:>6.2f}  {mean1 / mean0:>6.2f}  {cpu1 / cpu0:>10.2f}")


def memory_child(messages: list[tuple[int, str, str, bytes]], args: argparse.Namespace) -> None:
    rss: list[float] = []
    spent = commit_cpu_s(messages, int(args.batches.split(",")[0]), rss)
    half = rss[1 + len(rss[1:]) // 2 :]
    print(max(rss) - rss[0], sum(half) / len(half) - rss[0], spent / args.seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=10.0, help="traffic committed per size")
    parser.add_argument("--batches", default="85,372,745", help="messages per commit, comma-separated")
    parser.add_argument("--kind", help="only this kind's messages")
    parser.add_argument(
        "--memory", action="store_true", help="RSS growth by DuckDB allocator setting, not CPU"
    )
    parser.add_argument("--memory-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory:
        memory(args)
        return
    from ranksight.schemas.codec import decode_event

    messages = traffic(args.nodes, args.seconds)
    INGEST_GC.start()  # as the aggregator runs (the default thresholds cost the summaries' commits about a third more)
    if args.kind:
        messages = [m for m in messages if m[1] == args.kind]
    if args.memory_child:
        memory_child(messages, args)
        return
    kinds: dict[str, list[bytes]] = defaultdict(list)
    for _, kind, _, data in messages:
        kinds[kind].append(data)
    print(f"{args.nodes} nodes x {args.seconds:g} s: {len(messages)} messages "
          f"({', '.join(f'{k} {len(v)}' for k, v in sorted(kinds.items()))})")  # fmt: skip
    print(f"{'per commit':>10}  {'writer CPU':>10}  {'us/msg':>7}  {'ratio':>5}")
    first = None
    for batch in map(int, args.batches.split(",")):
        spent = commit_cpu_s(messages, batch)
        first = first or spent
        print(f"{batch:>10}  {spent / args.seconds:>5.3f} core  {spent / len(messages) * US:>7.0f}  "
              f"{spent / first:>5.2f}")  # fmt: skip
    for kind, payloads in sorted(kinds.items()):
        started = thread_cpu_s()
        for data in payloads:
            decode_event(data)
        spent = thread_cpu_s() - started
        print(f"decode {kind}: {spent / len(payloads) * US:.0f} us/msg, {spent / args.seconds:.3f} core, "
              f"{sum(map(len, payloads)) / len(payloads):.0f} B/msg")  # fmt: skip


if __name__ == "__main__":
    main()
