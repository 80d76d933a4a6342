"""``--db FILE``: the history commands answer from a DuckDB file without the service, read-only, in the same SQL
sandbox (issue 47: after a demo, ``ranksight sql`` could not read its database)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ranksight.aggregator.store import Store
from ranksight.schemas.alerts import Alert
from tests.support import run_cli


def _alert(rule: str, state: str, at: str, job: str | None = None) -> Alert:
    return Alert(rule=rule, severity="warning", fingerprint=f"fp-{rule}", state=state, cluster="demo",  # type: ignore[arg-type]
                 node="demo-node001", job=job, rank=2, entity="pid 40012", summary=f"{rule} on demo-node001",
                 started_at="2026-12-01T10:00:00Z", updated_at=at,
                 resolved_at=at if state == "resolved" else None)  # fmt: skip


@pytest.fixture
def history(tmp_path: Path) -> Path:
    path = tmp_path / "state" / "ranksight.duckdb"
    store = Store(path)
    store.open()
    store.write_alerts([_alert("straggler", "firing", "2026-12-01T10:00:00Z", job="run1"),
                        _alert("nic_errors_rising", "firing", "2026-12-01T10:01:00Z"),
                        _alert("nic_errors_rising", "resolved", "2026-12-01T10:05:00Z")])  # fmt: skip
    store.close_connection()
    store.shutdown()
    return path


def _env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "RANKSIGHT_STATE_DIR": str(tmp_path / "other"),
        "RANKSIGHT_NATS__URL": "nats://127.0.0.1:1",
    }


def test_sql_incidents_and_alerts_read_the_file(history: Path, tmp_path: Path) -> None:
    before = history.read_bytes()
    env = _env(tmp_path)
    out = run_cli("sql", "--db", str(history), "--json", "SELECT rule, count(*) AS n FROM alerts GROUP BY rule ORDER "
                  "BY rule", env=env)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["rows"] == [
        {"rule": "nic_errors_rising", "n": 2},
        {"rule": "straggler", "n": 1},
    ]
    incidents = run_cli("incidents", "--db", str(history), env=env)
    assert incidents.returncode == 0 and "straggler" in incidents.stdout and "resolved" in incidents.stdout
    firing = run_cli("alerts", "--db", str(history), "--json", env=env)
    assert [(a["rule"], a["rank"]) for a in json.loads(firing.stdout)["rows"]] == [("straggler", 2)]
    assert history.read_bytes() == before  # read, never written


def test_the_sandbox_holds_offline_too(history: Path, tmp_path: Path) -> None:
    env = _env(tmp_path)
    for sql in (
        "SELECT * FROM read_text('/etc/passwd')",
        "COPY alerts TO '/tmp/x.csv'",
        "DELETE FROM alerts",
    ):
        out = run_cli("sql", "--db", str(history), sql, env=env)
        assert out.returncode == 1 and out.stdout == "" and "Traceback" not in out.stderr, (sql, out.stderr)
        assert "refused" in out.stderr or "not allowed" in out.stderr, out.stderr


def test_a_missing_or_held_file_is_one_clear_line(history: Path, tmp_path: Path) -> None:
    env = _env(tmp_path)
    missing = run_cli("sql", "--db", str(tmp_path / "nope.duckdb"), "SELECT 1", env=env)
    assert missing.returncode == 1 and "no such history file" in missing.stderr
    store = Store(history)
    store.open()  # a running aggregator holds its file
    try:
        held = run_cli("sql", "--db", str(history), "SELECT 1", env=env)
    finally:
        store.close_connection()
        store.shutdown()
    assert held.returncode == 1 and len(held.stderr.splitlines()) == 1, held.stderr
