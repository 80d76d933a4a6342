"""Scale benchmark: one real aggregator following N simulated nodes x 8 GPUs live, with a straggler injected.

For each ``--nodes`` size, a fresh nats-server and a real aggregator (``ranksight aggregator``, a child process) are
started; ``--procs`` publisher processes (outside the measured aggregator) play N nodes that publish what a real
agent publishes at its defaults: ``inspector_summary`` parts every ``summary_publish_s`` (one envelope per part, the
nodes' clocks spread over that period) and raw ``inspector`` records sampled to ``raw_rate_per_s``, batched at the parts' cadence as the agent does,
both made by the agent's own summarizer and sampler; a GPU sample of 8 GPUs and a heartbeat every 5 s and a NIC sample
of 8 ports every 2 s (``--nic``: ``ethtool``, AMD Pollara ports with 607 ``ethtool -S`` counters each, or ``sysfs``,
mlx5 ports with 46 sysfs counters; every counter with each ``counters_full_every_s``, the changed ones in between,
those of traffic with each ``traffic_counters_every_s``, as the agent thins them), each node's gauges in their own
phase; and the job's RAS status every 10 s from its lease holder (node0000), in parts under max_payload as the agent
publishes it: the text status, with the JSON detail of every communicator (op counts advancing) every third poll,
rendered by the demo's fake RAS server and parsed by the agent's parsers. RAS MONITOR events come only with job
lifecycle changes: a running job has none.

Publishing costs next to nothing, so a few processes play a thousand nodes: every envelope is encoded once by the real
codec as a template, with placeholder names (same length as the real ones) and fixed-width seq and ts, and each send
fills in the node's name, its block's communicator suffix, its next seq and the time (the Nats-Msg-Id header too).

The Inspector records come from the job simulator (``ranksight.simulate.inspector``): a 4-node block of a dense job,
simulated once healthy and once with GPU 2 of its node 1 running 1.6x slow from ``--onset`` seconds on, each node's
records summarized and sampled once. Block 0 of the cluster replays the faulted block, every other block the healthy
one under its own host names and communicator ids, with dump times shifted to the wall clock (windows stay aligned to
wall-clock boundaries, as on real nodes).

Per N it prints: the aggregator's CPU share and peak RSS over the window, consumer lag (p50 and max of the seconds the
oldest message not yet delivered to the aggregator has waited, sampled every second), bytes/s and messages/s on the wire, and the time from
the straggler's onset to the ``straggler`` alert on the alert subject; against the targets (N = 1024: lag <= 5 s,
aggregator <= 1 core and <= 1 GiB, alert <= 15 s). It also prints the agent-side summarizer's throughput (records/s per
core), measured in the same run, as a baseline of what a node pays to summarize its own records.

    python benchmarks/scale.py [--nodes 64,256,1024] [--seconds 40] [--onset 15] [--procs 2] [--nic ethtool|sysfs]
                               [--env RANKSIGHT_X=V]
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
import struct
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from msgspec.structs import replace

from benchmarks.procmeter import MiB, Usage, measure

ROOT = Path(__file__).resolve().parent.parent
CLUSTER = "bench"
BLOCK = 4  # nodes per simulated block
GPUS = 8
SLOW = (1, 2)  # node of block 0, GPU
US = 1_000_000
TARGETS = {"lag_s": 5.0, "cpu": 1.0, "rss": 1024 * MiB, "alert_s": 15.0}
TICK_S = 0.25  # the publishers' loop: each node's messages go out within this of their time
KINDS = ("inspector_summary", "inspector", "gpu", "nic", "heartbeat", "ras")


@dataclass
class NodeTemplate:
    """What one simulated node publishes, in template time (µs): summaries at their publication time, raw samples."""

    summaries: list[tuple[int, Any]] = field(default_factory=list)
    raw: list[tuple[int, list[Any]]] = field(default_factory=list)


def build_templates(seconds: float, onset_s: float) -> tuple[int, dict[bool, list[NodeTemplate]], float]:
    """The healthy and the faulted block, each node through the agent's summarizer and raw sampler; their start time
    (µs, a window boundary) and the simulated collectives/s per rank."""
    from ranksight.agent.collectors.inspector.sampler import RawSampler
    from ranksight.agent.collectors.inspector.settings import InspectorSettings
    from ranksight.formats.inspector import parse_op
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
            by_node[host] += [parse_op(text) for _, text in timed]
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
                    tick = rec.dump_ts_us + int(
                        cfg.summary_publish_s * US
                    )  # raw samples wait for the parts' cadence
                chunk.append(rec)
            nodes.append(node)
        templates[slow] = nodes
    rate = count / (BLOCK * GPUS) / (spec.steps * step_us / US)
    return spec.start_us, templates, rate


def summarizer_throughput() -> float:
    """Records/s per core of the agent's summarizer and raw sampler, on one node's parsed lines (``summarizer.py``)."""
    from benchmarks.summarizer import node_lines
    from ranksight.agent.collectors.inspector.sampler import RawSampler
    from ranksight.agent.collectors.inspector.summary import Summarizer
    from ranksight.formats.inspector import parse_op

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
#
# A simulated node publishes pre-encoded envelopes: each template is encoded once by the real codec with placeholder
# names and fixed-width sequence and time fields, and each send only fills those in (same lengths: the msgpack stays
# valid), so a few processes play a thousand nodes.

HOST_MARK = "node\x7f\x7f\x7f\x7f"  # the node's name and records' hostname: as long as node%04d
COMM_MARK = "\x7f\x7e\x7f\x7e"  # appended to communicator ids: as long as the block's %04x
SEQ_MARK, TS_MARK = 0x7F7F_7F7F_7F7F_7F01, 0x7F7F_7F7F_7F7F_7F02  # packed as uint64: any value fits later


@dataclass
class Template:
    """One envelope through the real codec, with its name placeholders and where its seq and ts go."""

    kind: str
    data: bytes
    seq_at: int
    ts_at: int


def pre_encode(kind: str, records: list[Any], ttl: float) -> Template:
    from ranksight.schemas.codec import encode_event
    from ranksight.schemas.envelope import Envelope
    from ranksight.schemas.wire import event_type

    data = encode_event(Envelope(type=event_type(kind), cluster=CLUSTER, node=HOST_MARK,
                                                 agent=f"sim{HOST_MARK}", seq=SEQ_MARK, ts=TS_MARK, ttl=ttl,
                                                 records=records))  # fmt: skip
    at = [data.index(b"\xcf" + mark.to_bytes(8, "big")) + 1 for mark in (SEQ_MARK, TS_MARK)]
    return Template(kind, data, *at)


class SimulatedNode:
    """One node's envelopes: its own name, incarnation and sequence over the templates."""

    def __init__(self, block: int, index: int, prefix: str = "ranksight.v1") -> None:
        from ranksight.schemas.subjects import Subjects

        self.name = f"node{block * BLOCK + index:04d}"
        self.names = (HOST_MARK.encode(), self.name.encode()), (COMM_MARK.encode(), f"{block:04x}".encode())
        self.seq = 0
        subjects = Subjects(prefix)
        self.subjects = {kind: subjects.event(CLUSTER, self.name, kind) for kind in KINDS}

    def message(self, template: Template) -> tuple[str, bytes, dict[str, str]]:
        self.seq += 1
        data = bytearray(template.data.replace(*self.names[0]).replace(*self.names[1]))
        struct.pack_into(">Q", data, template.seq_at, self.seq)
        struct.pack_into(">Q", data, template.ts_at, time.time_ns())
        return self.subjects[template.kind], bytes(data), {"Nats-Msg-Id": f"sim{self.name}:{self.seq}"}


