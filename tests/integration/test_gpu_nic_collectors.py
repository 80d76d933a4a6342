"""GPU/NIC collectors for real: fake vendor tools on PATH (faithful: they print captured output), fake sysfs trees,
the real agent + nats-server + aggregator + DuckDB file, and the ``ranksight parse`` command."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import duckdb
import pytest

from ranksight.agent.collectors.base import CollectorUnavailable
from ranksight.agent.collectors.gpu.collector import GpuCollector
from ranksight.agent.collectors.gpu.settings import GpuSettings
from ranksight.api.client import query
from ranksight.settings import Settings
from tests.gpu_nic_support import (
    METRICS,
    SYSFS_TREE,
    fake_tool,
    nvidia_query_sections,
    path_with,
    printing_tool,
    write_tree,
)  # fmt: skip
from tests.support import agent, aggregator, ranksight_cmd, run_cli, wait_for

H200 = "nvidia-smi_capture_linux-x86_64__nvidia-h200__590.48.01.txt"


def _collector(tmp_path: Path, sources: list[str], timeout_s: float = 5.0) -> GpuCollector:
    settings = GpuSettings(sources=sources, command_timeout_s=timeout_s, sysfs_root=tmp_path / "empty")  # type: ignore[arg-type]
    return GpuCollector(None, settings)  # type: ignore[arg-type]  # ctx is not used by the GPU collector


async def test_fake_amd_smi_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    printing_tool(
        tmp_path / "bin", "amd-smi", (METRICS / "amd" / "amd-smi_metric_-p_--json_changelog.txt").read_bytes()
    )
    monkeypatch.setenv("PATH", path_with(tmp_path / "bin"))
    collector = _collector(tmp_path, ["amdsmi", "amd-smi", "rocm-smi", "sysfs"])
    assert await collector.detect()
    assert collector.health.source == "amd-smi"
    (gpu,) = await collector.collect()
    assert gpu.power_w == 10.0 and gpu.source == "amd-smi"


async def test_fake_nvidia_smi_answers_the_requested_fields(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Faithful fake: answers --query-gpu=<fields> --format=csv,noheader,nounits from the captured H200 "load" section.
    section = tmp_path / "section.csv"
    section.write_bytes(nvidia_query_sections(H200)[1])
    fake_tool(
        tmp_path / "bin",
        "nvidia-smi",
        f"""
import re, sys
rows = open({str(section)!r}).read().splitlines()
header = [re.sub(r" \\[.*\\]$", "", h) for h in rows[0].split(", ")]
header = [h.replace("clocks_event_reasons", "clocks_throttle_reasons") for h in header]
fields = [a.split("=", 1)[1] for a in sys.argv if a.startswith("--query-gpu=")][0].split(",")
for row in rows[1:]:
    cells = dict(zip(header, row.split(", ")))
    print(", ".join(re.sub(r" (MiB|W|MHz|%)$", "", cells[f]) for f in fields))
