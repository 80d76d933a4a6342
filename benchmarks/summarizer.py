"""The agent's Inspector summarizer and raw-record sampler: their CPU cost per record and the share of one core they
take at a node's full Inspector rate, against the agent's own parser on the same lines (measured in the same run).

A node of ``--ranks`` ranks at ``--rate`` collectives/s each (8 x 100 by default) for ``--seconds`` of simulated time:
its dump lines are parsed (the baseline, which the collector pays anyway), then folded into the summarizer with
windows closed as the agent's clock would close them, and sampled by the raw sampler at its default rate.

    python benchmarks/summarizer.py [--ranks 8] [--rate 100] [--seconds 60]
"""

from __future__ import annotations

import argparse
import time

from ranksight.agent.collectors.inspector.sampler import RawSampler
from ranksight.agent.collectors.inspector.settings import InspectorSettings
from ranksight.agent.collectors.inspector.summary import Summarizer
from ranksight.formats.inspector import parse_op
from ranksight.simulate.inspector import JobSpec, format_line
from ranksight.simulate.inspector import comms as job_comms

TARGET_CORE_SHARE = 0.03  # of one core at the full rate (issue 20: a few percent)


def node_lines(ranks: int, rate: float, seconds: float) -> list[str]:
    """One node's ring-capture lines: each rank runs ``rate`` collectives a second, its comms (the node's tp
    AllReduce, its cross-node dp and pp comms) in turn."""
    spec = JobSpec(nodes=2, gpus_per_node=ranks, steps=1)
    comms = [c for phase in job_comms(spec) for c in phase]
    mine = [[(c, c.members.index((0, g))) for c in comms if (0, g) in c.members] for g in range(ranks)]
    lines: list[str] = []
    for i in range(int(rate * seconds)):
        ts = spec.start_us + int(i * 1e6 / rate)
        for g in range(ranks):
            comm, rank = mine[g][i % len(mine[g])]
            sn = i // len(mine[g]) + 1
            lines.append(format_line(spec, comm, rank, sn, 900 + (i * 7 + g) % 200, ts))
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--rate", type=float, default=100.0, help="collectives per second per rank")
    ap.add_argument("--seconds", type=float, default=60.0)
    args = ap.parse_args()
    lines = node_lines(args.ranks, args.rate, args.seconds)
    offered = args.ranks * args.rate  # records/s the node writes

    started = time.process_time()
    records = [parse_op(line) for line in lines]  # the collector's parse: light operations
    parse_s = time.process_time() - started

    cfg = InspectorSettings.model_validate({})
    summarizer = Summarizer(
        cfg.summary_window_s, cfg.summary_slice_s, cfg.summary_publish_s, max_keys=cfg.summary_max_keys
    )
    publish_us = round(cfg.summary_publish_s * 1e6)
    sampler = RawSampler(cfg.raw_rate_per_s)
    summaries = raw = 0
    batch = max(1, int(offered / 20))  # the collector's passes: about every 50 ms at this rate
    started = time.process_time()
    due_us = records[0].dump_ts_us + publish_us
    for i in range(0, len(records), batch):
        chunk = records[i : i + batch]
        now_us = chunk[-1].dump_ts_us
        raw += len(sampler.take(chunk, now_us / 1e6))
        for rec in chunk:
            summarizer.add(rec)
        if now_us >= due_us:  # the collector publishes the parts read so far every summary_publish_s
            summaries += len(summarizer.take())
            due_us = now_us + publish_us
    summaries += len(summarizer.take())
    fold_s = time.process_time() - started

    n = len(records)
    print(
        f"{n} records ({args.ranks} ranks x {args.rate:.0f} collectives/s x {args.seconds:.0f} s of one node)"
    )
    print(f"  parse (baseline, paid anyway)  {n / parse_s:10.0f} records/s per core")
    print(
        f"  summarize + sample raw         {n / fold_s:10.0f} records/s per core  ({fold_s / parse_s:.2f}x the parse)"
    )
    print(f"  out: {summaries} summaries ({summaries / args.seconds:.1f}/s), {raw} raw records ({raw / args.seconds:.1f}/s)"
          f", from {offered:.0f} records/s")  # fmt: skip
    share = offered * fold_s / n
    print(
        f"  summarizer + sampler at the full rate: {share:.2%} of one core (target <= {TARGET_CORE_SHARE:.0%}: "
        f"{'met' if share <= TARGET_CORE_SHARE else 'MISSED'}); with the parse {offered * (fold_s + parse_s) / n:.2%}"
    )


if __name__ == "__main__":
    main()
