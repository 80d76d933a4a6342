"""Retention and Parquet export of the DuckDB history.

History tables are found, not listed: every table with a ``recv_ts`` column (each event kind, ``dead_letters``) is
aged and exported by receipt time (the aggregator's clock: an agent's skewed clock cannot keep rows alive), plus
``alerts`` by ``updated_at``. Retention never deletes the rows of an alert that is still firing.

Export writes ``DIR/<table>/day=YYYY-MM-DD/*.parquet`` (Hive-style, one folder per UTC day); exporting the same range
again replaces those day folders, so it is safe to repeat. A sharded aggregator also exports on a schedule
(:func:`shard_export_loop`) into a directory the shards share, as ``DIR/<table>/shard=<id>/day=YYYY-MM-DD/``, which
SQL across shards reads (``aggregator.api.sql``).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import pyarrow.dataset as ds

from ranksight.aggregator.store import Store
from ranksight.aggregator.timefmt import naive_utc

if TYPE_CHECKING:
    from ranksight.aggregator.api.sql import SqlSandbox

log = logging.getLogger(__name__)

_HISTORY_TABLES_SQL = (
    "SELECT table_name FROM duckdb_columns() WHERE schema_name = 'main' AND column_name = 'recv_ts' "
    "AND table_name IN (SELECT table_name FROM duckdb_tables()) ORDER BY table_name"
)
_FIRING = (
    "SELECT fingerprint FROM (SELECT fingerprint, state, row_number() OVER (PARTITION BY fingerprint "
    "ORDER BY updated_at DESC, state = 'resolved' DESC) AS rn FROM alerts) WHERE rn = 1 AND state = 'firing'"
)


def history_tables(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
    """(table, time column) of every table that holds history."""
    tables = [(name, "recv_ts") for (name,) in con.execute(_HISTORY_TABLES_SQL).fetchall()]
    return [*tables, ("alerts", "updated_at")]


def delete_older_than(con: duckdb.DuckDBPyConnection, cutoff: datetime.datetime,
                      cutoffs: dict[str, datetime.datetime] | None = None) -> dict[str, int]:  # fmt: skip
    """Delete history received before ``cutoff`` (naive UTC; ``cutoffs`` per table where it differs), in one
    transaction; rows deleted per table."""
    deleted: dict[str, int] = {}
    cutoffs = cutoffs or {}
    con.execute("BEGIN TRANSACTION")
    try:
        for table, column in history_tables(con):
            extra = f" AND fingerprint NOT IN ({_FIRING})" if table == "alerts" else ""
            before = cutoffs.get(table, cutoff)
            (n,) = con.execute(f'DELETE FROM "{table}" WHERE "{column}" < ?{extra}', [before]).fetchone() or (
                0,
            )
            if n:
                deleted[table] = n
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
    return deleted


def export_parquet(con: duckdb.DuckDBPyConnection, since: datetime.datetime, until: datetime.datetime,
                   out_dir: Path, folder: str = "") -> list[dict[str, Any]]:  # fmt: skip
    """Write rows of [since, until) to Parquet under ``out_dir``, partitioned by day (under ``folder`` in each table's
    folder when given: ``shard=<id>``); one summary row per table."""
    summary = []
    for table, column in history_tables(con):
        where = f'WHERE "{column}" >= ? AND "{column}" < ?'
        ((count,),) = con.execute(f'SELECT count(*) FROM "{table}" {where}', [since, until]).fetchall()
        if not count:
            continue
        rows = con.sql(f"""SELECT *, strftime("{column}", '%Y-%m-%d') AS day FROM "{table}" {where}""",
                       params=[since, until])  # fmt: skip
        target = out_dir / table / folder
        ds.write_dataset(
            rows.to_arrow_reader(),
            target,
            format="parquet",
            partitioning=["day"],
            partitioning_flavor="hive",
            basename_template=f"{table}-{{i}}.parquet",
            existing_data_behavior="delete_matching",
        )
        days = sorted(p.name.removeprefix("day=") for p in target.glob("day=*"))
        summary.append({"table": table, "rows": count, "days": days, "path": str(target)})
    return summary


def _days_ago(days: float) -> datetime.datetime:
    """Naive UTC, like the TIMESTAMP columns."""
    return naive_utc(time.time_ns() - int(days * 86400e9))


async def shard_export_loop(sandbox: SqlSandbox, out_dir: Path, shard_id: str, interval_s: float,
                            retention_days: float) -> None:  # fmt: skip
    """Export this shard's history to ``out_dir/<table>/shard=<shard_id>/`` now and every ``interval_s``. The first run
    exports every retained day; each later one rewrites the days from one interval before the previous run's end (a
    batch received before that end but committed after it still lands). Its days older than ``retention_days`` are
    removed, as retention removes them from the database. A failed run (disk full, folder gone) is logged and tried
    again next time: exporting never stops the aggregator."""
    since = _day_start(_days_ago(retention_days))
    while True:
        until = naive_utc(time.time_ns())
        try:
            await sandbox.run(export_shard, since, until, out_dir, shard_id)
            await asyncio.to_thread(_write_exported_until, out_dir, shard_id, until)
            await asyncio.to_thread(prune_export, out_dir, shard_id, _day_start(_days_ago(retention_days)))
            since = _day_start(until - datetime.timedelta(seconds=interval_s))
        except Exception:
            log.exception("export of history to %s failed; tried again in %.0f s", out_dir, interval_s)
        await asyncio.sleep(interval_s)


EXPORTED_UNTIL = "_exported_until"  # <dir>/_exported_until/<shard_id>: how fresh each shard's export is
STAGING = "_staging"  # <dir>/_staging/<shard_id>/: a run's files before they are moved into place


def export_shard(con: duckdb.DuckDBPyConnection, since: datetime.datetime, until: datetime.datetime, out_dir: Path,
                 shard_id: str) -> list[dict[str, Any]]:  # fmt: skip
    """:func:`export_parquet` of one shard into ``out_dir/<table>/shard=<shard_id>/day=.../``, written aside first,
    then each day's new files renamed into place before its old ones are removed: a reader of the shared folder never
    sees a day emptied or a file half written (at worst, for the moment between the renames and the removal, both
    versions of a day, or a file gone from under it: SQL across shards retries that)."""
    staging = out_dir / STAGING / shard_id
    shutil.rmtree(staging, ignore_errors=True)  # what a crashed run left
    summary = export_parquet(con, since, until, staging, f"shard={shard_id}")
    run = uuid.uuid4().hex[:12]
    for written in staging.glob(f"*/shard={shard_id}/day=*"):
        day = out_dir / written.relative_to(staging)
        day.mkdir(parents=True, exist_ok=True)
        old = list(day.glob("*.parquet"))
        for new in written.glob("*.parquet"):
            os.replace(new, day / f"{run}-{new.name}")
        for stale in old:
            stale.unlink(missing_ok=True)
    shutil.rmtree(staging, ignore_errors=True)
    return summary


def prune_export(out_dir: Path, shard_id: str, before: datetime.datetime) -> None:
    """Remove this shard's exported days older than ``before``."""
    oldest = f"day={before:%Y-%m-%d}"
    for day in out_dir.glob(f"*/shard={shard_id}/day=*"):
        if day.name < oldest:  # day=YYYY-MM-DD sorts as its date
            shutil.rmtree(day, ignore_errors=True)


