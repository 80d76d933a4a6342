"""Parser of ``amd-smi metric --json`` output.

Faithful to the shapes amd-smi has shipped: a top-level list of per-GPU objects (ROCm 6.0-6.3, see the captured
CHANGELOG example) or ``{"gpu_data": [...]}`` (later releases); readings are ``{"value", "unit"}`` leaves or bare values,
"N/A" strings for unsupported ones. stdout may carry warnings and several JSON documents (one per sub-query), so every
JSON document in the text is read and the per-GPU objects are merged by ``gpu`` index.
"""

from __future__ import annotations

import json
from typing import Any

from ranksight.agent.collectors.gpu.values import integer, is_missing, with_unit
from ranksight.errors import ParseError
from ranksight.schemas.records import GpuRecord


class GpuToolParseError(ParseError):
    """The output holds no GPU data this parser understands."""


def json_documents(text: str) -> list[Any]:
    """Every top-level JSON value in ``text``, skipping any non-JSON text (warnings, echoed commands) around them."""
    decoder = json.JSONDecoder()
    documents: list[Any] = []
    pos = 0
    while True:
        starts = [i for i in (text.find("{", pos), text.find("[", pos)) if i >= 0]
        if not starts:
            return documents
        start = min(starts)
        try:
            value, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            pos = start + 1  # a bracket inside a warning line: move on
            continue
        documents.append(value)
        pos = end


def _gpu_objects(document: Any) -> list[dict[str, Any]]:
    if isinstance(document, dict) and isinstance(document.get("gpu_data"), list):
        document = document["gpu_data"]
    if isinstance(document, dict) and "gpu" in document:
        document = [document]
    if not isinstance(document, list):
        return []
    return [d for d in document if isinstance(d, dict) and isinstance(d.get("gpu"), int)]


def _leaf(obj: dict[str, Any], *paths: str) -> tuple[Any, str | None]:
    """(value, unit) of the first dotted path present and not "N/A"."""
    for path in paths:
        node: Any = obj
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and "value" in node:
            node, unit = node["value"], node.get("unit")
        else:
            unit = None
        if not is_missing(node):
            return node, unit
    return None, None


def _reading(obj: dict[str, Any], assumed: str, *paths: str) -> float | None:
    value, unit = _leaf(obj, *paths)
    return with_unit(value, unit, assumed)


def _record(gpu: dict[str, Any]) -> GpuRecord:
    mem_total = _reading(gpu, "MB", "mem_usage.total_vram")
    mem_used = _reading(gpu, "MB", "mem_usage.used_vram")
    throttle, _ = _leaf(gpu, "power.throttle_status")
    throttled = None if throttle is None else str(throttle).upper() != "UNTHROTTLED"
    return GpuRecord(
        index=gpu["gpu"],
        vendor="amd",
        source="amd-smi",
        bus_id=_leaf(gpu, "bdf", "pcie.bdf")[0],
        utilization_pct=_reading(gpu, "%", "usage.gfx_activity", "usage.gfx_usage"),
        memory_total_bytes=None if mem_total is None else int(mem_total),
        memory_used_bytes=None if mem_used is None else int(mem_used),
        power_w=_reading(gpu, "W", "power.socket_power", "power.average_socket_power"),
        power_cap_w=_reading(gpu, "W", "power.power_limit", "power.socket_power_limit"),
        temperature_edge_c=_reading(gpu, "C", "temperature.edge"),
        temperature_junction_c=_reading(gpu, "C", "temperature.hotspot", "temperature.junction"),
        temperature_memory_c=_reading(gpu, "C", "temperature.mem", "temperature.memory"),
        sclk_hz=_reading(gpu, "MHz", "clock.gfx_0.clk", "clock.gfx.clk"),
        mclk_hz=_reading(gpu, "MHz", "clock.mem_0.clk", "clock.mem.clk"),
        ecc_correctable=integer(_leaf(gpu, "ecc.total_correctable_count", "ecc.total_correctable")[0]),
        ecc_uncorrectable=integer(_leaf(gpu, "ecc.total_uncorrectable_count", "ecc.total_uncorrectable")[0]),
        pcie_replays=integer(_leaf(gpu, "pcie.replay_count")[0]),
        throttled=throttled,
        throttle_reasons=[str(throttle)] if throttled else [],
    )


def parse_amd_smi_metric(data: bytes) -> list[GpuRecord]:
    """Normalized records, one per GPU index, from ``amd-smi metric --json`` stdout."""
    merged: dict[int, dict[str, Any]] = {}
    for document in json_documents(data.decode("utf-8", "replace")):
        for gpu in _gpu_objects(document):
            merged.setdefault(gpu["gpu"], {}).update(gpu)
    if not merged:
        raise GpuToolParseError(
            "no amd-smi GPU objects (a list or {'gpu_data': [...]} of {'gpu': N, ...}) in the output"
        )
    return [_record(merged[i]) for i in sorted(merged)]
