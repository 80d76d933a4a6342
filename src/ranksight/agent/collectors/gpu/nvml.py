"""NVIDIA GPUs through NVML (``nvidia-ml-py``, imported as ``pynvml``; optional: absent means "try nvidia-smi").

Each reading is its own NVML call; a call the GPU does not support (``NVMLError``) is a null value, not a failure of the
sample. NVML is blocking C: :func:`read_nvml` runs on a worker thread (the collector calls it with ``asyncio.to_thread``).

The readings are the ones nvidia-smi reports, so that a GPU's values do not jump when the collector falls back from
this source to ``nvidia-smi-xml`` or ``nvidia-smi`` (checked on a real H100, driver 580, nvidia-ml-py 13.610): memory
used without the driver-reserved memory, power from ``nvmlDeviceGetPowerUsage`` (nvidia-smi's ``power.draw``: the 1 s
average on Ampere (except GA100) and newer GPUs, instantaneous on older ones), HBM temperature from the
``NVML_FI_DEV_MEMORY_TEMP`` field.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ranksight.agent.collectors.base import CollectorUnavailable
from ranksight.agent.collectors.gpu.nvidia_smi import throttle_reasons
from ranksight.agent.collectors.gpu.values import number
from ranksight.schemas.records import GpuLink, GpuRecord

try:
    import pynvml
except Exception:  # absent, or a broken install: either way NVML is not usable here
    pynvml = None


class NvmlUnavailable(CollectorUnavailable):
    """``nvidia-ml-py`` is not installed or NVML cannot initialise (no driver, no GPU)."""


def _try(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except pynvml.NVMLError:
        return None


def _text(value: Any) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


# nvmlValueType_t -> the member of the nvmlValue_t union that holds a field value of that type (nvml.h)
_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def _memory(handle: Any) -> Any:
    """Memory info whose ``used`` is nvidia-smi's: the v2 struct leaves out the memory the driver reserves (480 MiB
    on an H100 80GB), which v1 counts as used. v1 where v2 is not there: an nvidia-ml-py without ``nvmlMemory_v2``, or
    a driver without ``nvmlDeviceGetMemoryInfo_v2`` or that refuses the version (``NVMLError``)."""
    version = getattr(pynvml, "nvmlMemory_v2", None)
    if version is not None:
        try:
            return pynvml.nvmlDeviceGetMemoryInfo(handle, version=version)
        except pynvml.NVMLError:
            pass
    return _try(pynvml.nvmlDeviceGetMemoryInfo, handle)


def _field(handle: Any, name: str) -> float | None:
    """One NVML field value (``nvmlDeviceGetFieldValues``); ``None`` when this nvidia-ml-py does not know the field, the
    call fails, or the GPU does not support it (the value's own ``nvmlReturn`` is not success)."""
    field_id = getattr(pynvml, name, None)
    if field_id is None:
        return None
    values = _try(pynvml.nvmlDeviceGetFieldValues, handle, [field_id])
    if not values or values[0].nvmlReturn != 0:  # NVML_SUCCESS
        return None
    member = _VALUE_MEMBERS.get(values[0].valueType)
    return None if member is None else number(getattr(values[0].value, member))


def _links(handle: Any) -> list[GpuLink]:
    links = []
    for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
        state = _try(pynvml.nvmlDeviceGetNvLinkState, handle, link)
        if state is not None:
            links.append(GpuLink(name=f"nvlink{link}", up=bool(state)))
    return links


def _record(index: int, h: Any) -> GpuRecord:
    util = _try(pynvml.nvmlDeviceGetUtilizationRates, h)
    mem = _memory(h)
    pci = _try(pynvml.nvmlDeviceGetPciInfo, h)
    reasons_fn = (
        getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
    )
    reasons = throttle_reasons(_try(reasons_fn, h))

    def ecc(kind: int) -> Any:
        return _try(pynvml.nvmlDeviceGetTotalEccErrors, h, kind, pynvml.NVML_VOLATILE_ECC)

    def clock(kind: int) -> float | None:
        return number(_try(pynvml.nvmlDeviceGetClockInfo, h, kind), 1e6)

    return GpuRecord(
        index=index, vendor="nvidia", source="nvml",
        uuid=_text(_try(pynvml.nvmlDeviceGetUUID, h)), name=_text(_try(pynvml.nvmlDeviceGetName, h)),
        bus_id=_text(pci.busId) if pci is not None else None,
        utilization_pct=number(util.gpu) if util is not None else None,
        memory_used_bytes=mem.used if mem is not None else None,
        memory_total_bytes=mem.total if mem is not None else None,
        power_w=number(_try(pynvml.nvmlDeviceGetPowerUsage, h), 1e-3),
        power_cap_w=number(_try(pynvml.nvmlDeviceGetEnforcedPowerLimit, h), 1e-3),
        temperature_edge_c=number(_try(pynvml.nvmlDeviceGetTemperature, h, pynvml.NVML_TEMPERATURE_GPU)),
        temperature_memory_c=_field(h, "NVML_FI_DEV_MEMORY_TEMP"),
        sclk_hz=clock(pynvml.NVML_CLOCK_SM), mclk_hz=clock(pynvml.NVML_CLOCK_MEM),
        ecc_correctable=ecc(pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
        ecc_uncorrectable=ecc(pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
        pcie_replays=_try(pynvml.nvmlDeviceGetPcieReplayCounter, h),
        throttled=None if reasons is None else bool(reasons), throttle_reasons=reasons or [],
        links=_links(h),
    )  # fmt: skip


class Nvml:
    """An initialised NVML session; ``close`` shuts it down."""

    def __init__(self) -> None:
        if pynvml is None:
            raise NvmlUnavailable("nvidia-ml-py is not installed")
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NvmlUnavailable(f"NVML: {exc}") from None

    def read(self) -> list[GpuRecord]:
        count = pynvml.nvmlDeviceGetCount()
        return [_record(i, pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]

    def close(self) -> None:
        _try(pynvml.nvmlShutdown)
