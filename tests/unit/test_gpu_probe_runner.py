"""The probe subprocess protocol and its bounds, with the fake worker as a real subprocess."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from ranksight.agent.collectors.gpu_probe import outcome_records
from ranksight.agent.gpuprobe.runner import rss_bytes, run_probe, run_worker, worker_command
from ranksight.agent.gpuprobe.settings import GpuProbeSettings
from tests.gpuprobe_support import fake_command, probe_settings


def _alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting for its reaper)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


async def test_ok_run_reads_every_gpu(tmp_path: Path) -> None:
    outcome = await run_probe(probe_settings(tmp_path, "--gpus", "3", "--tflops", "650"))
    assert outcome.status == "ok", outcome.reason
    assert outcome.backend == "fake 1.0"
    assert [g.index for g in outcome.gpus] == [0, 1, 2]
    assert outcome.gpus[2].tflops_bf16 == 650
    records = outcome_records(outcome)
    assert [(r.index, r.status, r.backend) for r in records] == [(i, "ok", "fake 1.0") for i in range(3)]


async def test_unavailable_is_reported_with_reason(tmp_path: Path) -> None:
    outcome = await run_probe(probe_settings(tmp_path, "--mode", "unavailable"))
    assert (outcome.status, outcome.reason) == ("unavailable", "PyTorch is not installed (fake)")
    [record] = outcome_records(outcome)
    assert (record.index, record.status, record.reason) == (
        -1,
        "unavailable",
        "PyTorch is not installed (fake)",
    )


async def test_timeout_kills_worker_and_its_children_keeping_partial_results(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    started = time.monotonic()
    outcome = await run_worker(fake_command("--mode", "hang", "--pid-file", str(pid_file)), 1.5, 1 << 40)
    assert time.monotonic() - started < 8
    assert outcome.status == "error"
    assert outcome.reason is not None and outcome.reason.startswith("timed out after 1.5s")
    assert [g.index for g in outcome.gpus] == [0]  # what was measured before the hang is kept
    worker_pid, child_pid = map(int, pid_file.read_text().split())
    assert not _alive(worker_pid)
    for _ in range(50):  # the orphaned child is killed with the group; give init a moment to reap it
        if not _alive(child_pid):
            break
        await asyncio.sleep(0.05)
    assert not _alive(child_pid)
    records = outcome_records(outcome)
    assert [(r.index, r.status) for r in records] == [(0, "ok"), (-1, "error")]


async def test_memory_bound_kills_a_growing_worker(tmp_path: Path) -> None:
    outcome = await run_worker(fake_command("--mode", "hog"), 20, 200 << 20)
    assert outcome.status == "error"
    assert outcome.reason is not None and outcome.reason.startswith("memory limit exceeded")
    assert outcome.duration_s < 15


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("garbage", "protocol error: not JSON: b'Loading CUDA kernels...\\n'"),
        ("no_done", "worker exited before reporting done"),
        ("crash", "worker exited before reporting done (exit code 3): Segmentation fault in fake driver"),
    ],
)
async def test_misbehaving_worker_is_an_error_not_a_crash(tmp_path: Path, mode: str, reason: str) -> None:
    outcome = await run_probe(probe_settings(tmp_path, "--mode", mode))
    assert (outcome.status, outcome.reason) == ("error", reason)


async def test_one_failed_gpu_does_not_hide_the_others(tmp_path: Path) -> None:
    outcome = await run_probe(probe_settings(tmp_path, "--mode", "gpu_error"))
    assert outcome.status == "ok"
    records = outcome_records(outcome)
    assert [(r.index, r.status, r.reason) for r in records] == [
        (0, "ok", None),
        (1, "error", "OutOfMemoryError: fake"),
    ]


async def test_missing_program_is_an_error(tmp_path: Path) -> None:
    outcome = await run_worker([str(tmp_path / "nope")], 5, 1 << 30)
    assert outcome.status == "error"
    assert outcome.reason is not None and outcome.reason.startswith("cannot start the probe worker")


def test_worker_command_carries_the_measurement_settings() -> None:
    cfg = GpuProbeSettings(matmul_n=4096, mem_bytes=1 << 30, allow_cpu=True)
    cmd = worker_command(cfg)
    assert cmd[1:3] == ["-m", "ranksight.agent.gpuprobe.worker"]
    assert cmd[cmd.index("--matmul-n") + 1] == "4096"
    assert cmd[cmd.index("--mem-bytes") + 1] == str(1 << 30)
    assert cmd[-1] == "--allow-cpu"


def test_rss_from_proc_status() -> None:
    assert (rss_bytes(Path("/proc/self/status").read_text()) or 0) > 1 << 20
    assert rss_bytes("Name:\tx\nVmRSS:\t  2048 kB\n") == 2048 * 1024
    assert rss_bytes("Name:\tkthreadd\n") is None