def _placed(record: Any, shift_us: int, summary: bool) -> Any:
    """A template record under the placeholder names, its times moved to the wall clock."""
    update: dict[str, Any] = {"hostname": HOST_MARK, "comm_id": record.comm_id + COMM_MARK}
    if summary:
        update |= {"window_start_us": record.window_start_us + shift_us,
                   "last_dump_ts_us": record.last_dump_ts_us + shift_us,
                   "slice_sn_lo_ts_us": [t + shift_us for t in record.slice_sn_lo_ts_us],
                   "slice_sn_hi_ts_us": [t + shift_us for t in record.slice_sn_hi_ts_us]}  # fmt: skip
    else:
        update["dump_ts_us"] = record.dump_ts_us + shift_us
    return replace(record, **update)


def inspector_schedule(node: NodeTemplate, shift_us: int) -> list[tuple[int, Template]]:
    """A template node's Inspector envelopes with the wall-clock µs each is due: the summaries a window closes in one
    envelope (as the agent emits them), each raw batch in one."""
    from ranksight.agent.collectors.inspector.settings import InspectorSettings

    ttl = InspectorSettings.model_validate({}).summary_ttl()
    by_time: dict[int, list[Any]] = defaultdict(list)
    for at, rec in node.summaries:
        by_time[at].append(_placed(rec, shift_us, True))
    out = [(at + shift_us, pre_encode("inspector_summary", recs, ttl)) for at, recs in by_time.items()]
    out += [(at + shift_us, pre_encode("inspector", [_placed(r, shift_us, False) for r in recs], ttl))
            for at, recs in node.raw if recs]  # fmt: skip
    return sorted(out, key=lambda item: item[0])


