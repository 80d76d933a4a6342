"""Scale benchmark: one real aggregator following N simulated nodes x 8 GPUs live, with a straggler injected.

For each ``--nodes`` size, a fresh nats-server and a real aggregator (``ranksight aggregator``, a child process) are
started; ``--procs`` publisher processes (outside the measured aggregator) play N nodes that publish what a real
agent publishes: ``inspector_summary`` parts every ``summary_publish_s`` and raw ``inspector`` records sampled
to the agent's default ``raw_rate_per_s`` (both through the agent's own summarizer and sampler), 8 GPU records and a
heartbeat every 5 s, a NIC record every 2 s. (RAS is left out: one status poll per job at a time, it adds little.)

The Inspector records come from the job simulator (``ranksight.simulate.inspector``): a 4-node block of a dense job,
simulated once healthy and once with GPU 2 of its node 1 running 1.6x slow from ``--onset`` seconds on. Block 0 of the
cluster replays the faulted block, every other block the healthy one under its own host names and communicator ids,
with dump times shifted to the wall clock (windows stay aligned to wall-clock boundaries, as on real nodes).

Per N it prints: the aggregator's CPU share and peak RSS over the window, consumer lag (p50 and max of the seconds the
oldest message not yet delivered to the aggregator has waited, sampled every second), bytes/s and messages/s on the wire, and the time from
the straggler's onset to the ``straggler`` alert on the alert subject; against the targets (N = 1024: lag <= 5 s,
aggregator <= 1 core and <= 1 GiB, alert <= 15 s). It also prints the agent-side summarizer's throughput (records/s per
core), measured in the same run, as a baseline of what a node pays to summarize its own records.

    python benchmarks/scale.py [--nodes 64,256,1024] [--seconds 40] [--onset 15] [--procs 2] [--env RANKSIGHT_X=V]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import ranksight  # noqa: F401 - first: defers nats-py's WebSocket dependencies, as every ranksight process does
from benchmarks.procmeter import MiB, Usage, measure

CLUSTER = "bench"
BLOCK = 4  # nodes per simulated block
GPUS = 8
SLOW = (1, 2)  # node of block 0, GPU
US = 1_000_000
TARGETS = {"lag_s": 5.0, "cpu": 1.0, "rss": 1024 * MiB, "alert_s": 15.0}
TICK_S = 0.25  # the agent's batch delay: raw records go out at this cadence


@dataclass
class NodeTemplate:
    """What one simulated node publishes, in template time (µs): summaries at their publication time, raw samples."""

    summaries: list[tuple[int, Any]] = field(default_factory=list)
    raw: list[tuple[int, list[Any]]] = field(default_factory=list)


def build_templates(seconds: float, onset_s: float) -> tuple[int, dict[bool, list[NodeTemplate]], float]:
    """The healthy and the faulted block, each node through the agent's summarizer and raw sampler; their start time
    (µs, a window boundary) and the simulated collectives/s per rank."""
    from ranksight.agent.collectors.inspector.parse import parse_line
    from ranksight.agent.collectors.inspector.sampler import RawSampler
    from ranksight.config import InspectorSettings
    from ranksight.simulate.inspector import Fault, JobSpec, run_job, summarize

    cfg = InspectorSettings.model_validate({})
    spec = JobSpec(nodes=BLOCK, gpus_per_node=GPUS, pp=2, steps=21, compute_ms=100.0, seed=1)
    _, starts = run_job(spec)
    step_us = (starts[-1] - starts[0]) // 20
    spec.steps = int((seconds + 2 * cfg.summary_window_s) * US / step_us) + 1
    healthy_lines, starts = run_job(spec)
    onset_step = next((i for i, t in enumerate(starts) if t - spec.start_us >= onset_s * US), len(starts))
    faulted = dataclasses.replace(
        spec, faults=[Fault("gpu", node=SLOW[0], gpu=SLOW[1], factor=1.6, start_step=onset_step)]
    )
    faulted_lines, _ = run_job(faulted)
    templates: dict[bool, list[NodeTemplate]] = {}
    count = 0
    for slow, lines in ((False, healthy_lines), (True, faulted_lines)):
        by_node: dict[str, list[Any]] = defaultdict(list)
        for (host, _pid), timed in lines.items():
            by_node[host] += [parse_line(text) for _, text in timed]
        nodes = []
        for host in sorted(by_node):
            records = sorted(by_node[host], key=lambda r: r.dump_ts_us)
            count += len(records) if not slow else 0
            node = NodeTemplate(
                summaries=summarize(records, cfg.summary_window_s, cfg.summary_slice_s, cfg.summary_publish_s)
            )
            sampler, tick, chunk = RawSampler(cfg.raw_rate_per_s), 0, []
            for rec in records:
                if rec.dump_ts_us >= tick and chunk:
                    node.raw.append((tick, sampler.take(chunk, tick / US)))
                    chunk = []
                if rec.dump_ts_us >= tick:
                    tick = rec.dump_ts_us + int(TICK_S * US)
                chunk.append(rec)
            nodes.append(node)
        templates[slow] = nodes
    rate = count / (BLOCK * GPUS) / (spec.steps * step_us / US)
    return spec.start_us, templates, rate


def summarizer_throughput() -> float:
    """Records/s per core of the agent's summarizer and raw sampler, on one node's parsed lines (``summarizer.py``)."""
    from benchmarks.summarizer import node_lines
    from ranksight.agent.collectors.inspector.parse import parse_op
    from ranksight.agent.collectors.inspector.sampler import RawSampler
    from ranksight.agent.collectors.inspector.summary import Summarizer

    records = [parse_op(line) for line in node_lines(GPUS, 100.0, 20.0)]  # what the collector folds
    summarizer, sampler = Summarizer(), RawSampler(10.0)
    started = time.process_time()
    for i in range(0, len(records), 40):
        chunk = records[i : i + 40]
        sampler.take(chunk, chunk[-1].dump_ts_us / US)
        for rec in chunk:
            summarizer.add(rec)
        if i % 800 == 0:  # 800 records: about a second of the node, the parts' period
            summarizer.take()
    summarizer.take()
    return len(records) / (time.process_time() - started)


# --- the publisher processes -------------------------------------------------------------------------------------


class SimulatedNode:
    """One node's envelopes: its own incarnation and sequence, the one codec."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.incarnation = f"sim{name}"
        self.seq = 0

    def envelope(self, kind: str, records: list[Any], ttl: float) -> bytes:
        from ranksight.schemas.codec import encode_event
        from ranksight.schemas.envelope import Envelope, event_type

        self.seq += 1
        return encode_event(Envelope.model_construct(type=event_type(kind), cluster=CLUSTER, node=self.name,
                                                     agent=self.incarnation, seq=self.seq, ts=time.time_ns(),
                                                     ttl=ttl, records=records))  # fmt: skip


