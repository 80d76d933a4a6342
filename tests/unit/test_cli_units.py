"""Tables print numbers in human units chosen by the column's base-unit suffix, never in exponent form."""

from __future__ import annotations

from pathlib import Path

import pytest

from ranksight.core.cliutil import human, print_table


@pytest.mark.parametrize(
    ("column", "value", "shown"),
    [
        ("memory_used_bytes", 68_719_476_736, "64 GiB"),
        ("memory_total_bytes", 196_608 * 1024**2, "192 GiB"),
        ("tx_bytes", 512, "512 B"),
        ("speed_bps", 4e11, "400 Gbit/s"),  # NIC and link rates are bits per second
        ("upload_bps", 3e8, "300 Mbit/s"),
        ("mem_bandwidth_bps", 3.2e12, "3.2 TB/s"),  # the GPU probe's memory bandwidth is bytes per second
        ("busbw_expected_gbs", 182.34, "182 GB/s"),
        ("power_w", 291.5, "292 W"),
        ("temperature_edge_c", 45.0, "45 C"),
        ("sclk_hz", 2.1e9, "2.1 GHz"),
        ("utilization_pct", 37.5, "37.5%"),
        ("errors_per_s", 5.0, "5/s"),
        ("clock_skew_s", 0.00123, "0.00123 s"),
        ("rtt_us", 1500, "1.5 ms"),
        ("jitter_us", 12.5, "12.5 us"),
        ("rtt_us", 2_500_000, "2.5 s"),
        ("slowdown", 1.6, "1.6"),
        ("something", 3e8, "300000000"),
        ("something", 0.000012345, "0.0000123"),
        ("rank", 3, "3"),
        ("throttled", True, "True"),
        ("state", "alive", "alive"),
        ("power_w", None, "-"),
        ("power_w", 0.0, "0 W"),
        ("errors", ["INCOMPLETE", "MISMATCH"], "INCOMPLETE, MISMATCH"),
        ("missing_ranks", [], "-"),
    ],
)
def test_human(column: str, value: object, shown: str) -> None:
    assert human(column, value) == shown


def test_tables_use_human_units(capsys: pytest.CaptureFixture[str]) -> None:
    print_table(
        [{"node": "n1", "speed_bps": 3e8, "memory_used_bytes": 2**35}],
        ["node", "speed_bps", "memory_used_bytes"],
    )
    out = capsys.readouterr().out
    assert "300 Mbit/s" in out and "32 GiB" in out and "e+" not in out


def test_the_banner_names_ranksight_as_this_shell_can_run_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 47: after ``make up`` the console script is in .venv/bin, not on PATH: the banner names that path."""
    from ranksight.commands.up import command_name

    script = tmp_path / ".venv" / "bin" / "ranksight"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert command_name(".venv/bin/ranksight") == ".venv/bin/ranksight"
    assert command_name(str(script)) == ".venv/bin/ranksight"
    monkeypatch.setenv("PATH", f"{script.parent}:/usr/bin")
    assert command_name(str(script)) == "ranksight"
    assert command_name("/x/ranksight/cli.py").endswith(" -m ranksight.cli")


def test_empty_answers_and_skipped_probes_are_one_line_each(capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from ranksight.api.cli import print_rows
    from ranksight.api.endpoints import SPECS as ENDPOINTS
    from ranksight.schemas.api import ApiResponse

    args = argparse.Namespace(json=False)
    print_rows(args, ApiResponse.success([]), ENDPOINTS["alerts"])
    out, err = capsys.readouterr()
    assert out.startswith("UPDATED AT") and err == "ranksight: nothing to show (alerts: 0 rows)\n"
    skipped = [{"cluster": "c", "node": f"n{i}", "reason": "runs a job"} for i in range(8)]
    print_rows(args, ApiResponse.success([], meta={"skipped": skipped}), ENDPOINTS["links"])
    err = capsys.readouterr().err.splitlines()
    assert err == ["ranksight: nothing to show (links: 0 rows)",
                   "ranksight: n0, n1, n2, n3, n4 and 3 more: runs a job"]  # fmt: skip


def test_headers_read_as_words_and_gpus_show_the_junction_temperature(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from ranksight.api.endpoints import SPECS as ENDPOINTS
    from ranksight.core.cliutil import header

    assert [header(c) for c in ("sclk_hz", "memory_used_bytes", "tx_bps", "rtt_us", "errors_per_s", "node")] == [
        "CLOCK", "MEMORY USED", "TX", "RTT", "ERRORS", "NODE"]  # fmt: skip
    gpu = {
        "node": "n1",
        "index": 2,
        "temperature_edge_c": 58.0,
        "temperature_junction_c": 83.0,
        "sclk_hz": 2.1e9,
    }
    table = ENDPOINTS["gpus"].command.table_rows
    assert table is not None
    print_table(table([gpu]), ENDPOINTS["gpus"].command.columns)
    head, row = capsys.readouterr().out.splitlines()
    assert "SCLK" not in head and "CLOCK" in head and "TEMPERATURE" in head
    assert "83 C" in row and "58 C" not in row and "2.1 GHz" in row


def test_series_prints_units_and_the_outlier_first(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 47: ``series`` printed raw values (1300000000) sorted by name; the slow GPU's clock comes first now."""
    import argparse

    from ranksight.api.cli import print_rows
    from ranksight.api.endpoints import SPECS as ENDPOINTS
    from ranksight.schemas.api import ApiResponse

    rows = [{"series": f"n1 gpu {i}", "unit": "Hz", "t": [1.0, 2.0], "v": [2.1e9, 1.3e9 if i == 5 else 2.1e9]}
            for i in range(8)]  # fmt: skip
    print_rows(argparse.Namespace(json=False), ApiResponse.success(rows), ENDPOINTS["series"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split()[:3] == ["n1", "gpu", "5"] and "1.3 GHz" in lines[1] and "0.81x" in lines[1]
    assert "1300000000" not in "".join(lines) and "2.1 GHz" in lines[2]
