"""Parser of ``amd-smi monitor`` text, a fallback AMD source for releases whose ``metric --json`` is broken.

Faithful to the vendor documentation examples (4x MI300A; MI300X in CPX/NPS4): a header of column names
(``GPU XCP POWER GPU_T MEM_T GFX_CLK GFX% MEM% ENC% DEC% VRAM_USAGE``, or ``GTT_USAGE`` on an APU) then one row per GPU
or partition with values such as "183 W", "49 °C", "1427 MHz", "0 %", "0.3/192.0 GB" and "N/A"; a trailing "..."
line. amd-smi's "GB" there is GiB (an MI300X's 196592 MiB prints as 192.0 GB). GTT (system memory mapped for the GPU)
is not VRAM and is not reported as memory. ``GPU_T`` is the hotspot (junction) sensor: MI300 parts have no edge sensor.
"""

from __future__ import annotations

import re

from ranksight.agent.collectors.gpu.amd_smi import GpuToolParseError
from ranksight.agent.collectors.gpu.values import number
from ranksight.schemas.records import GpuRecord

_VALUE = re.compile(r"N/A|[\d.]+/\s*[\d.]+\s*[KMGT]?B|[\d.]+(?:\s*(?:°C|W|MHz|GHz|%))?")
_USAGE = re.compile(r"([\d.]+)/\s*([\d.]+)\s*([KMGT]?)B")
_GIB = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def _usage(text: str | None) -> tuple[int | None, int | None]:
    match = _USAGE.fullmatch(text or "")
    if match is None:
        return None, None
    factor = _GIB[match.group(3)]
    return int(float(match.group(1)) * factor), int(float(match.group(2)) * factor)


def parse_amd_smi_monitor(data: bytes) -> list[GpuRecord]:
    lines = [line for line in data.decode("utf-8", "replace").splitlines() if line.strip()]
    header_at = next((i for i, line in enumerate(lines) if line.split()[:1] == ["GPU"]), None)
    if header_at is None:
        raise GpuToolParseError("amd-smi monitor: no header line starting with GPU")
    columns = lines[header_at].split()
    records = []
    for line in lines[header_at + 1 :]:
        values = _VALUE.findall(line)
        if line.strip() == "...":
            continue  # the tool elides further rows
        if len(values) != len(columns):
            raise GpuToolParseError(
                f"amd-smi monitor: {len(values)} values for {len(columns)} columns in {line.strip()!r}"
            )
        row = dict(zip(columns, values, strict=True))
        used, total = _usage(row.get("VRAM_USAGE"))
        records.append(GpuRecord(
            index=int(row["GPU"]), vendor="amd", source="amd-smi-monitor",
            power_w=number(row.get("POWER")), temperature_junction_c=number(row.get("GPU_T")),
            temperature_memory_c=number(row.get("MEM_T")), sclk_hz=number(row.get("GFX_CLK"), 1e6),
            utilization_pct=number(row.get("GFX%")), memory_used_bytes=used, memory_total_bytes=total,
        ))  # fmt: skip
    if not records:
        raise GpuToolParseError("amd-smi monitor: no GPU rows")
    return records
