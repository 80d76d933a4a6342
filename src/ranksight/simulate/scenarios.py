"""Fault classes for the diagnosis benchmark and tests: one simulated job per (class, capture model, seed), with the
truth alongside. The truth comes from the spec only; the engine sees nothing but the Inspector lines."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from ranksight.simulate.inspector import Fault, JobSpec

Capture = Literal["ring", "sampled"]
ONSET_STEP = 80  # faults start here (~8 s in): the online time-to-alert is measured from it


@dataclass(frozen=True)
class Truth:
    kind: Literal["compute", "communication", "hang"]
    hostname: str
    pid: int | None  # None: the whole node
    factor: float  # compute: the slowdown of its compute while slow; communication: of the NIC's transfers; hang: 1
    duty: float  # share of the steps from onset the fault is active
    onset_step: int
    burst_steps: int = 0  # intermittent in bursts: this many steps slow of every every_steps
    every_steps: int = 0


def truth(spec: JobSpec) -> list[Truth]:
    out = []
    for f in spec.faults:
        if f.kind == "nic":
            out.append(Truth("communication", spec.hostname(f.node), None, f.factor, f.duty, f.start_step))
        elif f.kind == "hang":
            out.append(Truth("hang", spec.hostname(f.node), spec.pid(f.node, f.gpu), 1.0, 1.0, f.start_step))
        else:
            pid = spec.pid(f.node, f.gpu) if f.kind == "gpu" else None
            out.append(
                Truth(
                    "compute",
                    spec.hostname(f.node),
                    pid,
                    f.factor,
                    f.duty,
                    f.start_step,
                    f.burst_steps,
                    f.every_steps,
                )
            )
    return out


def _base(capture: Capture, seed: int, **kwargs: object) -> JobSpec:
    """A noisy healthy MoE job: 4 nodes x 4 GPUs, ~40 ms steps for ~20 s; 1-2.5 % per-GPU speed spread, 2.5 % step
    noise, rare one-step hiccups."""
    rng = random.Random(seed * 7919)
    base: dict[str, object] = dict(
        nodes=4, gpus_per_node=4, layout="moe", steps=400, compute_ms=40.0, capture=capture, seed=seed,
        noise=0.025, gpu_speed_noise=rng.uniform(0.01, 0.025), spike_prob=0.002, spike_factor=2.0,
        warmup_steps=10, warmup_noise=0.3,
    )  # fmt: skip
    base.update(kwargs)
    return JobSpec(**base)  # type: ignore[arg-type]


def _gpu(rng: random.Random, nodes: int = 4, gpus: int = 4) -> tuple[int, int]:
    return rng.randrange(nodes), rng.randrange(gpus)


def healthy(capture: Capture, seed: int) -> JobSpec:
    return _base(capture, seed)


def straggler(capture: Capture, seed: int) -> JobSpec:
    rng = random.Random(seed)
    node, gpu = _gpu(rng)
    factor = [1.1, 1.2, 1.5, 2.0][seed % 4]
    return _base(capture, seed, faults=[Fault("gpu", node, gpu, factor, start_step=ONSET_STEP)])


def compute(factor: float) -> Callable[[Capture, int], JobSpec]:
    """One GPU computing ``factor`` x slower from the onset on."""

    def job(capture: Capture, seed: int) -> JobSpec:
        node, gpu = _gpu(random.Random(seed))
        return _base(capture, seed, faults=[Fault("gpu", node, gpu, factor, start_step=ONSET_STEP)])

    return job


def noisy_healthy(capture: Capture, seed: int) -> JobSpec:
    """Healthy, but noisier: 5 % step noise, up to 4 % per-GPU speed spread, a 3x hiccup every ~100 rank-steps."""
    rng = random.Random(seed * 104729)
    return _base(capture, seed, noise=0.05, gpu_speed_noise=rng.uniform(0.02, 0.04), spike_prob=0.01,
                 spike_factor=3.0)  # fmt: skip


def bursty(capture: Capture, seed: int) -> JobSpec:
    """2x slower on 16 of every 80 steps: bursts of ~0.7 s every ~3.5 s."""
    node, gpu = _gpu(random.Random(seed))
    return _base(capture, seed, faults=[
        Fault("gpu", node, gpu, 2.0, start_step=ONSET_STEP, burst_steps=16, every_steps=80)])  # fmt: skip


def late_onset(capture: Capture, seed: int) -> JobSpec:
    rng = random.Random(seed)
    node, gpu = _gpu(rng)
    return _base(capture, seed, faults=[Fault("gpu", node, gpu, 1.3, start_step=ONSET_STEP + 150)])


def slow_node(capture: Capture, seed: int) -> JobSpec:
    rng = random.Random(seed)
    factor = rng.choice([1.15, 1.3, 1.5])
    return _base(
        capture, seed, faults=[Fault("node", rng.randrange(4), factor=factor, start_step=ONSET_STEP)]
    )


def nic(capture: Capture, seed: int) -> JobSpec:
    """One node's NIC at 40 % bandwidth: every cross-node comm through it transfers 2.5x slower."""
    rng = random.Random(seed)
    return _base(capture, seed, faults=[Fault("nic", rng.randrange(4), factor=2.5, start_step=ONSET_STEP)])


def intermittent(capture: Capture, seed: int) -> JobSpec:
    """Slow in bursts of 10 steps in every 40."""
    rng = random.Random(seed)
    node, gpu = _gpu(rng)
    factor = rng.choice([1.5, 2.0])
    return _base(capture, seed, faults=[
        Fault("gpu", node, gpu, factor, start_step=ONSET_STEP, burst_steps=10, every_steps=40)])  # fmt: skip


def two_stragglers(capture: Capture, seed: int) -> JobSpec:
    rng = random.Random(seed)
    a, b = rng.sample(range(4), 2)
    return _base(capture, seed, faults=[
        Fault("gpu", a, rng.randrange(4), 1.3, start_step=ONSET_STEP),
        Fault("gpu", b, rng.randrange(4), 1.5, start_step=ONSET_STEP),
    ])  # fmt: skip


def dense_straggler(capture: Capture, seed: int) -> JobSpec:
    """The tp/dp/pp layout with one straggler."""
    rng = random.Random(seed)
    node, gpu = _gpu(rng)
    return _base(capture, seed, layout="dense", faults=[Fault("gpu", node, gpu, 1.25, start_step=ONSET_STEP)])


def hang(capture: Capture, seed: int) -> JobSpec:
    """One rank's process stops at the start of a step; every rank then blocks waiting for it (the job never ends)."""
    rng = random.Random(seed)
    node, gpu = _gpu(rng)
    return _base(capture, seed, faults=[Fault("hang", node, gpu, start_step=ONSET_STEP + rng.randrange(40))])


CLASSES: dict[str, Callable[[Capture, int], JobSpec]] = {
    "healthy": healthy,
    "straggler": straggler,
    "late_onset": late_onset,
    "slow_node": slow_node,
    "nic": nic,
    "intermittent": intermittent,
    "two_stragglers": two_stragglers,
    "dense_straggler": dense_straggler,
    "hang": hang,
    "compute_1.1": compute(1.1),
    "compute_1.2": compute(1.2),
    "compute_1.5": compute(1.5),
    "compute_2.0": compute(2.0),
    "bursty": bursty,
    "noisy_healthy": noisy_healthy,
}
