"""The three NVIDIA sources on one real H100 80GB HBM3, driver 580.159.04 (``fixtures/metrics/nvidia/h100-...``).

On that machine they disagreed: no power from the XML source (driver 580 moved it to ``average_power_draw`` /
``instant_power_draw``), NVML counting the 480 MiB the driver reserves as used memory (nvidia-smi does not), no HBM
temperature from NVML. The ``nvidia-smi -q -x`` and ``--query-gpu`` captures were taken seconds apart at idle, so every
field both report agrees exactly but power (a 1 s average, read at slightly different times). NVML is not installed
here: the ``nvml`` source runs against a fake ``pynvml`` answering what nvidia-ml-py 13.610.43 answered on that kind of
machine (the ``nvml`` record of ``ranksight_sources_idle.json``; v2 memory info: used 0, reserved 480 MiB;
``NVML_FI_DEV_MEMORY_TEMP``: an unsigned int).
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest

from ranksight.agent.collectors.gpu import nvml as nvml_source
from ranksight.agent.collectors.gpu.nvidia_smi import QUERY_FIELDS, parse_nvidia_smi_csv
from ranksight.agent.collectors.gpu.nvidia_smi_xml import parse_nvidia_smi_xml
from ranksight.schemas.records import GpuRecord
from ranksight.schemas.structs import to_builtins
from tests.gpu_nic_support import METRICS

H100 = METRICS / "nvidia" / "h100-80gb-hbm3_580.159.04"
MIB = 1024**2
RESERVED = 480 * MIB  # "Reserved : 480 MiB" in nvidia-smi -q; what NVML's v1 memory info counts as used
IDLE = json.loads((H100 / "ranksight_sources_idle.json").read_text())


def _fields(record: GpuRecord, *leave_out: str) -> dict[str, Any]:
    fields = to_builtins(record)
    for name in ("source", *leave_out):
        fields.pop(name)
    return fields


def test_xml_v13_readings() -> None:
    (gpu,) = parse_nvidia_smi_xml((H100 / "nvidia-smi-q-x.xml").read_bytes())
    assert gpu.index == 0 and gpu.source == "nvidia-smi-xml" and gpu.vendor == "nvidia"
    assert gpu.uuid == "GPU-cc03b035-6437-402b-5997-448021daebe8" and gpu.bus_id == "00000000:00:06.0"
    assert gpu.name == "NVIDIA H100 80GB HBM3" and gpu.utilization_pct == 0.0
    # <average_power_draw>70.11 W</average_power_draw> <instant_power_draw>70.51 W</instant_power_draw>: the average,
    # which is nvidia-smi's power.draw and NVML's nvmlDeviceGetPowerUsage on Hopper
    assert gpu.power_w == 70.11 and gpu.power_cap_w == 700.0
    # used 0 MiB of 81559 MiB; the 480 MiB "reserved" is not in "used"
    assert gpu.memory_used_bytes == 0 and gpu.memory_total_bytes == 81559 * MIB
    assert gpu.temperature_edge_c == 32.0 and gpu.temperature_memory_c == 33.0
    assert gpu.temperature_junction_c is None
    assert gpu.sclk_hz == 345e6 and gpu.mclk_hz == 2619e6
    assert (gpu.ecc_correctable, gpu.ecc_uncorrectable, gpu.pcie_replays) == (0, 0, 0)
    assert gpu.throttled is False and gpu.throttle_reasons == []  # gpu_idle is active: not a slowdown


def test_xml_power_layouts() -> None:
    """The average where the report has one, else the instantaneous draw (GPUs without an average, as GA100), else
    the single ``power_draw`` of DTD v12 (driver 535) and of the older ``power_readings``."""
    xml = (H100 / "nvidia-smi-q-x.xml").read_text()
    average = "<average_power_draw>70.11 W</average_power_draw>"
    instant = "<instant_power_draw>70.51 W</instant_power_draw>"
    assert average in xml and instant in xml

    def power(text: str) -> float | None:
        (gpu,) = parse_nvidia_smi_xml(text.encode())
        return gpu.power_w

    assert power(xml) == 70.11
    assert power(xml.replace(average, "<average_power_draw>N/A</average_power_draw>")) == 70.51
    v12 = xml.replace(average, "<power_draw>67.03 W</power_draw>").replace(instant, "")
    assert power(v12) == 67.03
    assert power(v12.replace("gpu_power_readings>", "power_readings>")) == 67.03
    assert power(xml.replace(average, "").replace(instant, "")) is None


def test_xml_and_both_csv_captures_agree() -> None:
    (xml,) = parse_nvidia_smi_xml((H100 / "nvidia-smi-q-x.xml").read_bytes())
    (csv,) = parse_nvidia_smi_csv((H100 / "query-gpu.csv").read_bytes())
    (bare,) = parse_nvidia_smi_csv((H100 / "query-gpu-noheader-nounits.csv").read_bytes())
    # the noheader capture is in query_fields.txt's order, which is QUERY_FIELDS's
    assert (H100 / "query_fields.txt").read_text().strip() == ",".join(QUERY_FIELDS)
    assert (csv.power_w, bare.power_w) == (70.12, 70.10)
    assert csv.memory_used_bytes == bare.memory_used_bytes == 0
    assert csv.temperature_memory_c == bare.temperature_memory_c == 33.0
    for record in (csv, bare):
        assert record.power_w == pytest.approx(xml.power_w, abs=2.0)
        # driver 580's --help-query-gpu has no PCIe replay field: null from --query-gpu, 0 in the XML
        assert record.pcie_replays is None
        assert _fields(record, "power_w", "pcie_replays") == _fields(xml, "power_w", "pcie_replays")
    assert xml.pcie_replays == 0
    # '"power.limit" or "gpu.power.requested_limit"' and the like
    lines = (H100 / "help-query-gpu.txt").read_text().splitlines()
    names = {part for line in lines if line.startswith('"') for part in line.split('"')[1::2]}
    assert set(QUERY_FIELDS) <= names
    assert not [name for name in names if "replay" in name.lower()]


# --- the nvml source against a fake pynvml ------------------------------------------------------------------------


class FakeNvmlError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


NOT_SUPPORTED, FUNCTION_NOT_FOUND, VERSION_MISMATCH = 3, 13, 25
MEMORY_V2 = 0x02000028  # pynvml.nvmlMemory_v2
MEMORY_TEMP = 82  # pynvml.NVML_FI_DEV_MEMORY_TEMP
# the members of the nvmlValue_t union by nvmlValueType_t (nvml.h)
UNION = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")


def _field_value(field_id: int, ret: int = 0, value_type: int = 1, value: float = 0) -> SimpleNamespace:
    """A ``c_nvmlFieldValue_t``: ``valueType`` names the member of the ``value`` union that holds the reading."""
    members: dict[str, float] = dict.fromkeys(UNION, 0)
    members[UNION[value_type]] = value
    union = SimpleNamespace(**members)
    return SimpleNamespace(fieldId=field_id, nvmlReturn=ret, valueType=value_type, value=union)


def fake_pynvml(
    *, v2: int | None = 0, memory_temp: SimpleNamespace | int | None = None, old_api: bool = False
) -> SimpleNamespace:
    """nvidia-ml-py as on the real H100 at idle (the ``nvml`` record of ``ranksight_sources_idle.json``).

    ``v2``: the error ``nvmlDeviceGetMemoryInfo_v2`` raises, 0 for none; ``memory_temp``: the field value answered for
    ``NVML_FI_DEV_MEMORY_TEMP`` or the error the call raises (default: 39 C, as nvidia-smi read it); ``old_api``: an
    nvidia-ml-py from before ``nvmlMemory_v2`` (its ``nvmlDeviceGetMemoryInfo`` takes no version)."""
    real = IDLE["nvml"][0]
    total, v1_used = real["memory_total_bytes"], real["memory_used_bytes"]
    assert v1_used == RESERVED

    def memory_info(handle: str, version: int | None = None) -> SimpleNamespace:
        if not version:
            return SimpleNamespace(total=total, free=total - v1_used, used=v1_used)
        assert version == MEMORY_V2
        if v2:
            raise FakeNvmlError(v2)
        return SimpleNamespace(version=version, total=total, reserved=RESERVED, free=total - RESERVED, used=0)

    def field_values(handle: str, ids: list[int]) -> list[SimpleNamespace]:
        assert ids == [MEMORY_TEMP]
        if isinstance(memory_temp, int):
            raise FakeNvmlError(memory_temp)
        return [memory_temp or _field_value(MEMORY_TEMP, value=39)]

    def unsupported(*args: Any) -> Any:
        raise FakeNvmlError(NOT_SUPPORTED)

    clocks = {1: real["sclk_hz"] / 1e6, 2: real["mclk_hz"] / 1e6}
    fake = SimpleNamespace(
        NVMLError=FakeNvmlError,
        NVML_TEMPERATURE_GPU=0, NVML_CLOCK_SM=1, NVML_CLOCK_MEM=2, NVML_VOLATILE_ECC=0,
        NVML_MEMORY_ERROR_TYPE_CORRECTED=0, NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1, NVML_NVLINK_MAX_LINKS=18,
        nvmlMemory_v2=MEMORY_V2, NVML_FI_DEV_MEMORY_TEMP=MEMORY_TEMP,
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: f"handle{i}",
        nvmlDeviceGetUUID=lambda h: real["uuid"], nvmlDeviceGetName=lambda h: real["name"],
        nvmlDeviceGetPciInfo=lambda h: SimpleNamespace(busId=real["bus_id"].encode()),
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=0, memory=0),
        nvmlDeviceGetMemoryInfo=memory_info,
        nvmlDeviceGetPowerUsage=lambda h: round(real["power_w"] * 1000),
        nvmlDeviceGetEnforcedPowerLimit=lambda h: round(real["power_cap_w"] * 1000),
        nvmlDeviceGetTemperature=lambda h, kind: int(real["temperature_edge_c"]),
        nvmlDeviceGetClockInfo=lambda h, kind: int(clocks[kind]),
        nvmlDeviceGetTotalEccErrors=lambda h, kind, counter: 0,
        nvmlDeviceGetPcieReplayCounter=lambda h: real["pcie_replays"],
        nvmlDeviceGetCurrentClocksEventReasons=lambda h: 0x1,  # gpu_idle
        nvmlDeviceGetNvLinkState=unsupported,  # a VM without NVLink peers
        nvmlDeviceGetFieldValues=field_values,
    )  # fmt: skip
    if old_api:
        del fake.nvmlMemory_v2
        fake.nvmlDeviceGetMemoryInfo = lambda handle: memory_info(handle)
    return fake


def _read(monkeypatch: pytest.MonkeyPatch, fake: SimpleNamespace) -> GpuRecord:
    monkeypatch.setattr(nvml_source, "pynvml", fake)
    session = nvml_source.Nvml()
    try:
        (gpu,) = session.read()
    finally:
        session.close()
    return gpu


def test_nvml_reads_what_nvidia_smi_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = _read(monkeypatch, fake_pynvml())
    assert gpu.source == "nvml" and gpu.memory_used_bytes == 0 and gpu.temperature_memory_c == 39.0
    assert gpu.memory_total_bytes == 81559 * MIB and gpu.power_w == 72.746
    # field by field as the nvidia-smi source read that GPU moments later (power within 2 W; the CSV has no replay
    # counter), and as the XML source read it but for the power it missed then
    smi = msgspec.convert(IDLE["nvidia-smi"][0], GpuRecord)
    xml = msgspec.convert(IDLE["nvidia-smi-xml"][0], GpuRecord)
    assert gpu.power_w == pytest.approx(smi.power_w, abs=2.0)
    assert _fields(gpu, "power_w", "pcie_replays") == _fields(smi, "power_w", "pcie_replays")
    assert _fields(gpu, "power_w") == _fields(xml, "power_w")


@pytest.mark.parametrize(
    ("fake", "used", "memory_c"),
    [
        pytest.param(fake_pynvml(v2=FUNCTION_NOT_FOUND), RESERVED, 39.0, id="driver-without-memory-info-v2"),
        pytest.param(fake_pynvml(v2=VERSION_MISMATCH), RESERVED, 39.0, id="driver-refuses-v2-struct"),
        pytest.param(fake_pynvml(old_api=True), RESERVED, 39.0, id="nvidia-ml-py-before-nvmlMemory_v2"),
        pytest.param(fake_pynvml(memory_temp=_field_value(MEMORY_TEMP, ret=NOT_SUPPORTED)), 0, None,
                     id="memory-temp-unsupported"),
        pytest.param(fake_pynvml(memory_temp=FUNCTION_NOT_FOUND), 0, None, id="field-values-call-fails"),
        pytest.param(fake_pynvml(memory_temp=_field_value(MEMORY_TEMP, value=0xFFFFFFFF)), 0, None, id="sentinel"),
        pytest.param(fake_pynvml(memory_temp=_field_value(MEMORY_TEMP, value_type=0, value=41.0)), 0, 41.0,
                     id="double-reading"),
    ],
)  # fmt: skip
def test_nvml_fallbacks(
    monkeypatch: pytest.MonkeyPatch, fake: SimpleNamespace, used: int, memory_c: float | None
) -> None:
    gpu = _read(monkeypatch, fake)
    assert (gpu.memory_used_bytes, gpu.temperature_memory_c) == (used, memory_c)
    # the rest of the sample is still read
    assert gpu.memory_total_bytes == 81559 * MIB and gpu.power_w == 72.746


def test_nvml_without_the_memory_temperature_field(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_pynvml()
    del fake.NVML_FI_DEV_MEMORY_TEMP
    gpu = _read(monkeypatch, fake)
    assert gpu.temperature_memory_c is None and gpu.memory_used_bytes == 0
