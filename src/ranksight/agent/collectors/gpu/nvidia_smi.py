"""Parser of ``nvidia-smi --query-gpu=<QUERY_FIELDS> --format=csv[,noheader][,nounits]`` output.

Faithful to the captured driver 590 outputs (H100, H200, H100 with MIG): ", "-separated columns, "[N/A]" and
"[Not Supported]" for unsupported values (utilization reads "[N/A]" under MIG), units in the header ("memory.used [MiB]")
and in the values ("69.85 W") unless ``nounits``. With a header, columns are found by name (so the full capture parses);
without one, they are taken in ``QUERY_FIELDS`` order, which is what the collector asks for.
"""

from __future__ import annotations

import csv
import io
import re

from ranksight.agent.collectors.gpu.amd_smi import GpuToolParseError
from ranksight.agent.collectors.gpu.values import UNIT_FACTORS, integer, is_missing, with_unit
from ranksight.schemas.records import GpuRecord

# ``clocks_throttle_reasons.*`` is the spelling every driver accepts (newer ones alias it to clocks_event_reasons).
# No field gives the PCIe replay counter (driver 580's --help-query-gpu has none): this source's pcie_replays is
# null; the nvml and nvidia-smi-xml sources read it.
QUERY_FIELDS = (
    "index", "uuid", "pci.bus_id", "name", "utilization.gpu", "memory.used", "memory.total", "power.draw",
    "enforced.power.limit", "temperature.gpu", "temperature.memory", "clocks.current.sm", "clocks.current.memory",
    "ecc.errors.corrected.volatile.total", "ecc.errors.uncorrected.volatile.total", "clocks_throttle_reasons.active",
)  # fmt: skip
_ALIASES = {"clocks_event_reasons.active": "clocks_throttle_reasons.active"}
# unit of each numeric field when ``nounits`` strips it
_UNITS = {
    "utilization.gpu": "%", "memory.used": "MiB", "memory.total": "MiB", "power.draw": "W",
    "enforced.power.limit": "W", "temperature.gpu": "C", "temperature.memory": "C", "clocks.current.sm": "MHz",
    "clocks.current.memory": "MHz",
}  # fmt: skip
_HEADER_UNIT = re.compile(r"^(?P<name>[\w.]+)\s*\[(?P<unit>[^\]]+)\]$")

# NVML clocks-event (throttle) reason bits; only the ones that slow a busy GPU count as throttling.
THROTTLE_BITS = {
    0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
}  # fmt: skip


def throttle_reasons(mask: int | None) -> list[str] | None:
    """Names of the active slowdown reasons in an NVML reason mask; ``None`` when the mask is unknown."""
    if mask is None:
        return None
    return [name for bit, name in THROTTLE_BITS.items() if mask & bit]


def _columns(header: list[str]) -> tuple[list[str], dict[str, str]]:
    names, units = [], {}
    for cell in header:
        match = _HEADER_UNIT.match(cell)
        name = match.group("name") if match else cell
        name = _ALIASES.get(name, name)
        if match and match.group("unit").lower() in UNIT_FACTORS:
            units[name] = match.group("unit")
        names.append(name)
    return names, units


def parse_nvidia_smi_csv(data: bytes) -> list[GpuRecord]:
    text = data.decode("utf-8", "replace")
    # newline=None: a bare CR ends a line too (a capture passed through an old tool), as csv asks of its input.
    lines = io.StringIO(text, newline=None)
    try:
        rows = [[c.strip() for c in row] for row in csv.reader(lines, skipinitialspace=True) if row]
    except csv.Error as exc:
        raise GpuToolParseError(f"nvidia-smi output is not CSV: {exc}") from None
    if not rows:
        raise GpuToolParseError("nvidia-smi printed no rows")
    if "index" in _columns(rows[0])[0]:
        names, units = _columns(rows[0])
        rows = rows[1:]
    else:
        names, units = list(QUERY_FIELDS), {}
    records = []
    for row in rows:
        if len(row) != len(names):
            raise GpuToolParseError(
                f"nvidia-smi row has {len(row)} columns, expected {len(names)}: {row[:3]}..."
            )
        values = dict(zip(names, row, strict=True))

        def reading(field: str, values: dict[str, str] = values) -> float | None:
            # ``values.get`` is None for a field the capture did not ask for
            return with_unit(values.get(field), units.get(field), _UNITS[field])

        index = integer(values.get("index"))
        if index is None:
            raise GpuToolParseError(f"nvidia-smi row without a GPU index: {row[:3]}...")
        mask_text = values.get("clocks_throttle_reasons.active")
        reasons = throttle_reasons(None if is_missing(mask_text) else int(str(mask_text), 16))
        used, total = reading("memory.used"), reading("memory.total")
        records.append(GpuRecord(
            index=index, vendor="nvidia", source="nvidia-smi",
            uuid=None if is_missing(values.get("uuid")) else values["uuid"],
            bus_id=None if is_missing(values.get("pci.bus_id")) else values["pci.bus_id"],
            name=None if is_missing(values.get("name")) else values["name"],
            utilization_pct=reading("utilization.gpu"),
            memory_used_bytes=None if used is None else int(used),
            memory_total_bytes=None if total is None else int(total),
            power_w=reading("power.draw"), power_cap_w=reading("enforced.power.limit"),
            temperature_edge_c=reading("temperature.gpu"), temperature_memory_c=reading("temperature.memory"),
            sclk_hz=reading("clocks.current.sm"), mclk_hz=reading("clocks.current.memory"),
            ecc_correctable=integer(values.get("ecc.errors.corrected.volatile.total")),
            ecc_uncorrectable=integer(values.get("ecc.errors.uncorrected.volatile.total")),
            throttled=None if reasons is None else bool(reasons), throttle_reasons=reasons or [],
        ))  # fmt: skip
    return records
