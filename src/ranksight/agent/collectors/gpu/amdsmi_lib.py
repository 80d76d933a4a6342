"""AMD GPUs through the ``amdsmi`` Python library (optional: shipped with ROCm, not on PyPI as a wheel for every release).

Importing ``amdsmi`` loads ``libamd_smi.so`` and can fail with errors other than ImportError (OSError, KeyError on a
missing ROCm path...), so any exception means "library unavailable". The library returns "N/A" strings for unsupported
readings; every call is wrapped so that one unsupported reading is a null value. Blocking C: run on a worker thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ranksight.agent.collectors.base import CollectorUnavailable
from ranksight.agent.collectors.gpu.values import integer, is_missing, number
from ranksight.schemas.records import GpuRecord

try:
    import amdsmi
except Exception:
    amdsmi = None


class AmdSmiUnavailable(CollectorUnavailable):
    """The library is absent or cannot initialise (no amdgpu driver)."""


def _try(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        value = fn(*args)
    except Exception:  # AmdSmiException and friends: an unsupported reading
        return None
    return None if is_missing(value) else value


def _get(mapping: Any, *keys: str) -> Any:
    for key in keys:
        if isinstance(mapping, dict) and not is_missing(mapping.get(key)):
            return mapping[key]
    return None


def _record(index: int, h: Any) -> GpuRecord:
    temp_type, metric = amdsmi.AmdSmiTemperatureType, amdsmi.AmdSmiTemperatureMetric.CURRENT
    vram = amdsmi.AmdSmiMemoryType.VRAM
    power = _try(amdsmi.amdsmi_get_power_info, h)
    ecc = _try(amdsmi.amdsmi_get_gpu_total_ecc_count, h)
    activity = _try(amdsmi.amdsmi_get_gpu_activity, h)

    def temperature(kind: Any) -> float | None:
        return number(_try(amdsmi.amdsmi_get_temp_metric, h, kind, metric))

    def clock(kind: Any) -> float | None:
        return number(_get(_try(amdsmi.amdsmi_get_clock_info, h, kind), "clk", "cur_clk"), 1e6)

    return GpuRecord(
        index=index, vendor="amd", source="amdsmi",
        bus_id=_try(amdsmi.amdsmi_get_gpu_device_bdf, h), uuid=_try(amdsmi.amdsmi_get_gpu_device_uuid, h),
        name=_get(_try(amdsmi.amdsmi_get_gpu_asic_info, h), "market_name"),
        utilization_pct=number(_get(activity, "gfx_activity")),
        memory_used_bytes=integer(_try(amdsmi.amdsmi_get_gpu_memory_usage, h, vram)),
        memory_total_bytes=integer(_try(amdsmi.amdsmi_get_gpu_memory_total, h, vram)),
        power_w=number(_get(power, "average_socket_power", "current_socket_power", "socket_power")),
        power_cap_w=number(_get(power, "power_limit")),
        temperature_edge_c=temperature(temp_type.EDGE), temperature_junction_c=temperature(temp_type.HOTSPOT),
        temperature_memory_c=temperature(temp_type.VRAM),
        sclk_hz=clock(amdsmi.AmdSmiClkType.GFX), mclk_hz=clock(amdsmi.AmdSmiClkType.MEM),
        ecc_correctable=integer(_get(ecc, "correctable_count")),
        ecc_uncorrectable=integer(_get(ecc, "uncorrectable_count")),
        pcie_replays=integer(_try(amdsmi.amdsmi_get_gpu_pci_replay_counter, h)),
    )  # fmt: skip


class AmdSmiLibrary:
    def __init__(self) -> None:
        if amdsmi is None:
            raise AmdSmiUnavailable("the amdsmi library is not importable")
        try:
            amdsmi.amdsmi_init()
            self.handles = list(amdsmi.amdsmi_get_processor_handles())
        except Exception as exc:
            raise AmdSmiUnavailable(f"amdsmi: {exc}") from None
        if not self.handles:
            raise AmdSmiUnavailable("amdsmi sees no GPU")

    def read(self) -> list[GpuRecord]:
        return [_record(i, h) for i, h in enumerate(self.handles)]

    def close(self) -> None:
        _try(amdsmi.amdsmi_shut_down)
