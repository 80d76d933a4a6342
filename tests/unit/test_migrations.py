"""Migrations only add: the applied history stays as it was, new migrations hold no destructive statement, and a
database written by the previous release upgrades with every row and every table readable.

The fixture ``fixtures/duckdb/previous_release.duckdb.gz`` was written by the previous release's own store (its
PROVENANCE.md says how); it has rows in every table.
"""

from __future__ import annotations

import gzip
import hashlib
import re
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import duckdb
import pytest

from ranksight.aggregator.columns import table_columns
from ranksight.aggregator.models.straggler.findings import Finding
from ranksight.aggregator.runtime import Aggregator
from ranksight.aggregator.state import LiveState
from ranksight.aggregator.state.stragglers import ClusterFindings, StragglerTracker
from ranksight.aggregator.store import _DEAD_COLUMNS, _SEQ_COLUMNS, Store
from ranksight.aggregator.tables.alerts import ALERT_SCHEMA
from ranksight.schemas.records import RECORD_KINDS
from ranksight.schemas.subjects import Subjects
from ranksight.settings import load_settings
from tests.unit.test_record_kinds import matching_columns

ADDED_SINCE = {
    "inspector_summary",
    "gpu_xid",
    "inspector_dump_stats",
    "inspector_metrics",
    "ras_diagnostics",
}  # record kinds registered after the fixture's release
FIXTURE = Path(__file__).parents[2] / "fixtures" / "duckdb" / "previous_release.duckdb.gz"

# The history every database created so far has applied: never edited again (a database that applied a migration
# never runs it again, so an edit would make new databases differ from old ones). Some rebuild tables: they were
# written for empty databases, before this rule; every later migration only adds.
APPLIED_HISTORY = {
    "0001_core.sql": "94d0d67391af78ffa2b6a43e981300380e6fe5716ef38d9b485c04e0aea4b013",
    "0002_event_tables.sql": "550367a7eee0ac1860fba77b043078806103c47a54700486ffdbd3e191e1556f",
    "0100_ras.sql": "8fbedca9b2bc8456add4286c1453abd30cb114c4d09816a5e7435811e35f10d5",
    "0110_ras_fidelity.sql": "7fe7b08f6b78ebf515131daafa2847178d8042e984cba5d3fc6d3a2f83e60c85",
    "0200_inspector.sql": "4c1a1600143c5ff00f24431912c6d80a1bce3ad481d63aa23d454256392497cb",
    "0210_straggler_history.sql": "29ba92a6cbcd71ada1df9004e97506bf5ab75609f43212a74026e5c4b90244a0",
    "0220_straggler_cost.sql": "0bae0effaae08ff0b0d11c29d360816f06484fa49c46bfcbb123f5cba7badf47",
    "0300_gpu_nic.sql": "dc56bdcbe817352ba1914e1835b91220b3518e722f188b5766c9f6cb38196946",
    "0400_probe.sql": "d4c865ce40fa345243cc240764b882413fd3ba179ffe4316b54d2722742e83b2",
    "0500_query.sql": "16659053162b9213973b4eda19155302cff458101d39c3a2f78d29d509b803f9",
    "0700_gpu_probe.sql": "02cb86b3745137e7d7bfbed8b0404eb5a090880bf10d8050e6c5fca77bcd1e44",
    "0800_app.sql": "8a56f30e08b68a42cf8857016b520d034b33947575825b45459d54d540b35aaa",
    "0900_alerting.sql": "db73e6a3e6dc05e2765316003b59391df1278be60d056cbc5461ed44ccae2f06",
    "0910_seq_identity.sql": "791886204a26f9e8db97646629c87c834858006643ef74015eeffff3cf14efeb",
    "0920_heartbeat_jobs.sql": "0e1c7405c561dbc6f7f3c08db7009017b41d4e9eee324953bc8726ca6dc37e09",
}
HISTORY_REBUILDS = {"0100_ras.sql", "0200_inspector.sql", "0300_gpu_nic.sql", "0400_probe.sql",
                    "0700_gpu_probe.sql", "0800_app.sql", "0910_seq_identity.sql"}  # fmt: skip

