"""The remaining captured GPU/NIC outputs parsed, with values hand-checked against each capture (units converted)."""

from __future__ import annotations

import pytest

from ranksight.agent.collectors.gpu.amd_smi import GpuToolParseError
from ranksight.agent.collectors.gpu.amd_smi_links import parse_amd_smi_topology
from ranksight.agent.collectors.gpu.amd_smi_monitor import parse_amd_smi_monitor
from ranksight.agent.collectors.gpu.nvidia_smi_xml import parse_nvidia_smi_xml
from ranksight.agent.collectors.nic.tools import (
    ToolParseError,
    parse_ethtool_stats,
    parse_rdma_statistic,
)  # fmt: skip
from ranksight.schemas.records import GpuLink
from tests.gpu_nic_support import METRICS

AMD, NVIDIA, IONIC = METRICS / "amd", METRICS / "nvidia", METRICS / "nic" / "ionic"
MIB, GIB = 1024**2, 1024**3


def test_nvidia_smi_q_x_a100() -> None:
    (gpu,) = parse_nvidia_smi_xml((NVIDIA / "nvidia-smi-q-x_a100-sxm4_v12.xml").read_bytes())
    assert gpu.index == 0 and gpu.source == "nvidia-smi-xml" and gpu.vendor == "nvidia"
    assert gpu.uuid == "GPU-513536b6-7d19-9063-b049-1e69664bb298" and gpu.bus_id == "00000000:01:00.0"
    assert gpu.name == "NVIDIA A100-SXM4-80GB"
    assert gpu.utilization_pct is None  # "N/A" (MIG mode)
    assert (
        gpu.memory_used_bytes == 50 * MIB and gpu.memory_total_bytes == 81920 * MIB
    )  # not a MIG slice's 19968 MiB
    assert gpu.power_w == 67.03 and gpu.power_cap_w == 500.0
    assert (
        gpu.temperature_edge_c == 27.0
        and gpu.temperature_memory_c == 44.0
        and gpu.temperature_junction_c is None
    )
    assert gpu.sclk_hz == 1275e6 and gpu.mclk_hz == 1593e6
    assert (gpu.ecc_correctable, gpu.ecc_uncorrectable, gpu.pcie_replays) == (0, 0, 0)
    assert gpu.throttled is False and gpu.throttle_reasons == []


def test_nvidia_smi_q_x_active_slowdown_and_ecc() -> None:
    xml = (NVIDIA / "nvidia-smi-q-x_a100-sxm4_v12.xml").read_text()
    xml = xml.replace(
        "<clocks_event_reason_hw_thermal_slowdown>Not Active",
        "<clocks_event_reason_hw_thermal_slowdown>Active",
    )
    xml = xml.replace("<volatile>\n                <sram_correctable>0</sram_correctable>",
                      "<volatile>\n                <sram_correctable>3</sram_correctable>")  # fmt: skip
    (gpu,) = parse_nvidia_smi_xml(xml.encode())
    assert gpu.throttled is True and gpu.throttle_reasons == ["hw_thermal_slowdown"]
    assert gpu.ecc_correctable == 3


@pytest.mark.parametrize(
    "garbage", [b"", b"<html>nope</html>", b"NVIDIA-SMI has failed", b"<nvidia_smi_log/>"]
)
def test_nvidia_smi_q_x_garbage(garbage: bytes) -> None:
    with pytest.raises(GpuToolParseError):
        parse_nvidia_smi_xml(garbage)


def test_amd_smi_topology_both_shapes() -> None:
    plain = parse_amd_smi_topology((AMD / "amd-smi_topology_--json_changelog_a.txt").read_bytes())
    assert plain == {0: [GpuLink(name="pcie/gpu1", up=False)], 1: [GpuLink(name="pcie/gpu0", up=False)]}
    detailed = parse_amd_smi_topology((AMD / "amd-smi_topology_-a_-t_--json_changelog_c.txt").read_bytes())
    assert detailed == {
        0: [GpuLink(name="pcie/gpu1", up=False, peer="0000:44:00.0")],
        1: [GpuLink(name="pcie/gpu0", up=False, peer="0000:08:00.0")],
    }
    with pytest.raises(GpuToolParseError):
        parse_amd_smi_topology(b"amd-smi: command not found")


