"""The store applies its DuckDB settings from ``[aggregator.ingest]``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import duckdb
import pytest
from pydantic import ValidationError

from ranksight.agent.collectors.nic.rates import ChangedCounters
from ranksight.aggregator.ingest.pipeline import Incoming
from ranksight.aggregator.ingest.settings import IngestSettings
from ranksight.aggregator.store import Store
from ranksight.schemas.codec import encode_event
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import GpuRecord, NicRecord
from ranksight.schemas.subjects import Subjects
from ranksight.schemas.wire import event_type
from tests.unit.test_ingest_admission import NOW


def test_commits_checkpoint_at_the_configured_wal_size(tmp_path: Path) -> None:
    """DuckDB's own threshold (16 MiB) made commits at 1024 nodes rewrite each table's newest row group about every
    second; the store sets the configured one on its connection."""
    store = Store(tmp_path / "db.duckdb", limits=IngestSettings(checkpoint_wal_mib=128))
    store.open()
    try:
        [(value,)] = store.con.execute("SELECT current_setting('checkpoint_threshold')").fetchall()
        assert value == "128.0 MiB"
    finally:
        store.close_connection()


def _row_groups_after(tmp_path: Path, rows: int, limits: IngestSettings) -> int:
    """Row groups of the ``gpu`` table once ``rows`` GPU rows were committed through the codec and the store closed
    (which checkpoints), read back from the file as any DuckDB client opens it."""
    store = Store(tmp_path / "history.duckdb", limits=limits)
    store.open()
    try:
        env = Envelope(type=event_type("gpu"), cluster="c", node="n", agent="n-a", seq=1, ts=NOW, ttl=15.0,
                       records=[GpuRecord(index=i % 8, memory_used_bytes=i) for i in range(rows)])  # fmt: skip
        result = store.commit_batch([Incoming(Subjects().event("c", "n", "gpu"), encode_event(env), NOW)])
        assert result.records == rows and result.dead_letters == 0
        [(stored,)] = (
            store.reader().execute("SELECT count(*) FROM gpu").fetchall()
        )  # readers see the history too
        assert stored == rows
    finally:
        store.close_connection()
        store.shutdown()
    assert not (tmp_path / "history.duckdb.wal").exists(), "closing checkpoints the history"
    con = duckdb.connect(str(tmp_path / "history.duckdb"), read_only=True)
    try:
        [(groups,)] = con.execute(
            "SELECT count(DISTINCT row_group_id) FROM pragma_storage_info('gpu')"
        ).fetchall()
        [(names,)] = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'gpu'").fetchall()
        assert names == 1
        return int(groups)
    finally:
        con.close()


def test_history_tables_are_written_in_row_groups_of_the_configured_size(tmp_path: Path) -> None:
    """A checkpoint rewrites each table's newest row group: at 1024 nodes DuckDB's 122,880 rows lifted the aggregator's
    RSS by about 400 MiB at each one. The history is attached with ``row_group_rows`` (an ATTACH option)."""
    assert _row_groups_after(tmp_path / "small", 70_000, IngestSettings(row_group_rows=32_768)) == 3
    assert _row_groups_after(tmp_path / "duckdb", 70_000, IngestSettings(row_group_rows=122_880)) == 1


def test_row_group_rows_are_whole_vectors() -> None:
    with pytest.raises(ValidationError, match="multiple of 2048"):
        IngestSettings(row_group_rows=5000)


def _port_history(
    tmp_path: Path, setting: Literal["full", "all"]
) -> tuple[list[tuple[object, ...]], list[dict[str, int]]]:
    """Three samples of one port thinned by the agent (full, changes, changes) committed through the codec: the stored
    (counters_full, counters, rx_bytes) rows, and the counters replay gives back."""
    limits = IngestSettings(nic_history_counters=setting)
    store = Store(tmp_path / f"{setting}.duckdb", limits=limits)
    store.open()
    thinning = ChangedCounters(full_every_s=60)
    try:
        for step in range(3):
            port = NicRecord(name="ionic_0", kind="netdev", rx_bytes=1000 * step,
                             counters={"rx_bytes": 1000 * step, "rx_crc_errors": min(step, 1), "tx_pause": 0})  # fmt: skip
            [thinned] = thinning.thin([port], at_s=2.0 * step)
            env = Envelope(type=event_type("nic"), cluster="c", node="n", agent="n-a", seq=step + 1,
                           ts=NOW + step, ttl=6.0, records=[thinned])  # fmt: skip
            result = store.commit_batch([Incoming(Subjects().event("c", "n", "nic"), encode_event(env), NOW)])
            assert result.records == 1 and result.dead_letters == 0
        rows = store.con.execute("SELECT counters_full, counters, rx_bytes FROM nic ORDER BY seq").fetchall()
        replayed = [dict(r.counters) for env, _ in store.replay({"nic"}, 0) for r in env.records]
        return [(full, json.loads(c) if c else None, rx) for full, c, rx in rows], replayed
    finally:
        store.close_connection()
        store.shutdown()


def test_nic_history_keeps_the_counters_of_full_records_only_by_default(tmp_path: Path) -> None:
    """At 607 ``ethtool -S`` counters a port, the maps of changes between a port's full records were most of the NIC
    history and a tenth of a core at 1024 nodes: by default those rows keep their typed columns, ``counters`` NULL."""
    rows, replayed = _port_history(tmp_path, "full")
    assert rows == [(True, {"rx_bytes": 0, "rx_crc_errors": 0, "tx_pause": 0}, 0), (False, None, 1000),
                    (False, None, 2000)]  # fmt: skip
    assert replayed == [{"rx_bytes": 0, "rx_crc_errors": 0, "tx_pause": 0}, {}, {}]


def test_nic_history_keeps_every_map_of_changes_when_asked(tmp_path: Path) -> None:
    rows, replayed = _port_history(tmp_path, "all")
    assert rows == [(True, {"rx_bytes": 0, "rx_crc_errors": 0, "tx_pause": 0}, 0),
                    (False, {"rx_bytes": 1000, "rx_crc_errors": 1}, 1000), (False, {"rx_bytes": 2000}, 2000)]  # fmt: skip
    assert replayed == [row[1] for row in rows]


@pytest.mark.parametrize("name", ['it\'s "odd".duckdb', "memory.duckdb"])
def test_history_file_names_are_quoted_and_never_clash_with_duckdbs_own(tmp_path: Path, name: str) -> None:
    """The file is attached under its stem: quotes in the path or the stem are escaped, and a stem DuckDB reserves
    for its own databases (memory, system, temp) gets a suffix."""
    store = Store(tmp_path / name)
    store.open()
    try:
        store.set_drained("c", ["n"], True, "maintenance")
        [(rows,)] = store.reader().execute("SELECT count(*) FROM node_drains").fetchall()
        assert rows == 1
    finally:
        store.close_connection()
        store.shutdown()
    con = duckdb.connect(str(tmp_path / name), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM node_drains").fetchall() == [(1,)]
    finally:
        con.close()
