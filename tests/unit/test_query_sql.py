"""The SQL sandbox's parsed-statement check, value conversion and request validation (pure, no server)."""

from __future__ import annotations

import datetime
import decimal
from pathlib import Path
from typing import Any

import duckdb
import pytest

from ranksight.aggregator.api import sql as sql_module
from ranksight.aggregator.api.settings import QuerySettings
from ranksight.aggregator.api.sql import SqlFailed, SqlRefused, SqlSandbox, check_read_only, jsonable
from ranksight.api.contract import Params, RequestError, parse_params
from ranksight.api.params import SqlParams

REFUSED = {
    "read_text": "SELECT * FROM read_text('/etc/passwd')",
    "read_csv": "SELECT * FROM read_csv('/etc/passwd')",
    "read_parquet": "select * from read_parquet('s3://bucket/x.parquet')",
    "file_as_table": "SELECT * FROM '/etc/passwd'",
    "copy": "COPY alerts TO '/tmp/alerts.csv'",
    "attach": "ATTACH '/tmp/other.duckdb' AS other",
    "install": "INSTALL httpfs",
    "load": "LOAD httpfs",
    "set": "SET enable_external_access = true",
    "reset": "RESET lock_configuration",
    "pragma": "PRAGMA enable_profiling",
    "insert": "INSERT INTO alerts SELECT * FROM alerts",
    "drop": "DROP TABLE heartbeat",
    "create": "CREATE TABLE x AS SELECT 1",
    "two_statements": "SELECT 1; DROP TABLE heartbeat",
    "comment_hidden": "/* harmless */ SELECT 1 -- ok\n; DELETE FROM alerts",
    "mixed_case": "sElEcT * FrOm ReAd_TeXt('/etc/passwd')",
    "comment_inside": "SELECT * FROM read_text /* x */ ('/etc/passwd')",
    "cte_wrapped": "WITH x AS (SELECT * FROM read_csv('/etc/passwd')) SELECT * FROM x",
    "nested_cte": "WITH a AS (WITH b AS (FROM read_blob('/etc/shadow')) SELECT * FROM b) SELECT * FROM a",
    "subquery": "SELECT (SELECT count(*) FROM read_json('/x.json')) AS n",
    "union": "SELECT 1 AS a UNION ALL SELECT content FROM read_text('/etc/hosts')",
    "glob": "SELECT * FROM glob('/*')",
    "query_fn": "SELECT * FROM query('SELECT 1')",
    "summarize": "SUMMARIZE SELECT * FROM read_text('/etc/passwd')",
    "getenv": "SELECT getenv('HOME')",
    "checkpoint": "CHECKPOINT",
    "export_db": "EXPORT DATABASE '/tmp/x'",
    "current_setting": "SELECT current_setting('temp_directory')",
    "getvariable": "SELECT getvariable('x')",
    "write_log": "SELECT write_log('x')",
    "range_bomb": "SELECT len(range(3000000000))",
    "generate_series_bomb": "SELECT len(generate_series(1, 3000000000, 1))",
    "range_from_column": "SELECT len(range(n)) FROM (SELECT 3000000000 AS n)",
    "unnest_range_bomb": "SELECT * FROM unnest(range(3000000000))",
    "repeat_nested": "SELECT len(repeat(repeat('x', 10000), 10000))",
    "list_resize": "SELECT len(list_resize([1], 300000000))",
    "lpad": "SELECT len(lpad('x', 2000000000, 'y'))",
    "printf_width": "SELECT printf('%2000000000d', 1)",
    "printf_dynamic_width": "SELECT printf('%*d', 2000000000, 1)",
    "format_width": "SELECT format('{:>2000000000}', 1)",
    "replace_amplifier": "SELECT replace(replace(repeat('x', 1000), 'x', repeat('y', 100)), 'y', repeat('z', 1000))",
    "list_reduce_doubling": "SELECT list_reduce(range(40), (a, x) -> a || a)",
}

ALLOWED = [
    "SELECT 1",
    "select node, count(*) from heartbeat group by all",
    "/* comment */ WITH x AS (SELECT * FROM range(3)) SELECT * FROM x -- trailing",
    "FROM node_timeline LIMIT 5",
    "SELECT * FROM duckdb_tables()",
    "SHOW TABLES",
    "DESCRIBE alerts",
    "SELECT count(*) FROM range(3000000000)",  # a table function streams: the time limit bounds it
    "SELECT unnest(range(1, 10, 2)), repeat('-', 20), lpad('7', 3, '0'), printf('%5.2f', 1.5)",
    "SELECT replace('a-b', '-', '_')",
]


