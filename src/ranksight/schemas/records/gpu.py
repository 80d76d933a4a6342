"""``gpu``: one normalized sample of one GPU, in base units (bytes, watts, celsius, hertz); unsupported values are null.

``temperature_edge_c`` carries NVIDIA's single GPU-core sensor (``temperature.gpu``); AMD reports edge, junction (hotspot)
and memory separately. ``links`` holds XGMI/NVLink state where the source reports it (``{"name": ..., "up": bool}``).
"""

from __future__ import annotations

import msgspec

from ranksight.schemas.records.base import Record, RecordKind
from ranksight.schemas.records.quantities import Counter, Gauge, Index


class GpuLink(Record, kw_only=True, frozen=True):
    name: str
    up: bool | None = None
    peer: str | None = None


class GpuRecord(Record, kw_only=True, frozen=True):
    index: Index
    uuid: str | None = None
    bus_id: str | None = None
    name: str | None = None
    vendor: str | None = None
    source: str | None = None
    utilization_pct: Gauge | None = None
    memory_used_bytes: Counter | None = None
    memory_total_bytes: Counter | None = None
    power_w: Gauge | None = None
    power_cap_w: Gauge | None = None
    temperature_edge_c: Gauge | None = None
    temperature_junction_c: Gauge | None = None
    temperature_memory_c: Gauge | None = None
    sclk_hz: Gauge | None = None
    mclk_hz: Gauge | None = None
    ecc_correctable: Counter | None = None
    ecc_uncorrectable: Counter | None = None
    pcie_replays: Counter | None = None
    throttled: bool | None = None
    throttle_reasons: list[str] = msgspec.field(default_factory=list)
    links: list[GpuLink] = msgspec.field(default_factory=list)


KINDS = [
    RecordKind("gpu", GpuRecord, collector="gpu", tracker="gpus", parse="ranksight.agent.collectors.gpu.cli"),
]
