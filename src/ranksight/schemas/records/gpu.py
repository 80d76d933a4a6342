"""``gpu``: one normalized sample of one GPU, in base units (bytes, watts, celsius, hertz); unsupported values are null.

``temperature_edge_c`` carries NVIDIA's single GPU-core sensor (``temperature.gpu``); AMD reports edge, junction (hotspot)
and memory separately. ``links`` holds XGMI/NVLink state where the source reports it (``{"name": ..., "up": bool}``).
"""

from __future__ import annotations

from pydantic import Field

from ranksight.schemas.records.base import Record


class GpuLink(Record):
    name: str
    up: bool | None = None
    peer: str | None = None


class GpuRecord(Record):
    index: int
    uuid: str | None = None
    bus_id: str | None = None
    name: str | None = None
    vendor: str | None = None
    source: str | None = None
    utilization_pct: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    power_w: float | None = None
    power_cap_w: float | None = None
    temperature_edge_c: float | None = None
    temperature_junction_c: float | None = None
    temperature_memory_c: float | None = None
    sclk_hz: float | None = None
    mclk_hz: float | None = None
    ecc_correctable: int | None = None
    ecc_uncorrectable: int | None = None
    pcie_replays: int | None = None
    throttled: bool | None = None
    throttle_reasons: list[str] = Field(default_factory=list)
    links: list[GpuLink] = Field(default_factory=list)