# The statements a migration may hold: each adds a table, a view, a column, an index or a comment, and drops nothing.
ADDITIVE = [
    re.compile(r"CREATE TABLE (IF NOT EXISTS )?[\w\"]+ \((?!.*\bAS SELECT\b).*\)"),
    re.compile(r"CREATE (OR REPLACE )?VIEW .*"),
    re.compile(
        r"ALTER TABLE [\w\"]+ ADD COLUMN (IF NOT EXISTS )?[\w\"]+ (?!.*\bNOT NULL\b(?!.*\bDEFAULT\b)).*"
    ),
    re.compile(r"CREATE (UNIQUE )?INDEX .*"),
    re.compile(r"COMMENT ON .*"),
]


def migrations() -> dict[str, str]:
    files = resources.files("ranksight.aggregator.migrations").iterdir()
    return {f.name: f.read_text() for f in sorted(files, key=lambda f: f.name) if f.name.endswith(".sql")}


def destructive(sql: str) -> list[str]:
    """The statements of ``sql`` that are not purely additive (comments and layout ignored)."""
    text = re.sub(r"--[^\n]*", "", sql)
    statements = (" ".join(s.split()).upper() for s in text.split(";"))
    return [s for s in statements if s and not any(p.fullmatch(s) for p in ADDITIVE)]


def test_the_applied_history_is_never_edited() -> None:
    texts = migrations()
    assert {
        name: hashlib.sha256(texts[name].encode()).hexdigest() for name in APPLIED_HISTORY
    } == APPLIED_HISTORY


def test_the_check_finds_every_rebuild_of_the_history() -> None:
    """The scan is no formality: it finds the DROPs and the row copy of the history, and only those."""
    texts = migrations()
    assert {name for name in APPLIED_HISTORY if destructive(texts[name])} == HISTORY_REBUILDS
    assert destructive("ALTER TABLE t ADD COLUMN c BIGINT NOT NULL") != []  # fails on a table with rows
    assert (
        destructive("ALTER TABLE t ADD COLUMN c BIGINT NOT NULL DEFAULT 0; CREATE VIEW v AS SELECT 1") == []
    )
    assert destructive("CREATE TABLE t2 AS SELECT * FROM t") != []
    assert destructive("ALTER TABLE t ALTER COLUMN c TYPE DOUBLE") != []


def test_every_migration_after_the_history_only_adds() -> None:
    later = {name: sql for name, sql in migrations().items() if name not in APPLIED_HISTORY}
    assert {name: destructive(sql) for name, sql in later.items() if destructive(sql)} == {}
    assert all(name > max(APPLIED_HISTORY) for name in later)  # none slipped in before an applied one


def test_each_migration_has_a_number_of_its_own() -> None:
    """A migration is known by its whole file name (``schema_migrations.version``), so the two files numbered 0930
    are two migrations, applied in name order. Databases have applied them under these names: renumbering one would
    run it again there (its ALTER TABLE ADD COLUMN fails on the column it added), so the pair stays; no other number
    may repeat."""
    numbers = Counter(name.split("_", 1)[0] for name in migrations())
    assert {number for number, files in numbers.items() if files > 1} == {"0930"}


@pytest.fixture
def previous_release(tmp_path: Path) -> Path:
    path = tmp_path / "previous.duckdb"
    with gzip.open(FIXTURE, "rb") as src, path.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    return path


@pytest.fixture
def upgraded(previous_release: Path) -> Iterator[tuple[Store, dict[str, int]]]:
    with duckdb.connect(str(previous_release)) as con:
        before = row_counts(con)
    store = Store(previous_release, Subjects())
    store.open()
    try:
        yield store, before
    finally:
        store.close_connection()
        store.shutdown()


def row_counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    tables = [
        t
        for (t,) in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main'"
        ).fetchall()
    ]
    return {t: con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}  # type: ignore[index]


def test_the_previous_release_database_upgrades_without_losing_a_row(
    upgraded: tuple[Store, dict[str, int]],
) -> None:
    store, before = upgraded
    assert before.keys() - {"schema_migrations"} == set(RECORD_KINDS) - ADDED_SINCE | {
        "agent_seq", "agent_seq_gaps", "dead_letters", "alerts", "straggler_finding_history", "silences",
        "node_drains"}  # fmt: skip
    assert all(before[t] > 0 for t in before)  # the fixture has rows in every table
    after = row_counts(store.con)
    assert {t: after[t] for t in before if t != "schema_migrations"} == {
        t: n for t, n in before.items() if t != "schema_migrations"
    }
    applied = {v for (v,) in store.con.execute("SELECT version FROM schema_migrations").fetchall()}
    assert applied == {name.removesuffix(".sql") for name in migrations()}