def _write_exported_until(out_dir: Path, shard_id: str, until: datetime.datetime) -> None:
    marks = out_dir / EXPORTED_UNTIL
    marks.mkdir(parents=True, exist_ok=True)
    tmp = marks / f".{shard_id}.tmp"
    tmp.write_text(until.isoformat() + "Z")
    tmp.replace(marks / shard_id)


def exported_until(out_dir: Path) -> dict[str, str]:
    """When each shard's export last ended (ISO UTC), by shard id."""
    marks = out_dir / EXPORTED_UNTIL
    if not marks.is_dir():
        return {}
    return {p.name: p.read_text().strip() for p in sorted(marks.iterdir()) if not p.name.startswith(".")}


def _day_start(t: datetime.datetime) -> datetime.datetime:
    return t.replace(hour=0, minute=0, second=0, microsecond=0)


async def retention_loop(store: Store, retention_days: float, interval_s: float,
                         table_days: dict[str, float] | None = None) -> None:  # fmt: skip
    """Delete history older than ``retention_days`` (``table_days`` for the tables named there) now and then every
    ``interval_s`` (on the writer thread)."""
    while True:
        cutoff = _days_ago(retention_days)
        cutoffs = {table: _days_ago(days) for table, days in (table_days or {}).items()}
        deleted = await store.call(_delete_older_than, store, cutoff, cutoffs)
        if deleted:
            log.info("retention: deleted rows older than %s UTC: %s", cutoff.isoformat(), deleted)
        await asyncio.sleep(interval_s)


def _delete_older_than(
    store: Store, cutoff: datetime.datetime, cutoffs: dict[str, datetime.datetime]
) -> dict[str, int]:
    return delete_older_than(store.con, cutoff, cutoffs)