""",
    )
    monkeypatch.setenv("PATH", path_with(tmp_path / "bin"))
    collector = _collector(tmp_path, ["nvml", "nvidia-smi"])
    assert await collector.detect() and collector.health.source == "nvidia-smi"
    (gpu,) = await collector.collect()
    assert (
        gpu.name == "NVIDIA H200"
        and gpu.power_w == pytest.approx(627.40)
        and gpu.memory_used_bytes == 32362 * 2**20
    )


async def test_hanging_and_garbage_tools_fall_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_tool(tmp_path / "bin", "amd-smi", "import time\ntime.sleep(60)\n")
    fake_tool(tmp_path / "bin", "rocm-smi", "print('ERROR: GPU[0] : Unable to open device\\n{{{{garbage')\n")
    monkeypatch.setenv("PATH", path_with(tmp_path / "bin"))
    collector = _collector(tmp_path, ["amd-smi", "rocm-smi", "sysfs"], timeout_s=0.5)
    started = time.monotonic()
    with pytest.raises(CollectorUnavailable) as info:
        await collector.detect()
    assert time.monotonic() - started < 5
    message = str(info.value)
    assert "amd-smi timed out after 0.5s" in message and "rocm-smi: GpuToolParseError" in message
    assert "sysfs: no GPU" in message


async def test_sysfs_source_on_the_captured_tree(tmp_path: Path) -> None:
    collector = _collector(tmp_path, ["sysfs"])
    collector.settings.sysfs_root = SYSFS_TREE
    assert await collector.detect() and collector.health.source == "sysfs"
    (gpu,) = await collector.collect()
    assert gpu.bus_id == "0000:09:00.0"


async def test_agent_on_this_machine_reports_gpu_absent_and_runs_on(
    settings: Settings, tmp_path: Path
) -> None:
    settings.agent.collectors.gpu.sources = [
        "amd-smi",
        "rocm-smi",
        "sysfs",
        "nvidia-smi",
    ]  # no optional libraries
    settings.agent.collectors.gpu.sysfs_root = tmp_path / "no-sys"
    settings.agent.collectors.nic.sysfs_root = tmp_path / "no-sys"
    async with aggregator(settings) as agg, agent(settings, only=["heartbeat", "gpu", "nic"]):

        def health() -> dict | None:
            node = agg.state.nodes.nodes.get(("test", "node-a"))
            states = {c["name"]: c for c in node.collectors} if node else {}
            return states if states.get("gpu", {}).get("state") == "absent" else None

        states = await wait_for(health)
        assert states["gpu"]["state"] == "absent" and "no GPU source" in states["gpu"]["last_error"]
        assert states["nic"]["state"] == "absent" and states["heartbeat"]["state"] == "ok"


async def test_nic_end_to_end_link_down_alert_and_history(settings: Settings, tmp_path: Path) -> None:
    root = tmp_path / "sys"
    port = "class/infiniband/mlx5_0/ports/1"
    write_tree(root, {f"{port}/state": "4: ACTIVE", f"{port}/rate": "400 Gb/sec (4X NDR)",
                      f"{port}/counters/port_xmit_data": 1000, f"{port}/counters/port_rcv_data": 1000})  # fmt: skip
    nic = settings.agent.collectors.nic
    nic.sysfs_root, nic.interval_s, nic.ttl_s, nic.traffic_counters_every_s = root, 0.2, 1.0, 0.6
    async with aggregator(settings) as agg, agent(settings, only=["nic"]):
        nics = agg.state.nics.devices
        await wait_for(
            lambda: (dev := nics.get(("test", "node-a", "mlx5_0/1"))) and dev.record.tx_bps is not None
        )
        write_tree(root, {f"{port}/counters/port_xmit_data": 5000})
        # live: every counter's latest value, though records after the first carry only the changed ones
        await wait_for(lambda: nics[("test", "node-a", "mlx5_0/1")].record.counters["port_xmit_data"] == 5000)
        write_tree(root, {f"{port}/state": "1: DOWN"})
        await wait_for(lambda: any(a.rule == "nic_link_down" for a in agg.engine.active.values()))
        response = await query(settings, "nics")
        assert (
            response.ok
            and response.rows[0]["name"] == "mlx5_0/1"
            and response.rows[0]["freshness"] == "alive"
        )
        assert response.rows[0]["state"] == "DOWN"
        # the live port holds every counter though its later records carried only the changed one
        assert response.rows[0]["counters"] == {"port_xmit_data": 5000, "port_rcv_data": 1000}
        assert response.rows[0]["counters_full"] is True
        write_tree(root, {f"{port}/state": "4: ACTIVE"})
        await wait_for(lambda: not any(a.rule == "nic_link_down" for a in agg.engine.active.values()))
    con = duckdb.connect(str(settings.db_path()), read_only=True)
    states = {s for (s,) in con.execute("SELECT state FROM nic WHERE name = 'mlx5_0/1'").fetchall()}
    assert states == {"ACTIVE", "DOWN"}
    rows = [(full, counters and json.loads(counters)) for full, counters in
            con.execute("SELECT counters_full, counters FROM nic WHERE name = 'mlx5_0/1' ORDER BY seq").fetchall()]  # fmt: skip
    # the first record carries every counter, the later ones (within counters_full_every_s) only the changed one, whose
    # map history leaves out by default (aggregator.ingest.nic_history_counters): those rows keep their typed columns
    assert rows[0] == (True, {"port_xmit_data": 1000, "port_rcv_data": 1000})
    assert set(rows[1:]) == {(False, None)}
    assert len(rows) > 2
    assert (
        con.execute("SELECT count(*) FROM alerts WHERE rule = 'nic_link_down'").fetchone()[0] == 2
    )  # fired, resolved


def test_parse_gpu_cli_json(tmp_path: Path) -> None:
    proc = run_cli(
        "parse", "gpu", str(METRICS / "amd" / "rocm-smi_mi100_rocm602.json"), "--source", "rocm-smi", "--json"
    )
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert len(rows) == 4 and list(rows[0]) == [
        "index", "name", "utilization_pct", "memory_used_bytes", "memory_total_bytes", "power_w", "power_cap_w",
        "temperature_edge_c", "temperature_junction_c", "temperature_memory_c", "sclk_hz", "mclk_hz",
        "ecc_correctable", "ecc_uncorrectable", "pcie_replays",
    ]  # fmt: skip
    assert rows[3]["temperature_junction_c"] == 53.0 and rows[3]["sclk_hz"] == 300e6
    section = tmp_path / "h200.csv"
    section.write_bytes(nvidia_query_sections(H200)[0])
    proc = run_cli("parse", "gpu", str(section), "--source", "nvidia-smi", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)[0]["memory_total_bytes"] == 143771 * 2**20


def test_parse_gpu_cli_garbage_exits_1(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.txt"
    garbage.write_text("WARNING: no devices\n")
    proc = run_cli("parse", "gpu", str(garbage), "--source", "amd-smi")
    assert proc.returncode == 1 and "is not amd-smi output" in proc.stderr and proc.stdout == ""


def test_parse_nic_cli_json(tmp_path: Path) -> None:
    proc = run_cli("parse", "nic", str(SYSFS_TREE), "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    assert rows["mlx4_0/2"] == {
        "name": "mlx4_0/2", "kind": "rdma", "state": "ACTIVE", "speed_bps": 40e9, "tx_bytes": 26540356890 * 4,
        "rx_bytes": 2460436784 * 4, "tx_packets": 88622850, "rx_packets": 89332064,
        "counters": rows["mlx4_0/2"]["counters"],
    }  # fmt: skip
    assert rows["mlx4_0/2"]["counters"]["port_xmit_wait"] == int(
        (SYSFS_TREE / "class/infiniband/mlx4_0/ports/2/counters/port_xmit_wait").read_text()
    )
    assert rows["eth0"]["kind"] == "netdev" and rows["eth0"]["counters"] == {"carrier_changes": 2}
    proc = run_cli("parse", "nic", str(tmp_path))
    assert proc.returncode == 1 and "not a sysfs root" in proc.stderr


def test_cli_output_into_a_closed_pipe_stops_quietly(tmp_path: Path) -> None:
    header, row = nvidia_query_sections(H200)[0].rstrip(b"\n").split(b"\n")[:2]
    big = tmp_path / "many.csv"
    big.write_bytes(header + b"\n" + (row + b"\n") * 3000)  # far more JSON than a pipe buffer holds
    proc = subprocess.Popen(ranksight_cmd("parse", "gpu", str(big), "--source", "nvidia-smi", "--json"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(10).startswith(b"[")
    proc.stdout.close()  # like `| head -c 10`
    assert proc.wait(timeout=60) == 141
    assert proc.stderr.read() == b""
