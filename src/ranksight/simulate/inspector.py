"""A simulated multi-node training job that writes Inspector dump files (used by tests, benchmarks and the demo).

Faithful to: the v4.0 line format of the NCCL/RCCL Inspector plugin (compact JSON, 6-decimal doubles, the bandwidth
formula, ``<hostname>-pid<pid>.log`` files) as captured in ``fixtures/inspector``; both capture models (ring: every op,
``comm_name`` in the header, Send/Recv as ``p2p_perf``, nothing under its minimum size; sampled: one slot per comm
holding the last op completed of any type, written at a dump tick when an op completed since the last, so ``coll_sn``
has gaps, and no Send/Recv, each process's dump thread ticking at its own phase), ``coll_sn`` counted per comm and
collective type from 0; and the collective timing model of design §6: ranks arrive at their own times, everyone
finishes at the last arrival plus the transfer time set by the slowest participant, and each rank's exec time is its
own wait plus that transfer. The same job's operations, before any capture, are :func:`job_ops`: what
:mod:`ranksight.simulate.plugin_job` hands the real plugin.

Layouts. ``dense``: ``tp`` comms inside a node (AllReduce), ``dp`` comms across nodes of the same pipeline stage
(ReduceScatter), ``pp`` comms across the stages of one block of nodes (AllGather). ``moe``: ``tp`` inside a node,
``ep`` expert-parallel groups of ``ep_nodes`` neighbouring nodes (AllGather), ``edp`` expert-data-parallel groups strided
across nodes (ReduceScatter), ``dp`` across every node (AllReduce); one comm per GPU index for the cross-node ones. A
global barrier at each step end in both. ``hybrid`` (:func:`_hybrid`): several collective types and sizes per
communicator, PP Send/Recv between neighbouring nodes, EP and DP across node subsets, a DP bucket under 8 KiB.

The truth of a run (:func:`truth`) is derived from the spec alone; the analysis must never read it.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, NamedTuple

from ranksight.agent.collectors.inspector.summary import Summarizer
from ranksight.formats.inspector import bandwidths_gbs
from ranksight.schemas.records import InspectorRecord, InspectorSummaryRecord

FaultKind = Literal["gpu", "node", "nic", "hang"]


@dataclass(frozen=True)
class Fault:
    """``gpu``: one GPU computes ``factor`` x slower; ``node``: every GPU of a node; ``nic``: the node's network is
    ``factor`` x slower (its inter-node bandwidth at 1/factor); ``hang``: the GPU's process stops at the start of
    ``start_step`` (it enters no further collective and its plugin dumps nothing more, so operations it completed
    after its last dump tick are never written) while every rank that needs it blocks in the collective it waits in,
    writing nothing after its last completed one; the job never ends. ``start_step`` > 0 makes it late-onset,
    ``end_step`` ends it; ``probability`` < 1 makes it random per step; ``burst_steps`` of every ``every_steps`` make it
    intermittent in bursts."""

    kind: FaultKind
    node: int
    gpu: int = 0
    factor: float = 1.5
    start_step: int = 0
    probability: float = 1.0
    end_step: int | None = None
    burst_steps: int = 0
    every_steps: int = 0

    @property
    def duty(self) -> float:
        """Share of the steps (from onset) the fault is active."""
        burst = self.burst_steps / self.every_steps if self.every_steps else 1.0
        return burst * min(1.0, self.probability)


@dataclass
class JobSpec:
    nodes: int = 8
    gpus_per_node: int = 8
    pp: int = 2  # nodes per pipeline block; dp comms span nodes // pp nodes
    layout: Literal["dense", "moe", "hybrid"] = "dense"
    ep_nodes: int = 2  # moe: nodes per expert-parallel group
    gpu_speed_noise: float = (
        0.0  # healthy per-GPU speed spread: each GPU is 1 + U(0, this) slower for the whole run
    )
    steps: int = 200
    compute_ms: float = 40.0
    noise: float = 0.03  # lognormal sigma of each rank's compute time
    spike_prob: float = 0.0  # per rank and step: a random hiccup
    spike_factor: float = 2.0
    warmup_steps: int = 0
    warmup_noise: float = 0.5
    capture: Literal["ring", "sampled"] = "ring"
    dump_interval_ms: float = 100.0
    intra_gbs: float = 200.0
    inter_gbs: float = 40.0
    seed: int = 0
    start_us: int = 1_750_000_000_000_000
    hostname_prefix: str = "node"
    pid_base: int = 40000
    run_tag: str = ""  # a restarted job: new communicator ids (with a new pid_base, new processes)
    named_comms: bool = True  # communicators created with a name (the ring model writes it; else "unknown")
    # ring model: the 2.30 plugin records no op smaller (its NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES default)
    min_size_bytes: int = 8192
    faults: list[Fault] = field(default_factory=list)

    def hostname(self, node: int) -> str:
        return f"{self.hostname_prefix}{node:03d}"

    def pid(self, node: int, gpu: int) -> int:
        return self.pid_base + node * 97 + gpu


P2P_OPS = frozenset({"Send", "Recv"})


@dataclass(frozen=True)
class Comm:
    """One operation on a communicator in a phase of a step. Several may share a communicator (the same ``name``) with
    other collective types and sizes. ``op`` ``Send``: its rank 0 sends to rank 1 (which records a ``Recv``); ``Recv``:
    the other way."""

    name: str
    op: str
    size: int
    members: tuple[tuple[int, int], ...]  # (node, gpu) by rank
    run_tag: str = ""

    @property
    def comm_id(self) -> str:
        """The communicator's hash as the plugin prints it (``0x%lx``)."""
        return f"{int(hashlib.sha256((self.run_tag + self.name).encode()).hexdigest()[:14], 16):#x}"

    def func(self, rank: int) -> str:
        """The operation rank ``rank`` records: a Send's peer records a Recv."""
        if self.op not in P2P_OPS or rank == 0:
            return self.op
        return "Recv" if self.op == "Send" else "Send"


