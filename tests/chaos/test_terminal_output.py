"""Chaos: hostile strings in answers (a NIC named with an escape sequence and a newline, a marker that retitles the
terminal, a cell that a spreadsheet would run) never reach the terminal or a spreadsheet as they are. Every query
command's table, CSV and plain lines go through the one printer (``core.cliutil``); the answers here are what a real
aggregator would return for data a node sent, printed as ``ranksight <command>`` prints them."""

from __future__ import annotations

import argparse
import csv
import io
import re
from typing import Any

import nats
import pytest
from nats.aio.msg import Msg

from ranksight.api.cli import print_rows
from ranksight.api.endpoints import SPECS as ENDPOINTS
from ranksight.api.follow import _alert_line
from ranksight.core.cliutil import print_line
from ranksight.core.natsserver import NatsServer
from ranksight.schemas.alerts import Alert
from ranksight.schemas.api import ApiResponse
from ranksight.schemas.subjects import Subjects
from tests.support import run_cli_async

pytestmark = pytest.mark.chaos

HOSTILE = "eth0\x1b]0;T\x07\n<fake row>\r\x9b2J\u202etxt.exe\u2028"
# what a terminal acts on: C0/C1 controls, line separators, bidi overrides
CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _printed(capsys: pytest.CaptureFixture[str], command: str, response: ApiResponse, **flags: object) -> str:
    args = argparse.Namespace(**({"json": False, "csv": False} | flags))
    print_rows(args, response, ENDPOINTS[command])
    out, err = capsys.readouterr()
    return out + err


@pytest.mark.parametrize("command", ["alerts", "status", "nodes", "markers", "nics", "links", "sql"])
def test_tables_escape_control_characters_and_newlines(
    capsys: pytest.CaptureFixture[str], command: str
) -> None:
    endpoint = ENDPOINTS[command]
    columns = list(endpoint.command.columns) or ["name", "value"]
    rows: list[dict[str, Any]] = [
        {column: HOSTILE for column in columns},
        {column: "ok" for column in columns},
    ]
    if command == "status":  # its answer lists each node's alerts
        rows = [{**row, "alerts": [{"rule": row["node"]}]} for row in rows]
    meta = {"columns": columns, "problems": [HOSTILE], "skipped": [{"node": HOSTILE, "reason": HOSTILE}]}
    response = ApiResponse(ok=True, rows=rows, meta=meta, partial=True, missing_shards=[HOSTILE])
    text = _printed(capsys, command, response)
    assert not CONTROLS.search(text), text
    table = [line for line in text.splitlines() if not line.startswith("ranksight:")]
    assert len(table) == 3  # the header and two rows: no forged row
    assert "\\x1b]0;T\\x07\\n<fake row>\\r\\x9b2J\\u202etxt.exe\\u2028" in text  # shown, escaped, not dropped


def test_an_error_and_an_alert_line_are_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    _printed(capsys, "alerts", ApiResponse(ok=True))
    print_line(f"ranksight: {HOSTILE}")
    alert = Alert(rule="nic_down", severity="warning", fingerprint="f", state="firing", cluster="c", node=HOSTILE,
                  entity=HOSTILE, summary=HOSTILE, started_at="t", updated_at="t")  # fmt: skip
    print_line(_alert_line(alert))
    out = capsys.readouterr().out
    assert not CONTROLS.search(out) and len(out.splitlines()) == 2


def test_csv_neutralizes_formulas_and_keeps_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    cells = ['=HYPERLINK("http://evil","x")', "+1+1", "-2+3", "@SUM(A1)", "\tx", "\rx", "plain", HOSTILE]
    rows = [{"cell": cell, "number": -5} for cell in cells]
    response = ApiResponse(ok=True, rows=rows, meta={"columns": ["cell", "number"]})
    text = _printed(capsys, "sql", response, csv=True)
    assert not CONTROLS.search(text.replace("\r\n", "\n")), text
    read = list(csv.reader(io.StringIO(text)))
    assert read[0] == ["cell", "number"]
    assert [r[0] for r in read[1:]] == ['\'=HYPERLINK("http://evil","x")', "'+1+1", "'-2+3", "'@SUM(A1)", "'\\tx",
                                        "'\\rx", "plain", "eth0\\x1b]0;T\\x07\\n<fake row>\\r\\x9b2J\\u202etxt.exe\\u2028"]  # fmt: skip
    assert {r[1] for r in read[1:]} == {"-5"}  # a number is not a formula


@pytest.mark.parametrize(
    "answer",
    [
        b"not json",
        b"[]",
        b'{"ok": "maybe"}',
        b'{"ok": true, "rows": "x"}',
        b'{"ok": true, "rows": [1, 2]}',
        b'{"ok": true, "rows": [{"node": "n", "alerts": 7}]}',
    ],
)
async def test_an_answer_not_of_the_api_shape_is_one_line(nats_server: NatsServer, answer: bytes) -> None:
    """Whatever answers on the API subject (here: not an aggregator), ``ranksight status`` says it in one line."""
    nc = await nats.connect(nats_server.url)
    try:

        async def reply(msg: Msg) -> None:
            await msg.respond(answer)

        await nc.subscribe(Subjects().api("status"), cb=reply)
        await nc.flush()
        done = await run_cli_async("status", "--nats", nats_server.url)
    finally:
        await nc.close()
    assert done.returncode == 1 and done.stdout == "" and "Traceback" not in done.stderr, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("ranksight: malformed ") and "answer" in line