def test_amd_smi_monitor_mi300a() -> None:
    gpus = parse_amd_smi_monitor((AMD / "amd-smi_monitor_mi300a_docs.txt").read_bytes())
    assert [g.index for g in gpus] == [0, 1, 2, 3]
    g2 = gpus[2]
    assert (g2.power_w, g2.temperature_junction_c, g2.temperature_memory_c) == (33.0, 30.0, 31.0)
    assert g2.sclk_hz == 49e6 and g2.utilization_pct == 2.0
    assert g2.memory_used_bytes is None and g2.memory_total_bytes is None  # GTT_USAGE is not VRAM


def test_amd_smi_monitor_mi300x_partitions() -> None:
    gpus = parse_amd_smi_monitor((AMD / "amd-smi_monitor_mi300x_cpx_nps4_docs.txt").read_bytes())
    assert [g.index for g in gpus] == list(range(8))  # the trailing "..." is skipped
    g0, g1 = gpus[0], gpus[1]
    assert (g0.power_w, g0.temperature_junction_c, g0.temperature_memory_c, g0.sclk_hz) == (
        183.0,
        49.0,
        48.0,
        1427e6,
    )
    assert g0.utilization_pct == 0.0
    assert g0.memory_used_bytes == int(0.3 * GIB) and g0.memory_total_bytes == 192 * GIB
    assert g1.power_w is None and g1.temperature_junction_c is None and g1.sclk_hz is None
    assert g1.memory_used_bytes == int(0.5 * GIB) and g1.memory_total_bytes == 48 * GIB
    with pytest.raises(GpuToolParseError):
        parse_amd_smi_monitor(b"GPU  POWER\n  0  12 W  extra 7 W\n")


def test_ethtool_stats_ionic() -> None:
    pf = parse_ethtool_stats((IONIC / "dme_ethtool_S_enp132s0.txt").read_bytes(), "enp132s0")
    assert (pf.name, pf.kind) == ("enp132s0", "netdev")
    assert (pf.tx_packets, pf.tx_bytes, pf.rx_packets, pf.rx_bytes) == (29, 3606, 3116274, 315945243)
    assert pf.counters["octets_tx_ok"] == 103623222172110 and pf.counters["frames_rx_ok"] == 69867940032
    assert len(pf.counters) == 607
    other = parse_ethtool_stats((IONIC / "dme_ethtool_S_enp68s0.txt").read_bytes(), "enp68s0")
    assert (other.tx_packets, other.tx_bytes, other.rx_bytes) == (25, 3086, 315941320)
    assert other.counters["octets_tx_ok"] == 509011967971838
    vf = parse_ethtool_stats((IONIC / "dme_ethtool_S_enp132s0v0.txt").read_bytes(), "enp132s0v0")
    assert (vf.tx_packets, vf.tx_bytes, vf.rx_packets, vf.rx_bytes) == (32438, 2884904, 3064455, 310422278)
    with pytest.raises(ToolParseError):
        parse_ethtool_stats(b"Cannot get stats strings information: Operation not supported\n", "eth9")


def test_rdma_statistic_ionic_and_mlx5() -> None:
    ports = parse_rdma_statistic((IONIC / "dme_rdma_statistic_j.txt").read_bytes())
    assert [p.name for p in ports] == ["rocep132s0/1", "rocep68s0/1", "ionic_1/1"]
    assert all(p.kind == "rdma" and p.tx_bytes == 0 and p.rx_packets == 0 for p in ports[:2])
    ionic = ports[2]  # bytes are bytes here (no 4-byte words), unicast plus multicast
    assert (ionic.tx_bytes, ionic.tx_packets) == (3489656928, 32852846)
    assert (ionic.rx_bytes, ionic.rx_packets) == (3087001744, 49221925)
    assert ionic.counters["req_rx_dup_response"] == 34
    assert {"tx_rdma_cnp_pkts", "rx_rdma_ecn_pkts", "req_rx_pkt_seq_err"} <= set(ports[0].counters)
    newer = parse_rdma_statistic((IONIC / "node-scraper_rdma_statistic_-j.json").read_bytes())
    assert [p.name for p in newer] == [f"ionic_{i}/1" for i in range(8)] + [f"mlx5_{i}/1" for i in range(4)]
    assert "tx_rdma_retx_pkts" in newer[0].counters and "port" not in newer[0].counters
    assert newer[8].tx_bytes is None and newer[8].counters["np_cnp_sent"] == 0  # mlx5: no ionic byte counters
    for garbage in (b"", b'{"ifname": "x"}', b'[{"port": 1}]'):
        with pytest.raises(ToolParseError):
            parse_rdma_statistic(garbage)
