"""Fault classes on job shapes real jobs have, to run through the real Inspector plugin
(:mod:`ranksight.simulate.plugin_job`) or the pure-Python simulator: the ``hybrid`` layout (TP inside a node, PP
Send/Recv between nodes, EP and DP across node subsets, several collective types and sizes per communicator, gradient
buckets of different sizes), steps from 50 ms to 2 s, noisy healthy jobs with one-step hiccups.

A job is long enough to judge at its dump interval: ~40 s past the onset in the ring model, ~130 s in the sampled one
(a weak straggler shows only in the statistics of many single-slot samples). The truth comes from the spec alone.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from ranksight.simulate.inspector import Fault, JobSpec

Capture = Literal["ring", "sampled"]
STEP_MS = (50.0, 120.0, 400.0, 2000.0)  # a seed's step length: (seed - 1) % 4
ONSET_S = 8.0
LATE_ONSET_S = 25.0
# how long a job runs past its faults' onset: sampled, long enough for the 48 ticks a weak straggler needs and half
# a horizon more to confirm it (130 s at 1-2.5 s dumps, beyond in proportion: 260 s at 5 s)
PAST_ONSET_S = {"ring": 40.0, "sampled": 130.0}
SAMPLED_TICKS_PAST_ONSET = 52
NODES, GPUS = 4, 4


@dataclass(frozen=True)
class Truth:
    """A fault of the job: a process ``(node, gpu)`` or a whole node (``gpu`` None)."""

    kind: Literal["compute", "communication"]
    node: int
    gpu: int | None
    factor: float  # compute: its slowdown while slow; communication: of the node's inter-node transfers
    duty: float  # share of the steps from onset the fault is active
    onset_step: int
    burst_steps: int  # slow in bursts of this many steps of every ``every_steps`` (0: not in bursts)
    every_steps: int

    @property
    def expected_slowdown(self) -> float:
        """The average slowdown over the fault's time."""
        return 1 + self.duty * (self.factor - 1)


def truth(spec: JobSpec) -> list[Truth]:
    out = []
    for f in spec.faults:
        kind: Literal["compute", "communication"] = "communication" if f.kind == "nic" else "compute"
        gpu = f.gpu if f.kind == "gpu" else None
        out.append(Truth(kind, f.node, gpu, f.factor, f.duty, f.start_step, f.burst_steps, f.every_steps))
    return out


def step_ms(seed: int) -> float:
    return STEP_MS[(seed - 1) % len(STEP_MS)]