def _renamed(record: Any, block: int, shift_us: int, summary: bool) -> Any:
    node = int(record.hostname.removeprefix("node"))
    update: dict[str, Any] = {
        "hostname": f"node{block * BLOCK + node:04d}",
        "comm_id": f"{record.comm_id}{block:04x}",
    }
    if summary:
        update |= {"window_start_us": record.window_start_us + shift_us,
                   "last_dump_ts_us": record.last_dump_ts_us + shift_us,
                   "slice_sn_lo_ts_us": [t + shift_us for t in record.slice_sn_lo_ts_us],
                   "slice_sn_hi_ts_us": [t + shift_us for t in record.slice_sn_hi_ts_us]}  # fmt: skip
    else:
        update["dump_ts_us"] = record.dump_ts_us + shift_us
    return record.model_copy(update=update)


async def publisher(
    url: str, template_file: Path, t0_us: int, first_block: int, last_block: int, stats: Path
) -> None:
    """Play blocks ``[first_block, last_block)`` in real time from ``t0_us`` until terminated."""
    import nats

    from ranksight.schemas.records import GpuRecord, HeartbeatRecord, NicRecord
    from ranksight.schemas.subjects import Subjects

    base_us, templates, _ = played
    shift = t0_us - base_us
    subjects = Subjects("ranksight.v1")
    nc = await nats.connect(url, pending_size=256 << 20)
    nodes = {
        (b, i): SimulatedNode(f"node{b * BLOCK + i:04d}")
        for b in range(first_block, last_block)
        for i in range(BLOCK)
    }
    gpu = [
        GpuRecord(index=i, name="MI300X", utilization_pct=97.0, power_w=712.0, memory_used_bytes=150 << 30)
        for i in range(GPUS)
    ]
    nic = [NicRecord(name="mlx5_0", kind="rdma", state="ACTIVE", speed_bps=4e11, tx_bps=2e10, rx_bps=2e10)]
    cursors = {key: [0, 0] for key in nodes}  # next summary, next raw batch
    sent_bytes = sent_msgs = 0
    next_gpu = next_nic = time.time()
    while True:
        now = time.time()
        now_us = int(now * US) - shift  # template time
        out: list[tuple[str, bytes]] = []
        for (block, i), node in nodes.items():
            template = templates[block == 0][i]
            cur = cursors[block, i]
            due = []
            while cur[0] < len(template.summaries) and template.summaries[cur[0]][0] <= now_us:
                due.append(_renamed(template.summaries[cur[0]][1], block, shift, True))
                cur[0] += 1
            if due:
                out.append(
                    (
                        subjects.event(CLUSTER, node.name, "inspector_summary"),
                        node.envelope("inspector_summary", due, 30.0),
                    )
                )
            raw = []
            while cur[1] < len(template.raw) and template.raw[cur[1]][0] <= now_us:
                raw += [_renamed(r, block, shift, False) for r in template.raw[cur[1]][1]]
                cur[1] += 1
            if raw:
                out.append(
                    (subjects.event(CLUSTER, node.name, "inspector"), node.envelope("inspector", raw, 30.0))
                )
            if now >= next_gpu:
                out.append((subjects.event(CLUSTER, node.name, "gpu"), node.envelope("gpu", gpu, 15.0)))
                beat = HeartbeatRecord(hostname=node.name, version="bench", pid=1, started_ns=t0_us * 1000)
                out.append(
                    (
                        subjects.event(CLUSTER, node.name, "heartbeat"),
                        node.envelope("heartbeat", [beat], 15.0),
                    )
                )
            if now >= next_nic:
                out.append((subjects.event(CLUSTER, node.name, "nic"), node.envelope("nic", nic, 6.0)))
        if now >= next_gpu:
            next_gpu += 5.0
        if now >= next_nic:
            next_nic += 2.0
        for subject, payload in out:
            await nc.publish(subject, payload)
            sent_bytes += len(payload)
        sent_msgs += len(out)
        await nc.flush()
        await asyncio.to_thread(stats.write_text, f"{sent_msgs} {sent_bytes}")
        await asyncio.sleep(max(0.0, TICK_S - (time.time() - now)))


