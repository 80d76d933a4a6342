"""`ranksight parse ras FILE [--json]` as a process: the JSON contract, the table, and exit 1 on garbage."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import FIXTURES
from tests.support import run_cli

RAS = FIXTURES / "ras"
REQUIRED = {"format", "version", "health", "summary", "communicators", "missing_processes", "dead_processes",
            "mismatches", "timeouts"}  # fmt: skip


def test_parse_ras_json_contract_on_a_real_capture() -> None:
    proc = run_cli(
        "parse", "ras", str(RAS / "rccl_2.28.3_text_status_incomplete_2node_missing_rank3.txt"), "--json"
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert REQUIRED <= set(out)
    assert (out["format"], out["version"], out["health"]) == ("text", "2.28.3", "degraded")
    assert any(3 in c["missing_ranks"] and "INCOMPLETE" in c["errors"] for c in out["communicators"])
    assert all(c["hash"].startswith("0x") and c["hash"] == c["hash"].lower() for c in out["communicators"])


def test_parse_ras_monitor_and_repaired_json() -> None:
    mon = json.loads(run_cli("parse", "ras", str(RAS / "nccl_2.29_monitor_text_peer_dead_docs_sample.txt"),
                             "--json").stdout)  # fmt: skip
    assert mon["format"] == "monitor" and mon["events"]
    bad = run_cli(
        "parse",
        "ras",
        str(RAS / "nccl_2.28.9_json_status_missing_rank_MALFORMED_missing_comma.json"),
        "--json",
    )
    assert bad.returncode == 0, bad.stderr
    assert json.loads(bad.stdout)["format"] == "json"


def test_parse_ras_table_and_garbage(tmp_path: Path) -> None:
    table = run_cli("parse", "ras", str(RAS / "rccl_2.28.3_text_status_healthy_1node_8gpu.txt"))
    assert table.returncode == 0 and "ok" in table.stdout
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"\x00\xffnot a RAS output at all\n")
    proc = run_cli("parse", "ras", str(garbage), "--json")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("ranksight: ") and "Traceback" not in proc.stderr
