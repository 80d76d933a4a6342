"""GPU parsers on the captured outputs: values hand-checked from the captures, converted to base units."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ranksight.agent.collectors.gpu.amd_smi import (
    GpuToolParseError,
    json_documents,
    parse_amd_smi_metric,
)
from ranksight.agent.collectors.gpu.nvidia_smi import QUERY_FIELDS, parse_nvidia_smi_csv, throttle_reasons
from ranksight.agent.collectors.gpu.rocm_smi import parse_rocm_smi
from ranksight.agent.collectors.gpu.sysfs import read_amdgpu_sysfs
from ranksight.agent.collectors.gpu.values import integer, number
from tests.gpu_nic_support import METRICS, SYSFS_TREE, nvidia_query_sections, write_tree

MIB = 1024 * 1024
AMD_SMI = METRICS / "amd" / "amd-smi_metric_-p_--json_changelog.txt"


def test_rocm_smi_602_every_card() -> None:
    records = parse_rocm_smi((METRICS / "amd" / "rocm-smi_mi100_rocm602.json").read_bytes())
    assert [r.index for r in records] == [0, 1, 2, 3]
    card0 = records[0]
    assert card0.bus_id == "0000:83:00.0" and card0.uuid == "0x79ccd55167a2124a"
    assert card0.name == "Arcturus GL-XL [Instinct MI100]"
    assert (card0.temperature_edge_c, card0.temperature_junction_c, card0.temperature_memory_c) == (
        53,
        55,
        53,
    )
    assert card0.sclk_hz == 300e6 and card0.mclk_hz == 1200e6
    assert card0.power_w == 36.0 and card0.power_cap_w == 290.0
    assert card0.memory_total_bytes == 34342961152 and card0.memory_used_bytes == 6750208
    assert card0.utilization_pct == 0 and card0.pcie_replays == 0
    assert card0.ecc_uncorrectable is None  # not in this capture: null, not 0
    assert [r.power_w for r in records] == [36.0, 44.0, 43.0, 39.0]
    assert [r.bus_id for r in records][1:] == ["0000:A3:00.0", "0000:C3:00.0", "0000:E3:00.0"]


def test_rocm_smi_571_key_drift_and_na() -> None:
    records = parse_rocm_smi((METRICS / "amd" / "rocm-smi_mi100_rocm571.json").read_bytes())
    assert len(records) == 6
    assert all(r.uuid is None for r in records)  # "Unique ID": "N/A"
    assert [r.temperature_memory_c for r in records] == [30, 38, 31, 36, 38, 38]
    assert records[5].bus_id == "0000:49:00.0" and records[5].power_w == 40.0
    assert records[0].memory_used_bytes == 6782976


def test_amd_smi_list_format_with_command_line_before_json() -> None:
    (gpu,) = parse_amd_smi_metric(AMD_SMI.read_bytes())
    assert gpu.index == 0 and gpu.source == "amd-smi"
    assert gpu.power_w == 10.0
    assert gpu.throttled is False and gpu.throttle_reasons == []
    assert gpu.temperature_edge_c is None and gpu.utilization_pct is None


def test_amd_smi_gpu_data_wrapper_warnings_and_several_documents() -> None:
    captured = json.loads(AMD_SMI.read_text().split("\n", 1)[1])
    later = {"gpu_data": [{
        "gpu": 0,
        "usage": {"gfx_activity": {"value": 87, "unit": "%"}},
        "temperature": {"edge": {"value": 61, "unit": "C"}, "hotspot": {"value": 74, "unit": "C"}, "mem": "N/A"},
        "clock": {"gfx_0": {"clk": {"value": 2100, "unit": "MHz"}}, "mem_0": {"clk": {"value": 1.3, "unit": "GHz"}}},
        "mem_usage": {"total_vram": {"value": 196592, "unit": "MB"}, "used_vram": {"value": 1024, "unit": "MB"}},
        "ecc": {"total_correctable_count": 3, "total_uncorrectable_count": 1},
        "pcie": {"replay_count": 65535},
    }]}  # fmt: skip
    text = (
        "WARNING: User is missing the following required groups: render, video. [see docs]\n"
        + json.dumps(captured)
        + "\n"
        + json.dumps(later)
    )
    (gpu,) = parse_amd_smi_metric(text.encode())
    assert gpu.power_w == 10.0  # from the first document
    assert gpu.utilization_pct == 87 and gpu.temperature_junction_c == 74 and gpu.temperature_memory_c is None
    assert gpu.sclk_hz == 2100e6 and gpu.mclk_hz == pytest.approx(1.3e9)
    assert gpu.memory_total_bytes == 196592 * 10**6
    assert (gpu.ecc_correctable, gpu.ecc_uncorrectable) == (3, 1)
    assert gpu.pcie_replays is None  # uint16 sentinel


def test_amd_smi_garbage_is_a_parse_error() -> None:
    with pytest.raises(GpuToolParseError):
        parse_amd_smi_metric(b"Segmentation fault [core dumped]\n{not json")
    assert json_documents('x [1] y {"a": 2}') == [[1], {"a": 2}]


@pytest.mark.parametrize(
    ("capture", "section", "expected"),
    [
        ("nvidia-smi_capture_linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt", 0,
         {"utilization_pct": 0, "memory_used_bytes": 0, "memory_total_bytes": 81559 * MIB, "power_w": 69.85,
          "temperature_edge_c": 41, "temperature_memory_c": 48, "sclk_hz": 345e6, "mclk_hz": 2619e6}),
        ("nvidia-smi_capture_linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt", 1,
         {"utilization_pct": 100, "memory_used_bytes": 19818 * MIB, "power_w": 631.95, "temperature_edge_c": 59,
          "sclk_hz": 1980e6}),
        ("nvidia-smi_capture_linux-x86_64__nvidia-h100-mig__590.48.01.txt", 1,
         {"utilization_pct": None, "memory_used_bytes": 11125 * MIB, "power_w": 433.78, "temperature_memory_c": 59}),
        ("nvidia-smi_capture_linux-x86_64__nvidia-h200__590.48.01.txt", 1,
         {"name": "NVIDIA H200", "bus_id": "00000000:83:00.0", "memory_total_bytes": 143771 * MIB,
          "memory_used_bytes": 32362 * MIB, "power_w": 627.40, "mclk_hz": 3201e6, "temperature_edge_c": 52}),
    ],
)  # fmt: skip
def test_nvidia_smi_capture_sections(capture: str, section: int, expected: dict) -> None:
    (gpu,) = parse_nvidia_smi_csv(nvidia_query_sections(capture)[section])
    assert gpu.index == 0 and gpu.vendor == "nvidia" and gpu.power_cap_w == 700.0
    assert (gpu.ecc_correctable, gpu.ecc_uncorrectable) == (0, 0)
    assert gpu.throttled is False  # idle (0x1) and no reason (0x0) are not throttling
    for field, value in expected.items():
        assert (
            getattr(gpu, field) == pytest.approx(value)
            if isinstance(value, float)
            else getattr(gpu, field) == value
        )


def test_nvidia_smi_noheader_nounits_in_query_order() -> None:
    row = dict.fromkeys(QUERY_FIELDS, "[N/A]") | {
        "index": "3", "uuid": "GPU-1", "name": "NVIDIA H100", "memory.used": "1024", "memory.total": "81559",
        "power.draw": "[Not Supported]", "temperature.gpu": "91", "clocks_throttle_reasons.active": "0x0000000000000048",
    }  # fmt: skip
    (gpu,) = parse_nvidia_smi_csv((", ".join(row[f] for f in QUERY_FIELDS) + "\n").encode())
    assert gpu.index == 3 and gpu.memory_used_bytes == 1024 * MIB and gpu.power_w is None
    assert gpu.throttled is True and gpu.throttle_reasons == ["hw_slowdown", "hw_thermal_slowdown"]
    assert gpu.ecc_uncorrectable is None


def test_nvidia_smi_wrong_shape_is_a_parse_error() -> None:
    with pytest.raises(GpuToolParseError):
        parse_nvidia_smi_csv(b"0, 1, 2\n")
    assert throttle_reasons(None) is None


def test_sentinels_and_missing_values_are_null() -> None:
    assert [number(v) for v in ("N/A", "[N/A]", "[Not Supported]", 65535, -1, "", None)] == [None] * 7
    assert number("(300Mhz)", 1e6) == 300e6 and integer("0") == 0


def test_sysfs_fixture_card() -> None:
    (gpu,) = read_amdgpu_sysfs(SYSFS_TREE)
    assert gpu.index == 0 and gpu.bus_id == "0000:09:00.0" and gpu.uuid == "0123456789abcdef"
    assert (
        gpu.utilization_pct == 4
        and gpu.memory_used_bytes == 1490378752
        and gpu.memory_total_bytes == 8573157376
    )
    assert gpu.sclk_hz == 852e6 and gpu.mclk_hz == 167e6  # the "*" DPM levels
    assert gpu.pcie_replays == 0 and gpu.temperature_edge_c is None  # no hwmon in the capture


def test_sysfs_hwmon_and_ras_units(tmp_path: Path) -> None:
    dev = "class/drm/card1/device"
    write_tree(tmp_path, {
        f"{dev}/vendor": "0x1002", f"{dev}/gpu_busy_percent": 97,
        f"{dev}/hwmon/hwmon3/temp1_input": 45000, f"{dev}/hwmon/hwmon3/temp1_label": "edge",
        f"{dev}/hwmon/hwmon3/temp2_input": 71500, f"{dev}/hwmon/hwmon3/temp2_label": "junction",
        f"{dev}/hwmon/hwmon3/temp3_input": 60000, f"{dev}/hwmon/hwmon3/temp3_label": "mem",
        f"{dev}/hwmon/hwmon3/power1_average": 312000000, f"{dev}/hwmon/hwmon3/power1_cap": 750000000,
        f"{dev}/hwmon/hwmon3/freq1_input": 2100000000,
        f"{dev}/ras/umc_err_count": "ue: 2\nce: 5", f"{dev}/ras/gfx_err_count": "ue: 0\nce: 1",
        "class/drm/card2/device/vendor": "0x10de",  # not amdgpu
        "class/drm/card1-DP-1/status": "disconnected",  # a connector, not a card
    })  # fmt: skip
    (gpu,) = read_amdgpu_sysfs(tmp_path)
    assert gpu.index == 1 and gpu.utilization_pct == 97
    assert (gpu.temperature_edge_c, gpu.temperature_junction_c, gpu.temperature_memory_c) == (45, 71.5, 60)
    assert (
        gpu.power_w == pytest.approx(312) and gpu.power_cap_w == pytest.approx(750) and gpu.sclk_hz == 2.1e9
    )
    assert (gpu.ecc_correctable, gpu.ecc_uncorrectable) == (6, 2)
    assert read_amdgpu_sysfs(tmp_path / "nothing") == []
