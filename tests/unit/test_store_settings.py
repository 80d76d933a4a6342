"""The store applies its DuckDB settings from ``[aggregator.ingest]``."""

from __future__ import annotations

from pathlib import Path

from ranksight.aggregator.store import Store
from ranksight.config import IngestSettings


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
