"""Parser of ``nvidia-smi -q -x`` (the full XML report), the NVIDIA source that also gives PCIe replays and per-GPU ECC.

Faithful to the captured A100-SXM4 report (DTD ``nvsmi_device_v12``, driver 535) and H100 report (``v13``, driver
580: power as ``average_power_draw``/``instant_power_draw``): one ``<gpu id="<bus id>">`` per GPU in index order,
readings as "67.03 W", "27 C", "1275 MHz", "81920 MiB", "N/A" when unsupported; ECC under ``ecc_errors/volatile`` as
``sram_/dram_`` (un)correctable counts (older DTDs: ``single_bit``/``double_bit`` ``total``); slowdown reasons under
``clocks_event_reasons`` (older: ``clocks_throttle_reasons``) as "Active"/"Not Active". MIG instances repeat
``fb_memory_usage`` deeper in the tree, so only the GPU's direct children are read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ranksight.agent.collectors.gpu.amd_smi import GpuToolParseError
from ranksight.agent.collectors.gpu.nvidia_smi import THROTTLE_BITS
from ranksight.agent.collectors.gpu.values import integer, is_missing, number
from ranksight.schemas.records import GpuRecord

MIB, MHZ = 1024.0**2, 1e6  # "81920 MiB", "1275 MHz" (the units the report uses)
_SLOWDOWNS = set(THROTTLE_BITS.values())

if TYPE_CHECKING:
    import xml.etree.ElementTree as ET


def _text(gpu: ET.Element, *paths: str) -> str | None:
    """Text of the first path present with a value."""
    for path in paths:
        node = gpu.find(path)
        if node is not None and not is_missing(node.text):
            return (node.text or "").strip()
    return None


def _scaled(gpu: ET.Element, factor: float, *paths: str) -> float | None:
    return number(_text(gpu, *paths), factor)


def _ecc(gpu: ET.Element, kind: str) -> int | None:
    """Volatile ECC count of ``kind`` ("correctable"/"uncorrectable") over SRAM and DRAM, or the older totals."""
    volatile = gpu.find("ecc_errors/volatile")
    if volatile is None:
        return None
    counts = [integer(c.text) for c in volatile if c.tag.endswith(f"_{kind}")]
    if not counts:  # DTD <= v11: single_bit (correctable) / double_bit (uncorrectable) totals
        counts = [
            integer(_text(volatile, "single_bit/total" if kind == "correctable" else "double_bit/total"))
        ]
    known = [c for c in counts if c is not None]
    return sum(known) if known else None


def _throttle(gpu: ET.Element) -> tuple[bool | None, list[str]]:
    reasons = gpu.find("clocks_event_reasons")
    if reasons is None:
        reasons = gpu.find("clocks_throttle_reasons")
    if reasons is None:
        return None, []
    active = []
    for child in reasons:
        name = child.tag.removeprefix("clocks_event_reason_").removeprefix("clocks_throttle_reason_")
        if name in _SLOWDOWNS and (child.text or "").strip() == "Active":
            active.append(name)
    return bool(active), active


def _power(gpu: ET.Element) -> float | None:
    """Board power as nvidia-smi's ``power.draw`` and NVML's ``nvmlDeviceGetPowerUsage`` give it, so that the three
    NVIDIA sources agree: the 1 s average on Ampere (except GA100) and newer GPUs, the instantaneous draw on older ones.
    Driver 580 (DTD v13) writes both, ``average_power_draw`` and ``instant_power_draw`` (the average "N/A" where the GPU
    has none); DTD v12 (driver 535) writes the one reading as ``power_draw``, older DTDs under ``power_readings``. Not
    the instantaneous draw first: on a real H100 ramping up under load it read 932 W while the average, which NVML
    reports, read 131 W."""
    return _scaled(
        gpu, 1.0,
        "gpu_power_readings/average_power_draw", "gpu_power_readings/instant_power_draw",
        "gpu_power_readings/power_draw", "power_readings/power_draw",
    )  # fmt: skip


def parse_nvidia_smi_xml(data: bytes) -> list[GpuRecord]:
    # imported here: the XML parser is half a MiB of every agent's memory, and only this source uses it
    import xml.etree.ElementTree as ET

    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        raise GpuToolParseError(f"nvidia-smi -q -x: not XML ({exc})") from None
    gpus = root.findall("gpu")
    if root.tag != "nvidia_smi_log" or not gpus:
        raise GpuToolParseError("nvidia-smi -q -x: no <nvidia_smi_log> with <gpu> elements")
    records = []
    for index, gpu in enumerate(gpus):  # nvidia-smi lists GPUs in index order
        throttled, reasons = _throttle(gpu)
        used = _scaled(gpu, MIB, "fb_memory_usage/used")
        total = _scaled(gpu, MIB, "fb_memory_usage/total")
        records.append(GpuRecord(
            index=index, vendor="nvidia", source="nvidia-smi-xml",
            uuid=_text(gpu, "uuid"), bus_id=gpu.get("id") or _text(gpu, "pci/pci_bus_id"),
            name=_text(gpu, "product_name"),
            utilization_pct=_scaled(gpu, 1.0, "utilization/gpu_util"),
            memory_used_bytes=None if used is None else int(used),
            memory_total_bytes=None if total is None else int(total),
            power_w=_power(gpu),
            power_cap_w=_scaled(gpu, 1.0, "gpu_power_readings/current_power_limit",
                                "power_readings/enforced_power_limit", "power_readings/power_limit"),
            temperature_edge_c=_scaled(gpu, 1.0, "temperature/gpu_temp"),
            temperature_memory_c=_scaled(gpu, 1.0, "temperature/memory_temp"),
            sclk_hz=_scaled(gpu, MHZ, "clocks/sm_clock"),
            mclk_hz=_scaled(gpu, MHZ, "clocks/mem_clock"),
            ecc_correctable=_ecc(gpu, "correctable"), ecc_uncorrectable=_ecc(gpu, "uncorrectable"),
            pcie_replays=integer(_text(gpu, "pci/replay_counter")),
            throttled=throttled, throttle_reasons=reasons,
        ))  # fmt: skip
    return records