def nic_batch(source: str) -> list[Any]:
    """One NIC sample of a node with 8 ports: ``ethtool``, ``wire.py``'s batch (8 AMD Pollara ``ionic`` ports whose
    sysfs has no counters: 607 ``ethtool -S`` counters each); ``sysfs``, the captured tree's ``mlx5_0`` port (46
    ``counters``/``hw_counters``) read by the agent's sysfs reader, as 8 ports."""
    from benchmarks.wire import nic
    from ranksight.agent.collectors.nic.sysfs import read_nics

    if source == "ethtool":
        return nic()
    [port] = [
        r for r in read_nics(ROOT / "fixtures" / "metrics" / "sysfs" / "tree" / "sys") if r.name == "mlx5_0/1"
    ]
    return [replace(port, **{"name": f"mlx5_{i}/1", "tx_bps": 1e9 * i, "rx_bps": 2e9 * i, "interval_s": 2.0})
            for i in range(8)]  # fmt: skip


def nic_cycle(
    nic_source: str, interval_s: float, full_every_s: float, traffic_every_s: float
) -> list[list[Any]]:
    """A node's NIC records over one cycle of the agent's counter thinning (``ChangedCounters``): the first sample
    carries every counter, the next ones until ``full_every_s`` only those that changed (those of traffic at most every
    ``traffic_every_s``). Traffic moves every counter that is not zero in the capture (the ionic capture's 85: bytes,
    packets, frames by size and by queue, none of trouble); zero ones stay still."""
    from ranksight.agent.collectors.nic.rates import ChangedCounters

    ports, changes, cycle = nic_batch(nic_source), ChangedCounters(full_every_s, traffic_every_s), []
    for step in range(max(1, round(full_every_s / interval_s))):
        moved = [replace(p, **{"counters": {k: v + step * 1009 if v else v for k, v in p.counters.items()}})
                 for p in ports]  # fmt: skip
        cycle.append(changes.thin(moved, at_s=step * interval_s))
    return cycle


def gauge_phase_s(k: int, interval_s: float) -> float:
    """When node ``k`` first sends a gauge of ``interval_s``, seconds after the start: agents started at different
    moments, so each node's gauges keep their own phase (spread by the golden ratio)."""
    return (k * 0.618034 % 1.0) * interval_s


def gauge_templates(nic_source: str) -> list[tuple[float, list[Template]]]:
    """Per node: (interval s, the envelopes sent in turn) of the GPU, NIC and heartbeat collectors at their defaults
    (``wire.py``'s batches: an A100's ``nvidia-smi`` sample x 8, a heartbeat; :func:`nic_cycle`)."""
    from benchmarks.wire import gpu, heartbeat
    from ranksight.agent.collectors.settings import CollectorsSettings

    cfg = CollectorsSettings()
    beat = [replace(r, **{"hostname": HOST_MARK}) for r in heartbeat()]
    nics = nic_cycle(
        nic_source, cfg.nic.interval_s, cfg.nic.counters_full_every_s, cfg.nic.traffic_counters_every_s
    )
    return [(cfg.gpu.interval_s, [pre_encode("gpu", gpu(), cfg.gpu.ttl())]),
            (cfg.nic.interval_s, [pre_encode("nic", records, cfg.nic.ttl()) for records in nics]),
            (cfg.heartbeat.interval_s, [pre_encode("heartbeat", beat, cfg.heartbeat.ttl())])]  # fmt: skip