@pytest.mark.parametrize("sql", REFUSED.values(), ids=REFUSED.keys())
def test_refused_statements(sql: str) -> None:
    with pytest.raises(SqlRefused):
        check_read_only(sql)


@pytest.mark.parametrize("sql", ALLOWED)
def test_allowed_statements(sql: str) -> None:
    check_read_only(sql)


def test_refusal_names_the_reason() -> None:
    with pytest.raises(SqlRefused, match=r"table function read_text\(\) is not allowed"):
        check_read_only("WITH x AS (SELECT * FROM read_text('/etc/passwd')) SELECT * FROM x")
    with pytest.raises(SqlRefused, match="not COPY"):
        check_read_only("copy alerts to '/tmp/x'")
    with pytest.raises(SqlRefused, match="exactly one statement"):
        check_read_only("select 1; select 2")


def test_generated_size_cap_is_a_setting() -> None:
    check_read_only("SELECT range(1000)", max_generated=1000)
    with pytest.raises(
        SqlRefused, match=r"more than 999 elements .* range\(\) \(aggregator.query.sql_max_generated\)"
    ):
        check_read_only("SELECT range(1000)", max_generated=999)
    with pytest.raises(SqlRefused, match=r"repeat\(\): its size arguments must be integer literals"):
        check_read_only("SELECT repeat('x', n) FROM (SELECT 5 AS n)")


def test_syntax_error_is_a_failure_not_a_refusal() -> None:
    with pytest.raises(SqlFailed, match="syntax error"):
        check_read_only("SELEC 1")


def test_jsonable_values() -> None:
    assert jsonable(datetime.datetime(2024, 5, 1, 12, 0, 0)) == "2024-05-01T12:00:00Z"
    assert jsonable(decimal.Decimal("1.5")) == 1.5
    assert jsonable(b"\x00\xff") == "00ff"
    assert jsonable(datetime.timedelta(seconds=90)) == 90.0
    assert jsonable({"a": [datetime.date(2024, 1, 2)]}) == {"a": ["2024-01-02"]}


def test_request_validation_messages() -> None:
    with pytest.raises(RequestError, match="unknown parameter 'limt'"):
        parse_params(SqlParams, {"sql": "select 1", "limt": 3})
    with pytest.raises(RequestError, match="sql: Field required"):
        parse_params(SqlParams, {})
    with pytest.raises(RequestError, match="max_rows: Input should be greater than or equal to 1"):
        parse_params(SqlParams, {"sql": "select 1", "max_rows": 0})
    with pytest.raises(RequestError, match="sql: Value error, must not be blank"):
        parse_params(SqlParams, {"sql": "   "})
    assert isinstance(parse_params(SqlParams, {"sql": "select 1"}), Params)


async def test_a_query_over_exports_reads_again_a_file_a_shard_replaced_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shard rewrites today's export (a new file, the old one removed) between DuckDB listing the folder and opening
    the file (CI saw "Cannot open file ... No such file"): the query runs again over the folder as it is now. The race
    itself is a matter of microseconds, so the first read fails here the way DuckDB fails it."""
    day = tmp_path / "exports" / "heartbeat" / "shard=a" / "day=2026-11-23"
    day.mkdir(parents=True)
    duckdb.execute(f"COPY (SELECT 'n1' AS node) TO '{day / 'old.parquet'}' (FORMAT parquet)")
    real_fetch, failures = sql_module._fetch, []

    def vanish_once(cursor: duckdb.DuckDBPyConnection, sql: str, max_rows: int) -> Any:
        if not failures:  # DuckDB's own IO Error for a file that is not there
            failures.append(1)
            sql = f"SELECT * FROM read_parquet('{day / 'gone.parquet'}')"
        return real_fetch(cursor, sql, max_rows)

    monkeypatch.setattr(sql_module, "_fetch", vanish_once)
    sandbox = SqlSandbox(None, QuerySettings())  # type: ignore[arg-type]  # the live database is not used here
    sandbox._exports_temp_dir = tmp_path / "tmp"
    try:
        result = await sandbox.query(
            "SELECT count(*) AS n FROM heartbeat", 10, 10.0, exports=tmp_path / "exports"
        )
    finally:
        await sandbox.close()
    assert failures and result.rows == [{"n": 1}]
