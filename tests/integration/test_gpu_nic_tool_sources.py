"""The tool sources for real: fake ``amd-smi``/``nvidia-smi``/``rdma`` executables on PATH answering each command line
with its captured output (faithful: the bytes of the capture, selected by argv like the real tool), fake sysfs trees."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ranksight.agent.collectors.gpu.collector import GpuCollector
from ranksight.agent.collectors.gpu.settings import GpuSettings
from ranksight.agent.collectors.nic.collector import NicCollector
from ranksight.agent.collectors.nic.settings import NicSettings
from ranksight.schemas.records import GpuLink, NicRecord
from tests.gpu_nic_support import METRICS, fake_tool, path_with, write_tree
from tests.support import run_cli

IONIC = METRICS / "nic" / "ionic"


def _tool_by_argv(bin_dir: Path, name: str, outputs: dict[str, Path]) -> None:
    """``name`` prints the capture registered for its first argument; other arguments: exit 2 like an unknown command."""
    table = {k: str(v) for k, v in outputs.items()}
    fake_tool(bin_dir, name, (
        "import sys\n"
        f"table = {table!r}\n"
        "path = table.get(sys.argv[1] if len(sys.argv) > 1 else '')\n"
        "if path is None:\n"
        "    sys.stderr.write('unknown command\\n'); sys.exit(2)\n"
        "sys.stdout.buffer.write(open(path, 'rb').read())\n"
    ))  # fmt: skip


async def test_amd_smi_source_adds_topology_links(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _tool_by_argv(tmp_path / "bin", "amd-smi", {
        "metric": METRICS / "amd" / "amd-smi_metric_-p_--json_changelog.txt",
        "topology": METRICS / "amd" / "amd-smi_topology_-a_-t_--json_changelog_c.txt",
    })  # fmt: skip
    monkeypatch.setenv("PATH", path_with(tmp_path / "bin"))
    collector = GpuCollector(None, GpuSettings(sources=["amd-smi"]))  # type: ignore[arg-type]
    assert await collector.detect()
    (gpu,) = await collector.collect()
    assert gpu.index == 0 and gpu.power_w == 10.0
    assert gpu.links == [GpuLink(name="pcie/gpu1", up=False, peer="0000:44:00.0")]
    without = GpuCollector(None, GpuSettings(sources=["amd-smi"], links=False))  # type: ignore[arg-type]
    assert await without.detect()
    assert (await without.collect())[0].links == []


async def test_amd_smi_without_topology_keeps_its_metrics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tool_by_argv(
        tmp_path / "bin", "amd-smi", {"metric": METRICS / "amd" / "amd-smi_metric_-p_--json_changelog.txt"}
    )
    monkeypatch.setenv("PATH", path_with(tmp_path / "bin"))
    collector = GpuCollector(None, GpuSettings(sources=["amd-smi"]))  # type: ignore[arg-type]
    assert await collector.detect()
    (gpu,) = await collector.collect()
    assert gpu.power_w == 10.0 and gpu.links == []


async def test_amd_smi_monitor_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _tool_by_argv(
        tmp_path / "bin", "amd-smi", {"monitor": METRICS / "amd" / "amd-smi_monitor_mi300a_docs.txt"}
    )
    monkeypatch.setenv("PATH", path_with(tmp_path / "bin"))
    collector = GpuCollector(None, GpuSettings(sources=["amd-smi", "amd-smi-monitor"]))  # type: ignore[arg-type]
    assert await collector.detect() and collector.health.source == "amd-smi-monitor"
    assert [g.power_w for g in await collector.collect()] == [49.0, 42.0, 33.0, 40.0]


async def test_nvidia_smi_xml_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _tool_by_argv(
        tmp_path / "bin", "nvidia-smi", {"-q": METRICS / "nvidia" / "nvidia-smi-q-x_a100-sxm4_v12.xml"}
    )
    monkeypatch.setenv("PATH", path_with(tmp_path / "bin"))
    collector = GpuCollector(None, GpuSettings(sources=["nvml", "nvidia-smi-xml", "nvidia-smi"]))  # type: ignore[arg-type]
    assert await collector.detect() and collector.health.source == "nvidia-smi-xml"
    (gpu,) = await collector.collect()
    assert gpu.pcie_replays == 0 and gpu.ecc_uncorrectable == 0 and gpu.power_cap_w == 500.0


def _ionic_sysfs(root: Path) -> None:
    """An ionic RDMA port as its driver shows it in sysfs: state and rate but no counters directory."""
    vendor = (IONIC / "dme_sys_class_infiniband_ionic_1_device_vendor.txt").read_text().strip()
    write_tree(root, {
        "class/infiniband/ionic_1/device/vendor": vendor,
        "class/infiniband/ionic_1/ports/1/state": "4: ACTIVE",
        "class/infiniband/ionic_1/ports/1/phys_state": "5: LinkUp",
        "class/infiniband/ionic_1/ports/1/rate": "400 Gb/sec (4X NDR)",
    })  # fmt: skip


def _advancing_rdma(bin_dir: Path, tmp_path: Path) -> Path:
    """``rdma statistic -j`` printing the captured ionic statistics, each counter of ionic_1 advanced by the JSON dict
    in ``advance.json`` (what a busy port's next sample looks like)."""
    advance = tmp_path / "advance.json"
    advance.write_text("{}")
    fake_tool(bin_dir, "rdma", (
        "import json, sys\n"
        "assert sys.argv[1:] == ['statistic', '-j'], sys.argv\n"
        f"ports = json.load(open({str(IONIC / 'dme_rdma_statistic_j.txt')!r}))\n"
        f"extra = json.load(open({str(advance)!r}))\n"
        "for port in ports:\n"
        "    if port['ifname'] == 'ionic_1':\n"
        "        port.update({k: port[k] + v for k, v in extra.items()})\n"
        "print(json.dumps(ports))\n"
    ))  # fmt: skip
    return advance


async def test_rdma_statistic_fills_counters_sysfs_lacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _ionic_sysfs(tmp_path / "sys")
    advance = _advancing_rdma(tmp_path / "bin", tmp_path)
    monkeypatch.setenv("PATH", path_with(tmp_path / "bin"))
    collector = NicCollector(None, NicSettings(sysfs_root=tmp_path / "sys", netdevs=[]))  # type: ignore[arg-type]
    assert await collector.detect()
    (first,) = await collector.collect()
    assert isinstance(first, NicRecord) and first.name == "ionic_1/1" and first.state == "ACTIVE"
    assert first.speed_bps == 400e9 and first.tx_bytes == 3489656928 and first.rx_packets == 49221925
    assert first.tx_bps is None  # first sample: no rate yet
    advance.write_text(
        json.dumps({"tx_rdma_ucast_bytes": 10**9, "rx_rdma_cnp_pkts": 5000, "req_rx_pkt_seq_err": 7})
    )
    (second,) = await collector.collect()
    assert second.tx_bytes == 3489656928 + 10**9 and second.interval_s
    assert second.tx_bps == pytest.approx(10**9 * 8 / second.interval_s)
    assert second.rx_bps == 0
    assert second.congestion_per_s == pytest.approx(5000 / second.interval_s)
    assert second.errors_per_s == pytest.approx(7 / second.interval_s)


async def test_without_rdma_tool_ports_stay_counterless(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _ionic_sysfs(tmp_path / "sys")
    fake_tool(tmp_path / "bin", "rdma", "print('{{garbage')\n")
    monkeypatch.setenv("PATH", path_with(tmp_path / "bin"))
    collector = NicCollector(None, NicSettings(sysfs_root=tmp_path / "sys", netdevs=[]))  # type: ignore[arg-type]
    assert await collector.detect()
    (port,) = await collector.collect()
    assert port.state == "ACTIVE" and port.counters == {} and port.tx_bytes is None


def test_parse_gpu_cli_other_captured_formats() -> None:
    proc = run_cli("parse", "gpu", str(METRICS / "nvidia" / "nvidia-smi-q-x_a100-sxm4_v12.xml"),
                   "--source", "nvidia-smi-xml", "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)
    assert row["name"] == "NVIDIA A100-SXM4-80GB" and row["pcie_replays"] == 0 and row["power_w"] == 67.03
    proc = run_cli("parse", "gpu", str(METRICS / "amd" / "amd-smi_monitor_mi300a_docs.txt"),
                   "--source", "amd-smi-monitor", "--json")  # fmt: skip
    assert proc.returncode == 0 and [r["sclk_hz"] for r in json.loads(proc.stdout)] == [
        43e6,
        47e6,
        49e6,
        40e6,
    ]
    proc = run_cli("parse", "gpu", str(IONIC / "dme_rdma_link.txt"), "--source", "nvidia-smi-xml")
    assert proc.returncode == 1 and "is not nvidia-smi-xml output" in proc.stderr


async def test_ethtool_fills_a_netdev_without_statistics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_tree(tmp_path / "sys", {"class/net/enp132s0/operstate": "up", "class/net/enp132s0/speed": 400000})
    fake_tool(tmp_path / "bin", "ethtool", (
        "import sys\n"
        "assert sys.argv[1:] == ['-S', 'enp132s0'], sys.argv\n"
        f"sys.stdout.buffer.write(open({str(IONIC / 'dme_ethtool_S_enp132s0.txt')!r}, 'rb').read())\n"
    ))  # fmt: skip
    monkeypatch.setenv("PATH", path_with(tmp_path / "bin"))
    settings = NicSettings(sysfs_root=tmp_path / "sys", netdevs=["enp132s0"])
    collector = NicCollector(None, settings)  # type: ignore[arg-type]
    assert await collector.detect()
    (dev,) = await collector.collect()
    assert (dev.kind, dev.state, dev.speed_bps) == ("netdev", "up", 400e9)
    assert (dev.tx_bytes, dev.rx_packets) == (3606, 3116274) and dev.counters[
        "octets_rx_ok"
    ] == 75542062581996
    settings.tool_counters = False  # sysfs only: the netdev stays counter-less
    (plain,) = await NicCollector(None, settings).collect()  # type: ignore[arg-type]
    assert plain.counters == {} and plain.tx_bytes is None