class RasJob:
    """The job's RAS status as its lease holder publishes it (``agent.collectors.ras``): a text status every
    ``interval_s``, with a JSON status's communicator detail merged in every ``detail_every`` polls. Rendered by the
    demo's fake RAS server (``simulate.cluster``) for one block and parsed by the agent's parsers once; each block's
    communicators under its own ids, op counts advancing with the job."""

    def __init__(self, blocks: int) -> None:
        import types

        from ranksight.agent.collectors.ras.parse_json import parse_status_json
        from ranksight.agent.collectors.ras.parse_text import parse_status_text
        from ranksight.agent.collectors.ras.poll import merge_detail
        from ranksight.agent.collectors.settings import CollectorsSettings
        from ranksight.simulate.cluster import ras_status_json, ras_status_text
        from ranksight.simulate.inspector import JobSpec, comms

        self.cfg = CollectorsSettings().ras
        spec = JobSpec(nodes=BLOCK, gpus_per_node=GPUS, pp=2)
        phases = comms(spec)
        job: Any = types.SimpleNamespace(
            spec=spec, phases=phases, counts={c.comm_id: 1 for p in phases for c in p}
        )
        text = parse_status_text(ras_status_text(job, set()))
        totals = {"nodes": BLOCK * blocks, "processes": BLOCK * GPUS * blocks, "gpus": BLOCK * GPUS * blocks}
        self.text = replace(text, **totals)
        self.detail = replace(merge_detail(text, parse_status_json(ras_status_json(job, set()))), **totals)
        self.blocks = blocks
        self.polls = 0

    def templates(self, steps: int, max_payload: int) -> list[Template]:
        """The poll's records as the agent publishes them: in parts of at most half the server's max_payload."""
        from ranksight.agent.collectors.ras.parts import split_status
        from ranksight.schemas.records import RasRecord

        status = self.text
        if self.polls % self.cfg.detail_every == 0:
            communicators = [replace(c, **{"hash": f"{c.hash}{b:04x}",
                                                  "secondary_hash": f"{c.hash}{b:04x}:0x{c.size or 0:x}",
                                                  "op_counts": {op: n * steps for op, n in c.op_counts.items()}})
                             for b in range(self.blocks) for c in self.detail.communicators]  # fmt: skip
            status = replace(self.detail, **{"communicators": communicators})
        self.polls += 1
        record = RasRecord(job_id="bench-job", endpoint="localhost:28028", **msgspec.structs.asdict(status))
        parts = split_status(record, max_payload // 2, self.polls)
        return [pre_encode("ras", [part], self.cfg.ttl()) for part in parts]


async def publisher(
    url: str, played: tuple[int, dict[bool, list[NodeTemplate]], float], t0_us: int, first_block: int,
    last_block: int, blocks: int, nic_source: str, stats: Path,
) -> None:  # fmt: skip
    """Play blocks ``[first_block, last_block)`` of ``blocks`` in real time from ``t0_us`` until terminated."""
    import nats

    base_us, templates, rate = played
    shift = t0_us - base_us
    schedules = {
        slow: [inspector_schedule(node, shift) for node in nodes] for slow, nodes in templates.items()
    }
    gauges = gauge_templates(nic_source)
    ras = RasJob(blocks) if first_block == 0 else None
    nc = await nats.connect(url, pending_size=256 << 20)
    nodes = [SimulatedNode(b, i) for b in range(first_block, last_block) for i in range(BLOCK)]
    cursors = [0] * len(nodes)
    t0 = t0_us / US
    next_gauge = [[t0 + gauge_phase_s(k, interval) for interval, _ in gauges] for k in range(len(nodes))]
    # which of a gauge's envelopes each node sends next (each node at its own point of the NIC cycle)
    turns = [[k for _ in gauges] for k in range(len(nodes))]
    next_ras = t0
    sent_bytes = sent_msgs = ras_oversize = ras_parts = 0
    while True:
        now = time.time()
        now_us = int(now * US)
        out: list[tuple[str, bytes, dict[str, str]]] = []
        for k, node in enumerate(nodes):
            block, index = divmod(first_block * BLOCK + k, BLOCK)
            schedule = schedules[block == 0][index]
            while cursors[k] < len(schedule) and schedule[cursors[k]][0] <= now_us:
                out.append(node.message(schedule[cursors[k]][1]))
                cursors[k] += 1
            due = next_gauge[k]
            for g, (interval, templates) in enumerate(gauges):
                if now >= due[g]:
                    out.append(node.message(templates[turns[k][g] % len(templates)]))
                    turns[k][g] += 1
                    due[g] += interval
        if ras is not None and now >= next_ras:  # node0000 holds the job's poll lease
            parts = ras.templates(int((now - t0) * rate) + 1, nc.max_payload)
            ras_parts = max(ras_parts, len(parts))
            for template in parts:
                message = nodes[0].message(template)
                if len(message[1]) <= nc.max_payload:
                    out.append(message)
                else:  # one part over the server's max_payload: the agent's publish fails the same way
                    ras_oversize = max(ras_oversize, len(message[1]))
            next_ras += ras.cfg.interval_s
        for subject, payload, headers in out:
            await nc.publish(subject, payload, headers=headers)
            sent_bytes += len(payload)
        sent_msgs += len(out)
        await nc.flush()
        await asyncio.to_thread(_write_stats, stats, f"{sent_msgs} {sent_bytes} {ras_oversize} {ras_parts}")
        await asyncio.sleep(max(0.0, TICK_S - (time.time() - now)))


def _write_stats(path: Path, text: str) -> None:
    """Replace the stats file at once: the measuring side reading it half-written counted a publisher as 0."""
    partial = path.with_suffix(".partial")
    partial.write_text(text)
    partial.replace(path)


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
    ras_oversize: int  # bytes of a RAS status the job's lease holder could not publish (0: none)
    ras_parts: int  # messages of the job's largest (detailed) RAS status, each under half the max_payload
    cpu_us_per_msg: (
        float  # the aggregator's CPU per message it committed in the window, whatever the machine's load
    )
    load: float  # the machine's 1-minute load average at the end of the window


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

    from ranksight.core.natsserver import NatsServer
    from ranksight.schemas.subjects import Subjects
    from ranksight.settings import load_settings

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
            t0_us = (int((time.time() + 6) * US) // window_us + 1) * window_us
            per_proc = -(-blocks // args.procs)
            stats = []
            for first in range(0, blocks, per_proc):
                stats.append(root / f"publisher{first}.txt")
                command = [sys.executable, __file__, "--publisher", server.url, str(template_file), str(t0_us),
                           str(first), str(min(blocks, first + per_proc)), str(blocks), args.nic, str(stats[-1])]  # fmt: skip
                children.append(_spawn(command, env, root / f"publisher{first}.log"))
            await asyncio.sleep(max(0.0, t0_us / US - time.time()) + args.warmup)
            lags: list[float] = []
            sent0 = _sent(stats)
            acked0 = (await js.consumer_info(cfg.stream, cfg.durable)).ack_floor.stream_seq
            started = time.time()
            usage_task = asyncio.create_task(measure(aggregator.pid, args.seconds))
            while not usage_task.done():
                lags.append(await _lag_s(js, cfg.stream, cfg.durable))
                await asyncio.sleep(1.0)
            usage = await usage_task
            elapsed = time.time() - started
            sent1 = _sent(stats)
            acked = (await js.consumer_info(cfg.stream, cfg.durable)).ack_floor.stream_seq - acked0
            load = os.getloadavg()[0]
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
                              alerts[0] - onset if alerts else None, sent1[2], sent1[3],
                              usage.cpu_share * elapsed / max(acked, 1) * US, load)  # fmt: skip
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


def _sent(stats: list[Path]) -> tuple[int, int, int, int]:
    """Messages and bytes the publishers sent so far, the largest RAS status they could not send (over max_payload)
    and the most parts a RAS status took."""
    msgs = size = oversize = parts = 0
    for path in stats:
        if path.exists() and path.read_text().strip():
            m, b, o, n = map(int, path.read_text().split())
            msgs, size, oversize, parts = msgs + m, size + b, max(oversize, o), max(parts, n)
    return msgs, size, oversize, parts


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
            f"{'nodes':>6} {'agg CPU':>8} {'peak RSS':>9} {'lag p50':>8} {'lag max':>8} {'wire':>10} {'msgs/s':>7} "
            f"{'alert':>8} {'CPU/msg':>8} {'needs':>6} {'load':>5}"
        )
        results = []
        for n in sizes:
            r = await run_size(n, Path(tmp.name), args)
            results.append(r)
            alert = f"{r.alert_s:.1f} s" if r.alert_s is not None else "none"
            print(f"{r.nodes:>6} {r.usage.cpu_share * 100:>7.0f}% {r.usage.peak_rss / MiB:>5.0f} MiB {r.lag_p50_s:>6.1f} s "
                  f"{r.lag_max_s:>6.1f} s {r.bytes_per_s / 1e6:>6.2f} MB/s {r.msgs_per_s:>7.0f} {alert:>8} "
                  f"{r.cpu_us_per_msg:>5.0f} us {r.cpu_us_per_msg * r.msgs_per_s / US:>5.2f} {r.load:>5.1f}", flush=True)  # fmt: skip
            if r.ras_oversize:
                print(f"        the job's RAS detail status ({r.ras_oversize / MiB:.1f} MiB, one part) is over the "
                      "server's max_payload: not published, as the agent's publish would fail", flush=True)  # fmt: skip
            else:
                print(f"        the job's RAS detail status: published in {r.ras_parts} part(s)", flush=True)
    print(
        "CPU/msg: the aggregator's CPU per message committed; needs: that times the messages/s offered, the cores it "
        "needs to follow them; load: the machine's 1-minute load average (2 cores, shared)"
    )
    print(f"targets at 1024 nodes: lag <= {TARGETS['lag_s']:g} s, aggregator <= {TARGETS['cpu']:g} core and "
          f"<= {TARGETS['rss'] / MiB:.0f} MiB, alert <= {TARGETS['alert_s']:g} s after onset")  # fmt: skip
    write_scale_result(results, args)


def write_scale_result(results: list[SizeResult], args: argparse.Namespace) -> None:
    """``benchmarks/results/scale.json``: each size's figures, the targets on the 1024-node one (every RAS status
    published: none over the max_payload)."""
    from benchmarks.results import write_result

    figures: dict[str, Any] = {}
    targets: dict[str, Any] = {}
    for r in results:
        n = f"n{r.nodes}_"
        figures |= {f"{n}aggregator_cpu_share": round(r.usage.cpu_share, 3),
                    f"{n}aggregator_peak_rss_mib": round(r.usage.peak_rss / MiB, 1),
                    f"{n}lag_p50_s": round(r.lag_p50_s, 2), f"{n}lag_max_s": round(r.lag_max_s, 2),
                    f"{n}wire_mb_per_s": round(r.bytes_per_s / 1e6, 3), f"{n}msgs_per_s": round(r.msgs_per_s),
                    f"{n}alert_after_onset_s": round(r.alert_s, 1) if r.alert_s is not None else "none",
                    f"{n}ras_status_parts": r.ras_parts, f"{n}ras_unpublished_bytes": r.ras_oversize,
                    f"{n}load_average_1m": round(r.load, 2)}  # fmt: skip
        if r.nodes == 1024:
            targets |= {f"{n}lag_max_s": {"max": TARGETS["lag_s"]}, f"{n}aggregator_cpu_share": {"max": TARGETS["cpu"]},
                        f"{n}aggregator_peak_rss_mib": {"max": TARGETS["rss"] / MiB},
                        f"{n}alert_after_onset_s": {"max": TARGETS["alert_s"]}, f"{n}ras_unpublished_bytes": {"max": 0}}  # fmt: skip
    command = (f"python benchmarks/scale.py --nodes {args.nodes} --seconds {args.seconds:g} --warmup {args.warmup:g} "
               f"--onset {args.onset:g}")  # fmt: skip
    print(f"wrote {write_result('scale', figures, targets, command)}")


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
    parser.add_argument("--nic", choices=("ethtool", "sysfs"), default="ethtool",
                        help="each node's NIC sample: 8 ionic ports of ethtool counters, or 8 mlx5 sysfs ports")  # fmt: skip
    parser.add_argument("--publisher", nargs=8, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.publisher:
        url, template, t0, first, last, blocks, nic_source, stats_file = options.publisher
        played = pickle.loads(Path(template).read_bytes())
        asyncio.run(
            publisher(url, played, int(t0), int(first), int(last), int(blocks), nic_source, Path(stats_file))
        )
    else:
        asyncio.run(main(options))