def test_every_table_and_view_of_the_upgraded_database_reads(upgraded: tuple[Store, dict[str, int]]) -> None:
    store, _ = upgraded
    relations = store.con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' UNION ALL "
        "SELECT view_name FROM duckdb_views() WHERE schema_name = 'main' AND NOT internal"
    ).fetchall()
    for (name,) in relations:
        store.con.execute(f'SELECT * FROM "{name}"').fetchall()
    for kind in RECORD_KINDS:
        columns = store.con.execute(
            "SELECT column_name, data_type FROM duckdb_columns() WHERE schema_name = 'main' AND table_name = ?",
            [kind],
        ).fetchall()
        assert matching_columns(kind, dict(columns)) == table_columns(kind)
    replayed = store.replay(LiveState().kinds, 0)
    assert {env.kind for env, _ in replayed} == set(RECORD_KINDS) - ADDED_SINCE and store.replay_skipped == 0
    assert [a.fingerprint for a in store.active_alerts()] == []  # fired, then resolved
    assert [s.id for s in store.silences(0)] == ["s1"]
    assert [d["node"] for d in store.drained_nodes()] == ["gpu-b"]


def test_every_table_the_store_writes_has_the_columns_it_writes(previous_release: Path) -> None:
    """A writer's new column without its migration fails here (``INSERT ... BY NAME`` would fail in production)."""
    store = Store(previous_release, Subjects())
    store.open()
    try:
        tracker = StragglerTracker()
        finding = Finding("h", 1, "compute", "0x1", 0, 1.5, 0.9, "slow")
        tracker._set_findings({"c": ClusterFindings([finding], 10, "ring", 1)})
        written = {
            "alerts": set(ALERT_SCHEMA.names),
            "agent_seq": set(_SEQ_COLUMNS),
            "dead_letters": set(_DEAD_COLUMNS),
            "straggler_finding_history": set(tracker.take_history()[0]),
        }
        for table, columns in written.items():
            have = {c for (c,) in store.con.execute(
                "SELECT column_name FROM duckdb_columns() WHERE table_name = ?", [table]).fetchall()}  # fmt: skip
            assert columns <= have, (table, columns - have)
    finally:
        store.close_connection()
        store.shutdown()


async def test_a_derived_row_the_table_cannot_take_is_logged_and_ticks_go_on(tmp_path: Path) -> None:
    agg = Aggregator(load_settings(None, state_dir=tmp_path, aggregator={"http": {"port": 0}}))
    await agg.store.call(agg.store.open)
    try:
        await agg.store.call(agg.store.con.execute, "ALTER TABLE straggler_finding_history DROP COLUMN cost")
        finding = Finding("h", 1, "compute", "0x1", 0, 1.5, 0.9, "slow", cost=0.2)
        agg.state.stragglers._set_findings({"c": ClusterFindings([finding], 10, "ring", 1)})
        await agg.tick(time.time_ns())
        await agg.tick(time.time_ns())
    finally:
        await agg.store.call(agg.store.close_connection)
        agg.store.shutdown()


def test_job_health_is_the_latest_poll_when_polls_share_a_batch(tmp_path: Path) -> None:
    """recv_ts is stamped per ingest batch: two polls of a job in one batch tie on it, the agent's time decides."""
    store = Store(tmp_path / "h.duckdb", Subjects())
    store.open()
    try:
        rows = [("degraded", "00:00:00.5", 4), ("ok", "00:00:00.9", 5), ("degraded", "00:00:00.7", 3)]
        for health, ts, seq in rows:  # inserted out of order: the view may not lean on insertion order
            store.con.execute(
                "INSERT INTO ras (cluster, node, agent, seq, ts, recv_ts, ttl, job_id, health) "
                "VALUES ('c', 'n', 'a', ?, ?, '2026-01-01 00:00:01', 30, 'j', ?)",
                [seq, f"2026-01-01 {ts}", health],
            )
        assert store.con.execute("SELECT health, polls FROM v_job_health").fetchall() == [("ok", 3)]
    finally:
        store.close_connection()
        store.shutdown()
