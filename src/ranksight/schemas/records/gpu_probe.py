"""``gpu_probe``: one active measurement of one GPU (matmul TFLOPS, memory bandwidth), or why none was taken.

``status`` is ``ok`` for a measurement; ``skipped`` (the node was busy), ``unavailable`` (no PyTorch or no GPU) and
``error`` (the probe crashed, timed out or hit its memory bound) carry ``reason`` and ``index`` = -1 when they concern
the node rather than one GPU. Rates are in base units: FLOP/s as TFLOPS (10^12), bytes per second.
"""

from __future__ import annotations

from typing import Literal

from ranksight.schemas.records.base import Record, RecordKind
from ranksight.schemas.records.quantities import Bytes, Count, Gauge, Index, Seconds

GpuProbeStatus = Literal["ok", "skipped", "unavailable", "error"]


class GpuProbeRecord(Record, kw_only=True, frozen=True):
    index: Index
    status: GpuProbeStatus
    reason: str | None = None
    name: str | None = None
    uuid: str | None = None
    backend: str | None = None
    tflops_bf16: Gauge | None = None
    tflops_fp16: Gauge | None = None
    mem_bandwidth_bps: Gauge | None = None
    duration_s: Seconds | None = None
    matmul_n: Count | None = None
    mem_bytes: Bytes | None = None


KINDS = [
    RecordKind("gpu_probe", GpuProbeRecord, collector="gpu_probe", tracker="gpu_probes"),
]
