"""Straggler engine benchmark: what the aggregator's engine process pays at N nodes x 8 GPUs.

The input is what ``scale.py``'s nodes publish: the agent's own summarizer on the job simulator's 4-node blocks (a dense
job, GPU 2 of node 1 running 1.6x slow from ``--onset``), every block under its own host names and communicator ids.
Each node's summary envelopes are queued as the aggregator queues them (:func:`aggregator.models.engines.queue_entry`)
and evaluated every ``evaluate_every_s`` of dump time by what the engine process runs
(:func:`~aggregator.models.engines.process_start`, then :func:`~aggregator.models.engines.process_evaluate` per
batch). Each size runs in a fresh process.

Per N it prints the engine's CPU per second of traffic (folding the queue's records and judging), its memory (the
process's RSS at its peak over the evaluations, above its RSS before the first one), the time from the straggler's
onset to its first finding (dump time: the wait for the next evaluation included, agent and bus delays not), and
whether the findings name the straggler and nothing else; against a baseline measured in the same run on the same
queue: decoding it alone, which any engine fed this queue pays.

    python benchmarks/engine.py [--nodes 256,1024] [--seconds 60] [--onset 15]
"""

from __future__ import annotations

import argparse
import multiprocessing
import pickle
import resource
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import scale
from benchmarks.procmeter import MiB

US = 1_000_000


def thread_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return usage.ru_utime + usage.ru_stime


def status_bytes(field: str) -> int:
    """A memory figure of this process from /proc (``VmRSS``, ``VmHWM``: the peak RSS since the last reset)."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(f"{field}:")) * 1024


def reset_peak() -> None:
    """Start ``VmHWM`` over from the current RSS (Linux: ``clear_refs``)."""
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")


def periods(nodes: int, template_file: Path, every_us: int) -> Iterator[tuple[int, list[list[Any]]]]:
    """Per evaluation period, its end (µs since the epoch: the aggregator's clock when it evaluates) and each node's
    summary envelopes published in it (their records), in publication order: made period by period, as only one
    period's are alive in the engine process."""
    from msgspec.structs import replace

    base_us, templates, _ = pickle.loads(template_file.read_bytes())
    # (faulted block?, node of the block) -> period -> [(time published, records)]
    by_period: dict[tuple[bool, int], dict[int, list[tuple[int, list[Any]]]]] = {}
    for slow, block in templates.items():
        for i, node in enumerate(block):
            sent: dict[int, list[Any]] = defaultdict(list)
            for at, rec in node.summaries:
                sent[at].append(rec)
            periods = by_period[(slow, i)] = defaultdict(list)
            for at, records in sent.items():
                periods[(at - base_us) // every_us].append((at, records))
    last = max(k for periods in by_period.values() for k in periods)
    for k in range(last + 1):
        out = []
        for block in range(max(1, nodes // scale.BLOCK)):
            for i in range(scale.BLOCK):
                host, suffix = f"node{block * scale.BLOCK + i:04d}", f"{block:04x}"
                out += [(at, [replace(rec, hostname=host, comm_id=rec.comm_id + suffix) for rec in records])
                        for at, records in by_period[(block == 0, i)].get(k, [])]  # fmt: skip
        yield base_us + (k + 1) * every_us, [records for _, records in sorted(out, key=lambda sent: sent[0])]


def measure(nodes: int, template_file: Path, onset_s: float, result: Any) -> None:
    """One size, in this (fresh) process: ``result`` gets the figures."""
    from ranksight.aggregator.models.engines import (
        decoded,
        params_of,
        process_evaluate,
        process_start,
        queue_entry,
    )
    from ranksight.aggregator.models.straggler.settings import StragglerSettings

    settings = StragglerSettings.model_validate({})
    every_us = int(settings.evaluate_every_s * US)
    process_start(params_of(settings))
    engine_s = decode_s = 0.0
    first_found: float | None = None
    named: set[tuple[str, int | None]] = set()
    summaries = evaluations = 0
    rss0 = peak = 0
    for k, (clock_us, period) in enumerate(periods(nodes, template_file, every_us)):
        queue = [queue_entry(scale.CLUSTER, True, records) for records in period]
        summaries += sum(map(len, period))
        del period
        if not rss0:
            rss0 = status_bytes("VmRSS")
            reset_peak()
        started = thread_cpu_s()
        for _ in decoded(queue):
            pass
        decode_s += thread_cpu_s() - started
        started = thread_cpu_s()
        judged = process_evaluate(queue, set(), clock_us * 1000).get(scale.CLUSTER)
        findings = judged.findings if judged is not None else []
        engine_s += thread_cpu_s() - started
        named |= {(f.hostname, f.pid) for f in findings}
        if findings and first_found is None:
            first_found = (k + 1) * every_us / US - onset_s
        evaluations += 1
    traffic_s = evaluations * every_us / US
    peak = status_bytes("VmHWM")
    result.update(nodes=nodes, engine=engine_s / traffic_s, decode=decode_s / traffic_s, peak=peak - rss0, rss0=rss0,
                  alert=first_found, named=sorted(named), summaries=summaries / traffic_s)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="256,1024", help="comma-separated cluster sizes")
    parser.add_argument("--seconds", type=float, default=60.0, help="dump time of traffic per size")
    parser.add_argument("--onset", type=float, default=15.0, help="straggler onset, seconds after the start")
    args = parser.parse_args()
    started = time.process_time()
    played = scale.build_templates(args.seconds, args.onset)
    print(f"templates: a {scale.BLOCK}-node block x {scale.GPUS} GPUs, {played[2]:.0f} collectives/s per rank, "
          f"simulated in {time.process_time() - started:.0f} s; straggler: GPU {scale.SLOW[1]} of "
          f"node{scale.SLOW[0]:04d}, 1.6x slow from {args.onset:g} s", flush=True)  # fmt: skip
    print(f"{'nodes':>6} {'summaries/s':>12} {'engine':>11} {'decode':>11} {'ratio':>6} {'peak':>9} {'imports':>9} "
          f"{'alert':>7}  named")  # fmt: skip
    spawn = multiprocessing.get_context("spawn")
    with tempfile.NamedTemporaryFile(prefix="ranksight-engine-", suffix=".pickle") as tmp:
        Path(tmp.name).write_bytes(pickle.dumps(played))
        for nodes in map(int, args.nodes.split(",")):
            with spawn.Manager() as manager:
                result = manager.dict()
                child = spawn.Process(target=measure, args=(nodes, Path(tmp.name), args.onset, result))
                child.start()
                child.join()
                r = dict(result)
            if not r:
                raise SystemExit(f"the measuring process for {nodes} nodes failed (exit {child.exitcode})")
            alert = f"{r['alert']:.1f} s" if r["alert"] is not None else "none"
            print(f"{nodes:>6} {r['summaries']:>12,.0f} {r['engine']:>6.3f} core {r['decode']:>6.3f} core "
                  f"{r['engine'] / r['decode']:>6.1f} {r['peak'] / MiB:>5.0f} MiB {r['rss0'] / MiB:>5.0f} MiB "
                  f"{alert:>7}  {', '.join(f'{h} pid {p}' for h, p in r['named'])}", flush=True)  # fmt: skip
    print(
        "engine: the engine process's CPU (folding its queue, judging) per second of traffic; decode: decoding the "
        "same queue alone; peak: its RSS at the peak of the evaluations above its RSS before the first (imports: "
        "that RSS); alert: onset to the first finding, in dump time"
    )


if __name__ == "__main__":
    main()