class RankOp(NamedTuple):
    """One operation of one rank as the plugin is told of it: ``end_us`` is its kernel's end (µs of job time),
    ``exec_us`` its GPU time; ``sn`` counts per communicator and collective type from 1 (NCCL's own counter is one
    less); ``peer`` is the other rank of a Send/Recv."""

    comm_hash: str
    rank: int
    func: str
    size: int
    sn: int
    exec_us: int
    end_us: int
    peer: int


def comms_of(spec: JobSpec) -> list[Comm]:
    """Each communicator of the job once (its first operation)."""
    seen: dict[str, Comm] = {}
    for phase in comms(spec):
        for comm in phase:
            seen.setdefault(comm.comm_id, comm)
    return list(seen.values())


def comms(spec: JobSpec) -> list[list[Comm]]:
    """The comms of each phase of a step, in order."""
    g, tag = range(spec.gpus_per_node), spec.run_tag
    if spec.layout == "hybrid":
        return _hybrid(spec)
    if spec.layout == "moe":
        e = spec.ep_nodes
        tp = [
            Comm(f"tp-n{n}", "AllReduce", 32 << 20, tuple((n, i) for i in g), tag) for n in range(spec.nodes)
        ]
        ep = [
            Comm(f"ep-b{b}-g{i}", "AllGather", 64 << 20, tuple((b * e + s, i) for s in range(e)), tag)
            for b in range(spec.nodes // e) for i in g
        ]  # fmt: skip
        edp = [
            Comm(f"edp-s{s}-g{i}", "ReduceScatter", 32 << 20, tuple((n, i) for n in range(s, spec.nodes, e)), tag)
            for s in range(e) for i in g
        ]  # fmt: skip
        dp = [
            Comm(f"dp-g{i}", "AllReduce", 64 << 20, tuple((n, i) for n in range(spec.nodes)), tag) for i in g
        ]
        return [tp, ep, edp, dp]
    tp = [Comm(f"tp-n{n}", "AllReduce", 32 << 20, tuple((n, i) for i in g), tag) for n in range(spec.nodes)]
    dp = [
        Comm(f"dp-s{s}-g{i}", "ReduceScatter", 8 << 20, tuple((n, i) for n in range(s, spec.nodes, spec.pp)), tag)
        for s in range(spec.pp) for i in g
    ]  # fmt: skip
    pp = [
        Comm(f"pp-b{b}-g{i}", "AllGather", 2 << 20, tuple((b * spec.pp + s, i) for s in range(spec.pp)), tag)
        for b in range(spec.nodes // spec.pp) for i in g
    ]  # fmt: skip
    return [tp, dp, pp]


def _hybrid(spec: JobSpec) -> list[list[Comm]]:
    """TP inside each node (AllGather 8 MiB, AllReduce 16 MiB and 4 MiB), PP Send/Recv between the neighbouring
    stages of a block of ``pp`` nodes (activations forward, gradients back, 4 MiB), EP AllGather over ``ep_nodes``
    neighbouring nodes, and DP gradient buckets over the nodes of one stage (ReduceScatter of 25 MiB, 10 MiB and
    4 KiB: the last one under the 2.30 plugin's size filter), then the DP parameter AllGather."""
    g, tag, nodes = range(spec.gpus_per_node), spec.run_tag, range(spec.nodes)

    def tp(op: str, size: int) -> list[Comm]:
        return [Comm(f"tp-n{n}", op, size, tuple((n, i) for i in g), tag) for n in nodes]

    def pp(op: str) -> list[Comm]:
        return [Comm(f"pp-n{n}-g{i}", op, 4 << 20, ((n, i), (n + 1, i)), tag)
                for n in nodes if n % spec.pp < spec.pp - 1 and n + 1 < spec.nodes for i in g]  # fmt: skip

    def ep() -> list[Comm]:
        e = spec.ep_nodes
        return [Comm(f"ep-b{b}-g{i}", "AllGather", 16 << 20, tuple((b * e + s, i) for s in range(e)), tag)
                for b in range(spec.nodes // e) for i in g]  # fmt: skip

    def dp(op: str, size: int) -> list[Comm]:
        return [Comm(f"dp-s{s}-g{i}", op, size, tuple((n, i) for n in range(s, spec.nodes, spec.pp)), tag)
                for s in range(spec.pp) for i in g]  # fmt: skip

    return [tp("AllGather", 8 << 20), pp("Send"), tp("AllReduce", 16 << 20), ep(), pp("Recv"),
            tp("AllReduce", 4 << 20), dp("ReduceScatter", 25 << 20), dp("ReduceScatter", 10 << 20),
            dp("ReduceScatter", 4 << 10), dp("AllGather", 8 << 20)]  # fmt: skip


def _bus_bytes(op: str, size: int, n: int) -> float:
    """Bytes each rank moves on the bus: busbw x time, by the plugin's own formula."""
    one_second = bandwidths_gbs(op, n, size, 1e6)
    return one_second[1] * 1e9 if one_second else 0.0


@dataclass
class _Line:
    dump_ts_us: int
    text: str


def format_line(spec: JobSpec, comm: Comm, rank: int, sn: int, exec_us: int, dump_ts_us: int) -> str:
    """One compact Inspector v4.0 line, as the plugin writes it (``p2p_perf`` for a Send/Recv, ring model only)."""
    node, gpu = comm.members[rank]
    n = len(comm.members)
    op = comm.func(rank)
    if spec.capture == "ring":
        name = f',"comm_name":"{comm.name if spec.named_comms else "unknown"}"'
    else:
        name = ""
    nnodes = len({m[0] for m in comm.members})
    head = (
        f'{{"header":{{"id":"{comm.comm_id}"{name},"rank":{rank},"n_ranks":{n},"nnodes":{nnodes}}},'
        f'"metadata":{{"inspector_output_format_version":"v4.0","git_rev":"sim","rec_mechanism":'
        f'"nccl_profiler_interface","dump_timestamp_us":{dump_ts_us},"hostname":"{spec.hostname(node)}",'
        f'"pid":{spec.pid(node, gpu)}}},'
    )
    if op in P2P_OPS:
        algbw, busbw = bandwidths_gbs(op, 2, comm.size, exec_us) or (0.0, 0.0)
        return head + (
            f'"p2p_perf":{{"p2p":"{op}","p2p_sn":{sn},"p2p_peer":{1 - rank},"p2p_msg_size_bytes":{comm.size},'
            f'"p2p_exec_time_us":{exec_us},"p2p_timing_source":"kernel_gpu","p2p_algobw_gbs":{algbw:.6f},'
            f'"p2p_busbw_gbs":{busbw:.6f}}}}}'
        )
    algbw, busbw = bandwidths_gbs(op, n, comm.size, exec_us) or (0.0, 0.0)
    return head + (
        f'"coll_perf":{{"coll":"{op}","coll_sn":{sn},'
        f'"coll_msg_size_bytes":{comm.size},"coll_exec_time_us":{exec_us},"coll_timing_source":"kernel_gpu",'
        f'"coll_algobw_gbs":{algbw:.6f},"coll_busbw_gbs":{busbw:.6f}}}}}'
    )


def simulate(spec: JobSpec) -> dict[tuple[str, int], list[str]]:
    """Run the job; return the lines of each process ``(hostname, pid)`` in file order."""
    return {proc: [text for _, text in lines] for proc, lines in simulate_timed(spec).items()}


def simulate_timed(spec: JobSpec) -> dict[tuple[str, int], list[tuple[int, str]]]:
    """Run the job; return ``(dump timestamp µs, line)`` of each process ``(hostname, pid)`` in file order."""
    return run_job(spec)[0]


@dataclass
class _JobRun:
    """What happened in a job, before any capture model: every rank's operations in order (each with the comm it ran
    on, its rank there, NCCL's sequence number, its exec time and its end in µs since the start), the start of every
    step (µs, absolute), and for a hang when each hung process stopped and when the job's last rank stopped."""

    ops: dict[tuple[int, int], list[tuple[Comm, int, int, int, float]]]
    step_us: list[int]
    frozen_at: dict[tuple[int, int], float]
    end: float
    blocked: bool
    phase_us: dict[tuple[int, int], float]


def _run(spec: JobSpec) -> _JobRun:
    rng = random.Random(spec.seed)
    phases = comms(spec)
    ranks = [(n, i) for n in range(spec.nodes) for i in range(spec.gpus_per_node)]
    tick = spec.dump_interval_ms * 1000
    ops: dict[tuple[int, int], list[tuple[Comm, int, int, int, float]]] = defaultdict(list)
    # NCCL counts collectives per communicator and type from 0; the 2.30 plugin counts P2P per communicator from 1
    counters: dict[tuple[str, str, int], int] = defaultdict(int)
    # each process's dump thread runs on its own timer: ranks sample different operations
    phase_us = {r: rng.random() * tick for r in ranks}
    now = 0.0  # µs since start
    start = {
        r: 0.0 for r in ranks
    }  # each rank starts its next step when its last collective ends: no hidden barrier
    speed = {r: 1 + spec.gpu_speed_noise * rng.random() for r in ranks}
    step_us = []
    frozen_at: dict[tuple[int, int], float] = {}  # hung ranks: when their process stopped (µs since start)
    blocked: set[tuple[int, int]] = set()  # hung ranks and every rank waiting for one
    for step in range(spec.steps):
        step_us.append(spec.start_us + int(now))
        for f in spec.faults:
            if f.kind == "hang" and f.start_step == step:
                frozen_at[(f.node, f.gpu)] = start[(f.node, f.gpu)]
                blocked.add((f.node, f.gpu))
        slow = {r: speed[r] * _compute_factor(spec, r, step, rng) for r in ranks}
        nic = {n: _nic_factor(spec, n, step, rng) for n in range(spec.nodes)}
        sigma = spec.warmup_noise if step < spec.warmup_steps else spec.noise
        ready = {r: start[r] + spec.compute_ms * 1000 * slow[r] * rng.lognormvariate(0, sigma)
                 for r in ranks if r not in blocked}  # fmt: skip
        for phase in phases:
            finished: dict[tuple[int, int], float] = {}
            for comm in phase:
                if blocked.intersection(comm.members):
                    blocked.update(comm.members)  # its collective never completes: every member waits in it
                    continue
                arrivals = [ready[m] for m in comm.members]
                nodes = {m[0] for m in comm.members}
                bw = spec.intra_gbs if len(nodes) == 1 else spec.inter_gbs / max(nic[n] for n in nodes)
                transfer = _bus_bytes(comm.op, comm.size, len(comm.members)) / (bw * 1e3)  # µs
                end = max(arrivals) + transfer * rng.lognormvariate(0, 0.02)
                for rank, (member, arrival) in enumerate(zip(comm.members, arrivals, strict=True)):
                    p2p = comm.op in P2P_OPS
                    counter = (comm.comm_id, "p2p" if p2p else comm.op, rank)
                    if p2p:
                        counters[counter] += 1
                    ops[member].append((comm, rank, counters[counter], max(1, round(end - arrival)), end))
                    if not p2p:
                        counters[counter] += 1
                    finished[member] = end
            # a short compute gap before the next phase, scaled by the rank's speed; ranks not in it wait on
            gap = {r: 0.05 * spec.compute_ms * 1000 * slow[r] for r in finished}
            ready = {
                r: finished[r] + gap[r] if r in finished else at
                for r, at in ready.items()
                if r not in blocked
            }
        start = ready
        if not ready:
            break  # every rank waits for a hung one
        now = max(ready.values())
    return _JobRun(ops, step_us, frozen_at, now, bool(blocked), phase_us)


def _recorded(spec: JobSpec, comm: Comm, capture: str) -> bool:
    """Whether the plugin records this op at all: the sampled model no Send/Recv, the ring model nothing smaller
    than its minimum size."""
    if capture == "sampled":
        return comm.op not in P2P_OPS
    return comm.size >= spec.min_size_bytes


def job_ops(spec: JobSpec) -> dict[tuple[int, int], list[RankOp]]:
    """Every rank's operations as NCCL would hand them to the profiler plugin (every op, recorded or not: the plugin
    filters), in order; a hung rank's stop at its last op. ``end_us`` is absolute (``spec.start_us`` + job time)."""
    run = _run(spec)
    out: dict[tuple[int, int], list[RankOp]] = {}
    for member, mine in run.ops.items():
        stopped = run.frozen_at.get(member, math.inf)
        out[member] = [
            RankOp(comm.comm_id, rank, comm.func(rank), comm.size, sn, exec_us, spec.start_us + round(end), 1 - rank)
            for comm, rank, sn, exec_us, end in mine if end <= stopped
        ]  # fmt: skip
    return out


def step_starts(spec: JobSpec) -> list[int]:
    """The start (µs, absolute) of every step of the job."""
    return _run(spec).step_us


def run_job(spec: JobSpec) -> tuple[dict[tuple[str, int], list[tuple[int, str]]], list[int]]:
    """Run the job; the timed lines of :func:`simulate_timed` and the start time (µs) of every step."""
    run = _run(spec)
    tick = spec.dump_interval_ms * 1000
    out: dict[tuple[str, int], list[_Line]] = defaultdict(list)
    if spec.capture == "ring":
        for member, mine in run.ops.items():
            for comm, rank, sn, exec_us, end in mine:
                if _recorded(spec, comm, "ring"):
                    dump = spec.start_us + int(math.ceil(end / tick) * tick)
                    out[_proc(spec, member)].append(
                        _Line(dump, format_line(spec, comm, rank, sn, exec_us, dump))
                    )
    else:
        # the waiting ranks' dump threads still write what they completed, up to their last op (long steps complete
        # some after the last step's start)
        last = max(op[4] for mine in run.ops.values() for op in mine) + 2 * tick if run.blocked else run.end
        _dump_sampled(spec, run, tick, last, out)
    for member, at in run.frozen_at.items():
        stopped = spec.start_us + at
        out[_proc(spec, member)] = [line for line in out[_proc(spec, member)] if line.dump_ts_us <= stopped]
    timed = {
        proc: [(line.dump_ts_us, line.text) for line in sorted(lines, key=lambda x: x.dump_ts_us)]
        for proc, lines in out.items()
    }
    return timed, run.step_us


def _dump_sampled(
    spec: JobSpec, run: _JobRun, tick: float, last: float, out: dict[tuple[str, int], list[_Line]]
) -> None:
    """The 2.28-2.29 plugin keeps one slot per communicator: the last completed collective of any type. Each
    process's dump thread writes the slot of each communicator that completed one since its last tick."""
    for member, mine in run.ops.items():
        recorded = [op for op in mine if _recorded(spec, op[0], "sampled")]
        i, at = 0, tick - run.phase_us[member]
        slot: dict[str, tuple[Comm, int, int, int, float]] = {}
        while at <= last - run.phase_us[member]:
            while i < len(recorded) and recorded[i][4] <= at:
                slot[recorded[i][0].comm_id] = recorded[i]
                i += 1
            dump = spec.start_us + int(at)
            for comm, rank, sn, exec_us, _ in slot.values():
                out[_proc(spec, member)].append(_Line(dump, format_line(spec, comm, rank, sn, exec_us, dump)))
            slot.clear()
            at += tick


def _proc(spec: JobSpec, member: tuple[int, int]) -> tuple[str, int]:
    return spec.hostname(member[0]), spec.pid(*member)


def _active(fault: Fault, step: int, rng: random.Random) -> bool:
    if step < fault.start_step or (fault.end_step is not None and step >= fault.end_step):
        return False
    if fault.every_steps and (step - fault.start_step) % fault.every_steps >= fault.burst_steps:
        return False
    return fault.probability >= 1 or rng.random() < fault.probability


def _compute_factor(spec: JobSpec, rank: tuple[int, int], step: int, rng: random.Random) -> float:
    factor = 1.0
    for f in spec.faults:
        hit = (f.kind == "gpu" and (f.node, f.gpu) == rank) or (f.kind == "node" and f.node == rank[0])
        if hit and _active(f, step, rng):
            factor *= f.factor
    if spec.spike_prob and rng.random() < spec.spike_prob:
        factor *= spec.spike_factor
    return factor


def _nic_factor(spec: JobSpec, node: int, step: int, rng: random.Random) -> float:
    factor = 1.0
    for f in spec.faults:
        if f.kind == "nic" and f.node == node and _active(f, step, rng):
            factor *= f.factor
    return factor


def write_job(spec: JobSpec, directory: Path) -> list[Path]:
    """Simulate and write one ``<hostname>-pid<pid>.log`` per process; returns the files."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for (host, pid), lines in simulate(spec).items():
        path = directory / f"{host}-pid{pid}.log"
        path.write_text("".join(line + "\n" for line in lines))
        paths.append(path)
    return sorted(paths)


def summarize(
    records: list[InspectorRecord], window_s: float = 5.0, slice_s: float = 0.5, publish_s: float = 1.0
) -> list[tuple[int, InspectorSummaryRecord]]:
    """What the nodes' agents publish for these records (in dump-time order), through the agent's own summarizer: each
    node's agent reads a record at its dump time and publishes the parts of what it read every ``publish_s``, the
    nodes' clocks spread over that period. Each summary with the time (µs) it is published, in that order."""
    by_host: dict[str, list[InspectorRecord]] = defaultdict(list)
    for rec in records:
        by_host[rec.hostname].append(rec)
    publish_us = round(publish_s * 1e6)
    out: list[tuple[int, InspectorSummaryRecord]] = []
    for i, host in enumerate(sorted(by_host)):
        summarizer, mine = Summarizer(window_s, slice_s, publish_s), by_host[host]
        phase = i * publish_us // len(by_host)
        first = mine[0].dump_ts_us
        tick = first - (first - phase) % publish_us + publish_us  # the agent's first publication after it
        for rec in mine:
            while rec.dump_ts_us > tick:
                out += [(tick, x) for x in summarizer.take(tick)]
                tick += publish_us
            summarizer.add(rec)
        out += [(tick, x) for x in summarizer.take()]
    out.sort(key=lambda x: x[0])
    return out
