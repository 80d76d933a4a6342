"""The straggler engine on simulated jobs: every fault kind found and attributed right, healthy noise finds nothing,
in both capture models. The jobs go through the real on-disk format (simulator -> files -> reader -> engine)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.collectors.inspector.dumps import DumpReader
from aggregator.analysis.stragglers import Analysis, StragglerParams, analyze_records
from ranksight.simulate.inspector import Fault, JobSpec, write_job

PARAMS = StragglerParams(window_s=2.0)
MODELS = ["ring", "sampled"]


def job(**kwargs: object) -> JobSpec:
    """8 nodes x 4 GPUs, 200 steps: enough windows to confirm, small enough for a shared CI machine."""
    return JobSpec(**{"gpus_per_node": 4, **kwargs})  # type: ignore[arg-type]


def run(tmp_path: Path, spec: JobSpec) -> Analysis:
    write_job(spec, tmp_path / "dump")
    reader = DumpReader(tmp_path / "dump")
    result = analyze_records(reader.records(), PARAMS)
    assert reader.bad_lines == 0 and result.bw_mismatches == 0
    assert result.capture_model == spec.capture
    return result


@pytest.mark.parametrize("capture", MODELS)
def test_healthy_job_with_heavy_noise_and_warmup_has_no_findings(tmp_path: Path, capture: str) -> None:
    spec = job(capture=capture, noise=0.1, spike_prob=0.02, warmup_steps=30, seed=7)
    result = run(tmp_path, spec)
    assert result.records > 10_000
    assert result.stragglers == []


@pytest.mark.parametrize("capture", MODELS)
@pytest.mark.parametrize("factor", [1.1, 2.0])
def test_one_slow_gpu_is_the_straggler_not_its_victims(tmp_path: Path, capture: str, factor: float) -> None:
    spec = job(capture=capture, faults=[Fault("gpu", node=3, gpu=1, factor=factor)])
    [finding] = run(tmp_path, spec).stragglers
    assert (finding.hostname, finding.pid, finding.kind) == ("node003", spec.pid(3, 1), "compute")
    assert finding.rank is not None and finding.comm is not None
    # the slowdown the rank costs the job (waits / step period): below the GPU's own factor, because with noise
    # the job would otherwise wait for the slowest healthy rank anyway
    assert 1 + (factor - 1) * 0.25 < finding.slowdown < 1 + (factor - 1) * 1.1
    assert finding.confidence >= 0.8


@pytest.mark.parametrize("capture", MODELS)
def test_slow_node_is_reported_once_as_a_node(tmp_path: Path, capture: str) -> None:
    spec = job(capture=capture, faults=[Fault("node", node=2, factor=1.5)])
    [finding] = run(tmp_path, spec).stragglers
    assert (finding.hostname, finding.pid, finding.kind, finding.rank) == ("node002", None, "compute", None)
    assert 1.2 < finding.slowdown < 1.6


@pytest.mark.parametrize("capture", MODELS)
def test_degraded_nic_is_communication_localized_to_its_node(tmp_path: Path, capture: str) -> None:
    spec = job(capture=capture, faults=[Fault("nic", node=5, factor=3.0)])
    [finding] = run(tmp_path, spec).stragglers
    assert (finding.hostname, finding.pid, finding.kind) == ("node005", None, "communication")
    assert 2.4 < finding.slowdown < 3.6


@pytest.mark.parametrize("capture", MODELS)
def test_intermittent_straggler_is_found(tmp_path: Path, capture: str) -> None:
    # 8 GPUs: with sampled records an intermittent straggler needs enough peers per comm to stand out
    spec = job(
        capture=capture, gpus_per_node=8, faults=[Fault("gpu", node=1, gpu=2, factor=1.5, probability=0.4)]
    )
    [finding] = run(tmp_path, spec).stragglers
    assert (finding.hostname, finding.pid, finding.kind) == ("node001", spec.pid(1, 2), "compute")


@pytest.mark.parametrize("capture", MODELS)
def test_late_onset_straggler_is_found_only_after_onset(tmp_path: Path, capture: str) -> None:
    spec = job(capture=capture, faults=[Fault("gpu", node=6, gpu=3, factor=1.5, start_step=120)])
    result = run(tmp_path, spec)
    [finding] = result.stragglers
    assert (finding.hostname, finding.pid) == ("node006", spec.pid(6, 3))
    assert finding.first_ts_us > spec.start_us + 120 * spec.compute_ms * 1000  # not before the fault began


def test_lowest_bandwidth_rank_is_a_victim(tmp_path: Path) -> None:
    """The naive answer is wrong: the straggler has the *highest* bandwidth of its communicators."""
    spec = job(faults=[Fault("gpu", node=3, gpu=1, factor=1.5)])
    write_job(spec, tmp_path / "d")
    records = list(DumpReader(tmp_path / "d").records())
    tp = [r for r in records if r.comm_name == "tp-n3" and r.busbw_gbs is not None]
    by_pid: dict[int, list[float]] = {}
    for r in tp:
        by_pid.setdefault(r.pid, []).append(r.busbw_gbs or 0.0)
    mean = {pid: sum(v) / len(v) for pid, v in by_pid.items()}
    assert max(mean, key=lambda p: mean[p]) == spec.pid(3, 1)
    [finding] = analyze_records(records, PARAMS).stragglers
    assert finding.pid == spec.pid(3, 1) != min(mean, key=lambda p: mean[p])
