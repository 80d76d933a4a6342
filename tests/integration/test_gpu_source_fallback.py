"""A GPU source that starts failing after detection hands over to the next source in order (real subprocesses)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ranksight.agent.collectors.gpu.collector import GpuCollector
from ranksight.agent.collectors.gpu.settings import GpuSettings
from tests.gpu_nic_support import METRICS, fake_tool, path_with, printing_tool


def _flaky_amd_smi(bin_dir: Path, tmp_path: Path) -> None:
    """amd-smi prints the captured metric output until ``broken`` exists, then exits 1 like a wedged driver."""
    capture = METRICS / "amd" / "amd-smi_metric_-p_--json_changelog.txt"
    fake_tool(bin_dir, "amd-smi", (
        "import os, sys\n"
        f"if os.path.exists({str(tmp_path / 'broken')!r}):\n"
        "    sys.stderr.write('amdgpu: device lost\\n'); sys.exit(1)\n"
        f"sys.stdout.buffer.write(open({str(capture)!r}, 'rb').read())\n"
    ))  # fmt: skip


async def test_failing_source_falls_back_to_next_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    _flaky_amd_smi(bin_dir, tmp_path)
    printing_tool(bin_dir, "rocm-smi", (METRICS / "amd" / "rocm-smi_mi100_rocm602.json").read_bytes())
    monkeypatch.setenv("PATH", path_with(bin_dir))
    settings = GpuSettings(sources=["amd-smi", "rocm-smi"], sysfs_root=tmp_path / "empty")
    collector = GpuCollector(None, settings)  # type: ignore[arg-type]  # ctx is not used by the GPU collector
    assert await collector.detect() and collector.health.source == "amd-smi"
    assert {r.source for r in await collector.collect()} == {"amd-smi"}

    (tmp_path / "broken").touch()
    records = await collector.collect()
    assert [r.index for r in records] == [0, 1, 2, 3] and {r.source for r in records} == {"rocm-smi"}
    assert collector.health.source == "rocm-smi"
    assert collector.health.last_error is not None
    assert collector.health.last_error.startswith("fell back to rocm-smi after amd-smi: CommandFailed")
    assert "device lost" in collector.health.last_error
    assert {r.source for r in await collector.collect()} == {"rocm-smi"}  # it stays on the new source


async def test_no_working_fallback_keeps_the_error_and_the_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    _flaky_amd_smi(bin_dir, tmp_path)
    fake_tool(bin_dir, "rocm-smi", "print('{{garbage')\n")
    monkeypatch.setenv("PATH", path_with(bin_dir))
    settings = GpuSettings(sources=["amd-smi", "rocm-smi"], sysfs_root=tmp_path / "empty")
    collector = GpuCollector(None, settings)  # type: ignore[arg-type]
    assert await collector.detect()
    (tmp_path / "broken").touch()
    with pytest.raises(Exception, match="amd-smi exited 1"):
        await collector.collect()
    assert collector.health.source == "amd-smi"
    (tmp_path / "broken").unlink()  # the driver recovered: the same source reads again
    assert {r.source for r in await collector.collect()} == {"amd-smi"}
