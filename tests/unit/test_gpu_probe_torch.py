"""The real PyTorch worker: on the CPU build here (small sizes: shapes and units), and on a GPU when one is visible."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ranksight.agent.gpuprobe.protocol import Done, GpuResult, Start, Unavailable, parse_line

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(
    not HAS_TORCH, reason="PyTorch is not installed (pip install torch to run this)"
)
SMALL = [
    "--matmul-n",
    "128",
    "--matmul-iters",
    "2",
    "--warmup",
    "1",
    "--repeats",
    "2",
    "--mem-bytes",
    str(16 << 20),
]


def run_worker(*args: str) -> list:
    proc = subprocess.run(
        [sys.executable, "-m", "ranksight.agent.gpuprobe.worker", *args], capture_output=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr.decode()
    return [parse_line(line) for line in proc.stdout.splitlines(keepends=True)]


# A GPU device node, checked without importing torch into the test process.
HAS_GPU = any(Path(p).exists() for p in ("/dev/nvidiactl", "/dev/kfd"))
cpu_only = pytest.mark.skipif(HAS_GPU, reason="a GPU is present: the CPU-only behaviour cannot be seen here")


@needs_torch
@cpu_only
def test_cpu_build_reports_no_gpu_as_unavailable() -> None:
    messages = run_worker(*SMALL)
    assert isinstance(messages[0], Unavailable) and "no GPU visible to PyTorch" in messages[0].reason
    assert isinstance(messages[-1], Done)


@needs_torch
@cpu_only
def test_cpu_measurement_has_the_right_shape_and_units() -> None:
    start, result, done = run_worker(*SMALL, "--allow-cpu")
    assert isinstance(start, Start) and start.backend.startswith("torch-")
    assert isinstance(result, GpuResult) and isinstance(done, Done)
    assert result.index == 0 and result.matmul_n == 128 and result.mem_bytes == 16 << 20
    # Units: TFLOPS (10^12 FLOP/s) and bytes/s. A CPU does 10^-4..10^2 TFLOPS and 10^8..10^12 bytes/s.
    for tflops in (result.tflops_bf16, result.tflops_fp16):
        assert tflops is not None and 1e-5 < tflops < 100
    assert result.mem_bandwidth_bps is not None and 1e8 < result.mem_bandwidth_bps < 1e12
    assert 0 < result.duration_s < 60


def test_without_torch_the_worker_says_unavailable(tmp_path: Path) -> None:
    # A 'torch' package that fails to import stands for an absent or broken install.
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise ImportError('No module named torch (test)')\n")
    proc = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                           "from ranksight.agent.gpuprobe.worker import main; sys.exit(main([]))", str(tmp_path)],
                          capture_output=True, timeout=60)  # fmt: skip
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert lines[0]["type"] == "unavailable" and lines[0]["reason"].startswith("PyTorch is not installed")
    assert lines[-1] == {"type": "done"}


@needs_torch
@pytest.mark.skipif(not HAS_GPU, reason="no GPU in this session")
def test_gpu_measurement_reaches_plausible_rates() -> None:
    messages = run_worker("--matmul-n", "4096", "--mem-bytes", str(1 << 30))
    results = [m for m in messages if isinstance(m, GpuResult)]
    assert results and all(r.tflops_bf16 and r.tflops_bf16 > 10 for r in results)
    assert all(r.mem_bandwidth_bps and r.mem_bandwidth_bps > 1e11 for r in results)