def _base(capture: Capture, seed: int, dump_ms: float, onset_s: float = ONSET_S, **kwargs: object) -> JobSpec:
    """A noisy healthy hybrid job, 4 nodes x 4 GPUs: 2.5 % step noise, 1-2.5 % per-GPU speed spread, rare hiccups.
    Compute is ~90 % of a step (before the first collective and in the gaps between them), collectives the rest."""
    rng = random.Random(seed * 7919)
    step = step_ms(seed)
    past_s = PAST_ONSET_S[capture]
    if capture == "sampled":
        past_s = max(past_s, SAMPLED_TICKS_PAST_ONSET * dump_ms / 1000)
    steps = round((onset_s + past_s) * 1000 / step)
    base: dict[str, object] = dict(
        nodes=NODES, gpus_per_node=GPUS, pp=2, ep_nodes=2, layout="hybrid", steps=steps, compute_ms=0.6 * step,
        capture=capture, seed=seed, dump_interval_ms=dump_ms, noise=0.025, gpu_speed_noise=rng.uniform(0.01, 0.025),
        spike_prob=0.002, spike_factor=2.0, warmup_steps=min(10, steps // 10), warmup_noise=0.3,
        intra_gbs=200.0, inter_gbs=40.0,
    )  # fmt: skip
    base.update(kwargs)
    return JobSpec(**base)  # type: ignore[arg-type]


def _onset(seed: int, onset_s: float = ONSET_S) -> int:
    return round(onset_s * 1000 / step_ms(seed))


def _gpu(seed: int) -> tuple[int, int]:
    rng = random.Random(seed)
    return rng.randrange(NODES), rng.randrange(GPUS)


def compute(factor: float) -> Callable[[Capture, int, float], JobSpec]:
    """One GPU computing ``factor`` x slower from the onset on."""

    def job(capture: Capture, seed: int, dump_ms: float) -> JobSpec:
        node, gpu = _gpu(seed)
        return _base(
            capture, seed, dump_ms, faults=[Fault("gpu", node, gpu, factor, start_step=_onset(seed))]
        )

    return job


def healthy(capture: Capture, seed: int, dump_ms: float) -> JobSpec:
    return _base(capture, seed, dump_ms)


def noisy_healthy(capture: Capture, seed: int, dump_ms: float) -> JobSpec:
    """Healthy, noisier: 5 % step noise, up to 4 % per-GPU speed spread, a 3x hiccup in 1 % of rank-steps."""
    rng = random.Random(seed * 104729)
    return _base(capture, seed, dump_ms, noise=0.05, gpu_speed_noise=rng.uniform(0.02, 0.04), spike_prob=0.01,
                 spike_factor=3.0)  # fmt: skip


def slow_node(capture: Capture, seed: int, dump_ms: float) -> JobSpec:
    """Every GPU of one node 1.3x slower."""
    node = random.Random(seed).randrange(NODES)
    return _base(capture, seed, dump_ms, faults=[Fault("node", node, factor=1.3, start_step=_onset(seed))])


def nic(capture: Capture, seed: int, dump_ms: float) -> JobSpec:
    """One node's inter-node bandwidth at 0.4: its EP, DP and PP communicators transfer 2.5x slower."""
    node = random.Random(seed).randrange(NODES)
    return _base(capture, seed, dump_ms, faults=[Fault("nic", node, factor=2.5, start_step=_onset(seed))])


def intermittent(capture: Capture, seed: int, dump_ms: float) -> JobSpec:
    """1.5x slower in a random 15 % of steps."""
    node, gpu = _gpu(seed)
    return _base(capture, seed, dump_ms, faults=[
        Fault("gpu", node, gpu, 1.5, start_step=_onset(seed), probability=0.15)])  # fmt: skip


def bursty(capture: Capture, seed: int, dump_ms: float) -> JobSpec:
    """2x slower in bursts of ~4 s every ~20 s."""
    node, gpu = _gpu(seed)
    every = max(2, round(20_000 / step_ms(seed)))
    burst = max(1, round(4_000 / step_ms(seed)))
    return _base(capture, seed, dump_ms, faults=[
        Fault("gpu", node, gpu, 2.0, start_step=_onset(seed), burst_steps=burst, every_steps=every)])  # fmt: skip


def two_stragglers(capture: Capture, seed: int, dump_ms: float) -> JobSpec:
    rng = random.Random(seed)
    a, b = rng.sample(range(NODES), 2)
    return _base(capture, seed, dump_ms, faults=[
        Fault("gpu", a, rng.randrange(GPUS), 1.3, start_step=_onset(seed)),
        Fault("gpu", b, rng.randrange(GPUS), 1.5, start_step=_onset(seed)),
    ])  # fmt: skip


def late_onset(capture: Capture, seed: int, dump_ms: float) -> JobSpec:
    """1.3x from ~25 s on."""
    node, gpu = _gpu(seed)
    return _base(capture, seed, dump_ms, onset_s=LATE_ONSET_S, faults=[
        Fault("gpu", node, gpu, 1.3, start_step=_onset(seed, LATE_ONSET_S))])  # fmt: skip


CLASSES: dict[str, Callable[[Capture, int, float], JobSpec]] = {
    "compute_1.1": compute(1.1),
    "compute_1.2": compute(1.2),
    "compute_1.5": compute(1.5),
    "compute_2.0": compute(2.0),
    "slow_node": slow_node,
    "nic": nic,
    "intermittent": intermittent,
    "bursty": bursty,
    "two_stragglers": two_stragglers,
    "late_onset": late_onset,
    "healthy": healthy,
    "noisy_healthy": noisy_healthy,
}
