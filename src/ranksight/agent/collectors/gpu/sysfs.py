"""Reader of amdgpu GPUs from a sysfs root (``<root>/class/drm/card<N>/device``): the last-resort AMD source.

Faithful to the amdgpu sysfs ABI and the captured procfs fixture tree: ``gpu_busy_percent``, ``mem_info_vram_*`` in bytes,
``pp_dpm_sclk``/``pp_dpm_mclk`` levels with ``*`` on the current one, ``pcie_replay_count``, ``uevent`` with
``PCI_SLOT_NAME``; hwmon readings in milli-degrees (``temp*_input`` named by ``temp*_label``), micro-watts
(``power1_average``/``power1_input``, ``power1_cap``) and hertz (``freq1_input``); RAS error counts in
``ras/*_err_count`` ("ue: N" / "ce: N" lines). A file that is absent or unreadable is a null value, never an error.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ranksight.agent.collectors.gpu.values import integer, number
from ranksight.schemas.records import GpuRecord

AMD_VENDOR = "0x1002"
_CARD = re.compile(r"^card(\d+)$")
_DPM_CURRENT = re.compile(r"^\s*\d+:\s*(\d+)\s*Mhz\s*\*", re.IGNORECASE | re.MULTILINE)
_TEMP_LABELS = {
    "edge": "temperature_edge_c",
    "junction": "temperature_junction_c",
    "mem": "temperature_memory_c",
}


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _dpm_current_hz(path: Path) -> float | None:
    match = _DPM_CURRENT.search(_read(path) or "")
    return float(match.group(1)) * 1e6 if match else None


def _uevent(device: Path) -> dict[str, str]:
    lines = (_read(device / "uevent") or "").splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def _ras_counts(device: Path) -> tuple[int | None, int | None]:
    files = sorted((device / "ras").glob("*_err_count")) if (device / "ras").is_dir() else []
    if not files:
        return None, None
    ce = ue = 0
    for path in files:
        for line in (_read(path) or "").splitlines():
            key, _, value = line.partition(":")
            count = integer(value) or 0
            if key.strip() == "ce":
                ce += count
            elif key.strip() == "ue":
                ue += count
    return ce, ue


def _hwmon(device: Path) -> dict[str, float | None]:
    values: dict[str, float | None] = {}
    for hwmon in sorted((device / "hwmon").glob("hwmon*")) if (device / "hwmon").is_dir() else []:
        for temp in sorted(hwmon.glob("temp*_input")):
            label = _read(temp.with_name(temp.name.replace("_input", "_label"))) or "edge"
            if label in _TEMP_LABELS:
                values.setdefault(_TEMP_LABELS[label], number(_read(temp), 1e-3))
        power = number(_read(hwmon / "power1_average")) or number(_read(hwmon / "power1_input"))
        values.setdefault("power_w", None if power is None else power * 1e-6)
        values.setdefault("power_cap_w", number(_read(hwmon / "power1_cap"), 1e-6))
        values.setdefault("sclk_hz", number(_read(hwmon / "freq1_input")))
        values.setdefault("mclk_hz", number(_read(hwmon / "freq2_input")))
    return {k: v for k, v in values.items() if v is not None}


def read_amdgpu_sysfs(root: Path) -> list[GpuRecord]:
    """One record per amdgpu card under ``root`` (which stands for ``/sys``); an empty list when there is none."""
    records = []
    drm = root / "class" / "drm"
    for card in sorted(drm.iterdir()) if drm.is_dir() else []:
        match = _CARD.match(card.name)
        device = card / "device"
        if match is None or _read(device / "vendor") != AMD_VENDOR:
            continue
        ce, ue = _ras_counts(device)
        fields: dict[str, Any] = {
            "sclk_hz": _dpm_current_hz(device / "pp_dpm_sclk"),
            "mclk_hz": _dpm_current_hz(device / "pp_dpm_mclk"),
        }
        fields.update(_hwmon(device))  # hwmon's exact clocks win over the DPM level when present
        records.append(GpuRecord(
            index=int(match.group(1)), vendor="amd", source="sysfs",
            uuid=_read(device / "unique_id") or None,
            bus_id=_uevent(device).get("PCI_SLOT_NAME"),
            name=_read(device / "product_name") or None,
            utilization_pct=number(_read(device / "gpu_busy_percent")),
            memory_used_bytes=integer(_read(device / "mem_info_vram_used")),
            memory_total_bytes=integer(_read(device / "mem_info_vram_total")),
            pcie_replays=integer(_read(device / "pcie_replay_count")),
            ecc_correctable=ce, ecc_uncorrectable=ue, **fields,
        ))  # fmt: skip
    return records
