"""Parser of ``rocm-smi --json`` output (``{"card0": {...}, ..., "system": {...}}``).

Faithful to the captured ROCm 5.7.1 and 6.0.2 outputs: every value is a string, units live in key names
("Temperature (Sensor edge) (C)", "VRAM Total Memory (B)"), clocks read "(300Mhz)", unsupported values are "N/A", and
key names drift between releases ("GPU ID" vs "Device ID"; power under "Average" or "Current Socket" names), so each
field is looked up under every spelling known.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ranksight.agent.collectors.gpu.amd_smi import GpuToolParseError
from ranksight.agent.collectors.gpu.values import integer, is_missing, number
from ranksight.schemas.records import GpuRecord

_CARD = re.compile(r"^card(\d+)$")
MHZ = 1e6

# record field -> key spellings seen across releases (first present wins)
KEYS: dict[str, tuple[str, ...]] = {
    "utilization_pct": ("GPU use (%)",),
    "memory_total_bytes": ("VRAM Total Memory (B)",),
    "memory_used_bytes": ("VRAM Total Used Memory (B)",),
    "power_w": ("Average Graphics Package Power (W)", "Current Socket Graphics Package Power (W)"),
    "power_cap_w": ("Max Graphics Package Power (W)",),
    "temperature_edge_c": ("Temperature (Sensor edge) (C)",),
    "temperature_junction_c": ("Temperature (Sensor junction) (C)",),
    "temperature_memory_c": ("Temperature (Sensor memory) (C)", "Temperature (Sensor HBM 0) (C)"),
    "sclk_hz": ("sclk clock speed:",),
    "mclk_hz": ("mclk clock speed:",),
    "pcie_replays": ("PCIe Replay Count",),
    "ecc_correctable": ("Total correctable errors", "correctable_count"),
    "ecc_uncorrectable": ("Total uncorrectable errors", "uncorrectable_count"),
    "bus_id": ("PCI Bus",),
    "uuid": ("Unique ID",),
    "name": ("Card series", "Card Series", "Device Name"),
}
_INTS = {"memory_total_bytes", "memory_used_bytes", "pcie_replays", "ecc_correctable", "ecc_uncorrectable"}
_STRINGS = {"bus_id", "uuid", "name"}
_FACTORS = {"sclk_hz": MHZ, "mclk_hz": MHZ}


def _field(card: dict[str, Any], field: str) -> Any:
    for key in KEYS[field]:
        value = card.get(key)
        if not is_missing(value):
            if field in _STRINGS:
                return str(value)
            return integer(value) if field in _INTS else number(value, _FACTORS.get(field, 1.0))
    return None


def parse_rocm_smi(data: bytes) -> list[GpuRecord]:
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise GpuToolParseError(f"rocm-smi output is not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise GpuToolParseError("rocm-smi JSON is not an object of cards")
    records = []
    for key, card in document.items():
        match = _CARD.match(key)
        if match is None or not isinstance(card, dict):
            continue  # "system" and anything else that is not a card
        values = {field: _field(card, field) for field in KEYS}
        records.append(GpuRecord(index=int(match.group(1)), vendor="amd", source="rocm-smi", **values))
    if not records:
        raise GpuToolParseError("rocm-smi JSON holds no cardN objects")
    return sorted(records, key=lambda r: r.index)
