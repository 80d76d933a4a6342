"""DCGM field names -> ``gpu`` record fields, for operators who read DCGM (dcgm-exporter) next to ranksight.

Not a source: the dcgm-exporter field lists captured in ``fixtures/metrics/nvidia`` are configuration (field, Prometheus
type, help text), not samples. The table says which DCGM field carries the same reading as a record field and the
factor from DCGM's unit to ours. Fields whose line is commented out in dcgm-exporter's default lists (the ECC totals)
are listed too, as ``enabled_by_default=False``: an operator has to uncomment them to see ECC counts in DCGM.

| DCGM field                          | record field          | DCGM unit -> ours |
|-------------------------------------|-----------------------|-------------------|
| DCGM_FI_DEV_GPU_UTIL                | utilization_pct       | %                 |
| DCGM_FI_DEV_FB_USED                 | memory_used_bytes     | MiB x 2^20        |
| DCGM_FI_DEV_POWER_USAGE             | power_w               | W                 |
| DCGM_FI_DEV_GPU_TEMP                | temperature_edge_c    | C                 |
| DCGM_FI_DEV_MEMORY_TEMP             | temperature_memory_c  | C                 |
| DCGM_FI_DEV_SM_CLOCK                | sclk_hz               | MHz x 10^6        |
| DCGM_FI_DEV_MEM_CLOCK               | mclk_hz               | MHz x 10^6        |
| DCGM_FI_DEV_PCIE_REPLAY_COUNTER     | pcie_replays          | count             |
| DCGM_FI_DEV_ECC_SBE_VOL_TOTAL (off) | ecc_correctable       | count             |
| DCGM_FI_DEV_ECC_DBE_VOL_TOTAL (off) | ecc_uncorrectable     | count             |
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DcgmField:
    dcgm: str
    record_field: str
    factor: float = 1.0
    enabled_by_default: bool = True


DCGM_FIELDS = (
    DcgmField("DCGM_FI_DEV_GPU_UTIL", "utilization_pct"),
    DcgmField("DCGM_FI_DEV_FB_USED", "memory_used_bytes", 1024.0**2),
    DcgmField("DCGM_FI_DEV_POWER_USAGE", "power_w"),
    DcgmField("DCGM_FI_DEV_GPU_TEMP", "temperature_edge_c"),
    DcgmField("DCGM_FI_DEV_MEMORY_TEMP", "temperature_memory_c"),
    DcgmField("DCGM_FI_DEV_SM_CLOCK", "sclk_hz", 1e6),
    DcgmField("DCGM_FI_DEV_MEM_CLOCK", "mclk_hz", 1e6),
    DcgmField("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "pcie_replays"),
    DcgmField("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "ecc_correctable", enabled_by_default=False),
    DcgmField("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "ecc_uncorrectable", enabled_by_default=False),
)


def dcgm_exporter_fields(text: str) -> dict[str, bool]:
    """Field names of a dcgm-exporter counters CSV -> whether the line is enabled (commented-out lines: False)."""
    fields = {}
    for line in text.splitlines():
        enabled = not line.lstrip().startswith("#")
        name = line.lstrip("# \t").split(",", 1)[0].strip()
        if name.startswith("DCGM_"):
            fields[name] = enabled
    return fields