# --- the measuring side ------------------------------------------------------------------------------------------


@dataclass
class SizeResult:
    nodes: int
    usage: Usage
    lag_p50_s: float
    lag_max_s: float
    bytes_per_s: float
    msgs_per_s: float
    alert_s: float | None


async def _lag_s(js: Any, stream: str, durable: str) -> float:
    """Seconds the oldest message not yet delivered to the aggregator has waited in the stream (0 when none waits)."""
    info = await js.consumer_info(stream, durable)
    if not info.num_pending:
        return 0.0
    msg = await js.get_msg(stream, seq=info.delivered.stream_seq + 1)
    if msg.time is None:
        return 0.0
    return max(0.0, (datetime.datetime.now(datetime.UTC) - msg.time).total_seconds())


async def run_size(n: int, template_file: Path, args: argparse.Namespace) -> SizeResult:
    import nats

    from ranksight.config import load_settings
    from ranksight.natsserver import NatsServer
    from ranksight.schemas.subjects import Subjects

    blocks = max(1, n // BLOCK)
    with tempfile.TemporaryDirectory(prefix="ranksight-scale-") as tmp:
        root = Path(tmp)
        server = NatsServer(root / "nats").start()
        children: list[subprocess.Popen[bytes]] = []
        try:
            settings = load_settings(
                None, cluster=CLUSTER, state_dir=root / "state", nats={"url": server.url}
            )
            env = {k: v for k, v in os.environ.items() if not k.startswith("RANKSIGHT_")}
            env.update(RANKSIGHT_NATS__URL=server.url, RANKSIGHT_STATE_DIR=str(settings.state_dir),
                       RANKSIGHT_CLUSTER=CLUSTER, RANKSIGHT_AGGREGATOR__HTTP__PORT="0")  # fmt: skip
            aggregator_env = dict(item.split("=", 1) for item in args.env)
            aggregator = _spawn(
                [sys.executable, "-m", "ranksight.cli", "aggregator"],
                env | aggregator_env,
                root / "aggregator.log",
            )
            children.append(aggregator)
            nc = await nats.connect(server.url)
            js = nc.jetstream()
            alerts: list[float] = []
            alerted = asyncio.Event()

            async def on_alert(msg: Any) -> None:
                if msg.subject.endswith(".straggler") and not alerts:
                    alerts.append(time.time())
                    alerted.set()

            await nc.subscribe(Subjects(settings.subject_prefix).alerts_filter(), cb=on_alert)
            cfg = settings.aggregator
            while True:  # the aggregator's consumer exists once it is ready
                try:
                    await js.consumer_info(cfg.stream, cfg.durable)
                    break
                except nats.js.errors.NotFoundError:
                    if aggregator.poll() is not None:
                        raise SystemExit(
                            f"the aggregator exited: {(root / 'aggregator.log').read_text()[-2000:]}"
                        ) from None
                    await asyncio.sleep(0.5)
            window_us = 5 * US  # the default summary window: t0 on a boundary keeps the windows aligned
            t0_us = (int((time.time() + 3) * US) // window_us + 1) * window_us
            per_proc = -(-blocks // args.procs)
            stats = []
            for first in range(0, blocks, per_proc):
                stats.append(root / f"publisher{first}.txt")
                command = [sys.executable, __file__, "--publisher", server.url, str(template_file), str(t0_us),
                           str(first), str(min(blocks, first + per_proc)), str(stats[-1])]  # fmt: skip
                children.append(_spawn(command, env, root / f"publisher{first}.log"))
            await asyncio.sleep(max(0.0, t0_us / US - time.time()) + args.warmup)
            lags: list[float] = []
            sent0 = _sent(stats)
            started = time.time()
            usage_task = asyncio.create_task(measure(aggregator.pid, args.seconds))
            while not usage_task.done():
                lags.append(await _lag_s(js, cfg.stream, cfg.durable))
                await asyncio.sleep(1.0)
            usage = await usage_task
            elapsed = time.time() - started
            sent1 = _sent(stats)
            onset = t0_us / US + args.onset
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(alerted.wait(), max(0.0, onset + 60 - time.time()))
            for child in children[1:]:
                if child.poll() is not None:
                    print(
                        f"  a publisher exited: {(root / 'publisher0.log').read_text()[-1500:]}",
                        file=sys.stderr,
                    )
            await nc.close()
            return SizeResult(n, usage, statistics.median(lags) if lags else 0.0, max(lags, default=0.0),
                              (sent1[1] - sent0[1]) / elapsed, (sent1[0] - sent0[0]) / elapsed,
                              alerts[0] - onset if alerts else None)  # fmt: skip
        finally:
            for child in children:
                child.terminate()
            for child in children:
                try:
                    child.wait(30)
                except subprocess.TimeoutExpired:
                    child.kill()
            server.stop()


def _spawn(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "w") as stderr:
        return subprocess.Popen(command, env=env, stderr=stderr)


def _sent(stats: list[Path]) -> tuple[int, int]:
    msgs = size = 0
    for path in stats:
        if path.exists() and path.read_text().strip():
            m, b = path.read_text().split()
            msgs, size = msgs + int(m), size + int(b)
    return msgs, size


async def main(args: argparse.Namespace) -> None:
    sizes = [int(n) for n in args.nodes.split(",")]
    print(
        f"summarizer + raw sampler (agent side): {summarizer_throughput():,.0f} records/s per core",
        flush=True,
    )
    started = time.process_time()
    base_us, templates, rate = build_templates(args.warmup + args.seconds + 30, args.onset)
    print(f"templates: a {BLOCK}-node block x {GPUS} GPUs, {rate:.0f} collectives/s per rank, simulated in "
          f"{time.process_time() - started:.0f} s; straggler: GPU {SLOW[1]} of node{SLOW[0]:04d}, 1.6x slow from "
          f"{args.onset:g} s; window {args.seconds:g} s after {args.warmup:g} s", flush=True)  # fmt: skip
    with tempfile.NamedTemporaryFile(prefix="ranksight-scale-", suffix=".pickle") as tmp:
        await asyncio.to_thread(Path(tmp.name).write_bytes, pickle.dumps((base_us, templates, rate)))
        print(
            f"{'nodes':>6} {'agg CPU':>8} {'peak RSS':>9} {'lag p50':>8} {'lag max':>8} {'wire':>10} {'msgs/s':>7} {'alert':>8}"
        )
        for n in sizes:
            r = await run_size(n, Path(tmp.name), args)
            alert = f"{r.alert_s:.1f} s" if r.alert_s is not None else "none"
            print(f"{r.nodes:>6} {r.usage.cpu_share * 100:>7.0f}% {r.usage.peak_rss / MiB:>5.0f} MiB {r.lag_p50_s:>6.1f} s "
                  f"{r.lag_max_s:>6.1f} s {r.bytes_per_s / 1e6:>6.2f} MB/s {r.msgs_per_s:>7.0f} {alert:>8}", flush=True)  # fmt: skip
    print(f"targets at 1024 nodes: lag <= {TARGETS['lag_s']:g} s, aggregator <= {TARGETS['cpu']:g} core and "
          f"<= {TARGETS['rss'] / MiB:.0f} MiB, alert <= {TARGETS['alert_s']:g} s after onset")  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", default="64,256,1024", help="comma-separated cluster sizes")
    parser.add_argument("--seconds", type=float, default=40.0, help="measurement window per size")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds of publishing before the window")
    parser.add_argument("--onset", type=float, default=15.0, help="straggler onset, seconds after the start")
    parser.add_argument("--procs", type=int, default=2, help="publisher processes")
    parser.add_argument("--env", action="append", default=[], metavar="RANKSIGHT_X=V",
                        help="a setting for the aggregator (repeatable), e.g. RANKSIGHT_AGGREGATOR__FETCH_BATCH=5000")  # fmt: skip
    parser.add_argument("--publisher", nargs=6, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.publisher:
        url, template, t0, first, last, stats_file = options.publisher
        played = pickle.loads(Path(template).read_bytes())
        asyncio.run(publisher(url, played, int(t0), int(first), int(last), Path(stats_file)))
    else:
        asyncio.run(main(options))
