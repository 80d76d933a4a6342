"""The one DuckDB writer: migrations, batched columnar ingest with exactly-once effect, dead letters, replay.

All work on the database happens on one dedicated thread (``await store.call(fn, ...)``), so the event loop never
blocks on DuckDB and there is exactly one writer. Readers (the SQL API) take their own cursors.

A batch goes through the pure pipeline first (:mod:`aggregator.ingest`: decode, admit, sequence); the writer commits
what it admitted with the sequence marks it moved, in one transaction, so a crash between commit and ack cannot double
anything, and dead-letters what it refused. The alerts, silences and drains tables are written and read by their own
modules (:mod:`aggregator.tables`), mixed into :class:`Store`.

Nothing that passed validation can stop ingest: if a batch's commit fails anyway, the batch is bisected, the messages
that cannot be written are dead-lettered (``commit_failed``) and the rest is committed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import pyarrow as pa

from ranksight.aggregator.columns import ENVELOPE_FIELDS, ColumnBuilder, row_to_record, table_columns
from ranksight.aggregator.ingest.admission import NS, check_times
from ranksight.aggregator.ingest.pipeline import Admission, BatchResult, Incoming
from ranksight.aggregator.ingest.sequence import AgentSeq, Marks, NodeKey, Sequencer
from ranksight.aggregator.ingest.settings import IngestSettings
from ranksight.aggregator.tables.alerts import AlertTable
from ranksight.aggregator.tables.drains import DrainTable
from ranksight.aggregator.tables.silences import SilenceTable
from ranksight.aggregator.timefmt import naive_utc
from ranksight.core.private import DIR_MODE, private_files
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import RECORD_KINDS
from ranksight.schemas.records.inspector import IDENTITY as INSPECTOR_IDENTITY
from ranksight.schemas.subjects import Subjects
from ranksight.schemas.wire import event_type

log = logging.getLogger(__name__)
T = TypeVar("T")


_SEQ_COLUMNS = ("agent", "cluster", "node", "high_seq", "messages", "duplicates", "gaps_open", "first_recv",
                "last_recv", "seq_jumps")  # fmt: skip


_GAP_TYPES = {"cluster": pa.string(), "node": pa.string(), "agent": pa.string(), "seq_lo": pa.int64(),
              "seq_hi": pa.int64()}  # fmt: skip
_DEAD_COLUMNS = ("recv_ts", "subject", "reason", "detail", "msg_id", "size", "payload")
# one inspector row ``i`` and one of a batch ``b`` are the same record (its identity; NULL peers are equal)
_SAME_RECORD = " AND ".join(f"i.{c} IS NOT DISTINCT FROM b.{c}" for c in INSPECTOR_IDENTITY)


def sql_text(text: str) -> str:
    """``text`` as a SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def out_of_memory(exc: BaseException | None) -> duckdb.OutOfMemoryException | None:
    """The out-of-memory error behind ``exc``, if any (cleanup after it, such as an unregister, raises another)."""
    while exc is not None:
        if isinstance(exc, duckdb.OutOfMemoryException):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


class Store(AlertTable, SilenceTable, DrainTable):
    def __init__(
        self, path: str | Path, subjects: Subjects | None = None, limits: IngestSettings | None = None
    ) -> None:
        self.path = Path(path)
        self.subjects = subjects or Subjects()
        self.limits = limits or IngestSettings()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="duckdb-writer")
        self._con: duckdb.DuckDBPyConnection | None = None
        # the history database's name in SQL: its file's stem, as opening the file names it (the connection's own
        # in-memory database holds the names DuckDB reserves)
        stem = (
            self.path.stem
            if self.path.stem not in ("memory", "system", "temp")
            else f"{self.path.stem}_history"
        )
        self._catalog = '"' + stem.replace('"', '""') + '"'
        self.sequencer = Sequencer(self.limits)
        self.replay_skipped = 0  # stored messages that replay could not turn back into a valid envelope
        self._fetched_rows = False  # inspector rows fetched on request (seq 0) may be in history
        # per kind, the fields a history row keeps only where a flag of its record is true
        self._kept_when = (
            {"nic": {"counters": "counters_full"}} if self.limits.nic_history_counters == "full" else {}
        )

    # -- threading ----------------------------------------------------------------------------------------------
    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            raise RuntimeError("store is not open")
        return self._con

    def reader(self) -> duckdb.DuckDBPyConnection:
        """A cursor for a reader thread (same database, its own transaction)."""
        cursor = self.con.cursor()
        cursor.execute(f"USE {self._catalog}")  # a cursor starts in the connection's in-memory database
        return cursor

    # -- lifecycle ----------------------------------------------------------------------------------------------
    def open(self) -> None:
        self.path.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        # attached, not opened: the row-group size is an option of ATTACH; named as opening the file would name it
        self._con = duckdb.connect()
        self._con.execute(f"ATTACH {sql_text(str(self.path))} AS {self._catalog} "
                          f"(ROW_GROUP_SIZE {self.limits.row_group_rows})")  # fmt: skip
        self._con.execute(f"USE {self._catalog}")
        self._con.execute(f"SET checkpoint_threshold = '{self.limits.checkpoint_wal_mib}MiB'")
        private_files(
            self.path, self.path.with_name(self.path.name + ".wal")
        )  # a file from before 0600 files
        self.migrate()
        self._load_seq()
        [(fetched,)] = self.con.execute("SELECT count(*) FROM inspector WHERE seq = 0").fetchall()
        self._fetched_rows = fetched > 0

    def open_read_only(self) -> None:
        """Open an existing history file to read it, and nothing else (``ranksight sql --db``): no migration, no
        write; DuckDB refuses while an aggregator holds the file (its lock)."""
        if not self.path.is_file():
            raise FileNotFoundError(f"no such history file: {self.path}")
        self._con = duckdb.connect()
        self._con.execute(f"ATTACH {sql_text(str(self.path))} AS {self._catalog} (READ_ONLY)")
        self._con.execute(f"USE {self._catalog}")

    def close_connection(self) -> None:
        """Close the database (run on the writer thread)."""
        if self._con is not None:
            self._con.close()
            self._con = None

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True)

    def migrate(self) -> list[str]:
        con = self.con
        con.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version VARCHAR PRIMARY KEY, applied_at TIMESTAMP)"
        )
        done = {r[0] for r in con.execute("SELECT version FROM schema_migrations").fetchall()}
        applied = []
        files = sorted(
            (
                f
                for f in resources.files("ranksight.aggregator.migrations").iterdir()
                if f.name.endswith(".sql")
            ),
            key=lambda f: f.name,
        )
        for f in files:
            version = f.name.removesuffix(".sql")
            if version in done:
                continue
            con.execute("BEGIN TRANSACTION")
            try:
                con.execute(f.read_text())
                con.execute("INSERT INTO schema_migrations VALUES (?, now())", [version])
                con.execute("COMMIT")
            except Exception:
                con.execute("ROLLBACK")
                raise
            applied.append(version)
        if applied:  # one line: a fresh database applies every migration, which is no news to the operator
            log.info("applied %d migration%s (%s)", len(applied), "s" if len(applied) > 1 else "",
                     applied[0] if len(applied) == 1 else f"{applied[0]} .. {applied[-1]}")  # fmt: skip
        self._derive_kind_tables()
        return applied

    def _derive_kind_tables(self) -> None:
        """Create each record kind's table from its model, and add the columns of fields its table lacks.

        Only ever adds: a column of a field that left the model keeps its rows. A kind therefore needs no migration,
        and no model change can make ``INSERT ... BY NAME`` fail at ingest.
        """
        con = self.con
        existing: dict[str, set[str]] = defaultdict(set)
        for table, column in con.execute(
            "SELECT table_name, column_name FROM duckdb_columns() WHERE schema_name = 'main'"
        ).fetchall():
            existing[table].add(column)
        envelope = {name for name, _ in ENVELOPE_FIELDS}
        changed: list[str] = []
        for kind in RECORD_KINDS:
            columns = table_columns(kind)
            if kind not in existing:
                spec = ", ".join(
                    f'"{c}" {t}' + (" NOT NULL" if c in envelope else "") for c, t in columns.items()
                )
                con.execute(f'CREATE TABLE "{kind}" ({spec})')
                changed.append(f"table {kind}")
                continue
            for column, sql_type in columns.items():
                if column not in existing[kind]:
                    con.execute(f'ALTER TABLE "{kind}" ADD COLUMN "{column}" {sql_type}')
                    changed.append(f"column {kind}.{column}")
        if changed:  # one line, as for the migrations
            log.info("from the record models: added %s", ", ".join(changed))

    def _load_seq(self) -> None:
        """Load the sequence state of the nodes seen within ``node_forget_after_s``, the newest incarnations of each."""
        limits = self.limits
        since = naive_utc(time.time_ns() - int(limits.node_forget_after_s * NS))
        rows = self.con.execute(
            "SELECT agent, cluster, node, high_seq, messages, duplicates, epoch_ns(first_recv), epoch_ns(last_recv), "
            "seq_jumps FROM agent_seq WHERE last_recv >= ? "
            "QUALIFY row_number() OVER (PARTITION BY cluster, node ORDER BY last_recv DESC) <= ? "
            "ORDER BY last_recv DESC",
            [since, limits.max_incarnations_per_node],
        ).fetchall()
        gaps: dict[tuple[str, str, str], list[list[int]]] = defaultdict(list)
        for cluster, node, agent, lo, hi in self.con.execute(
            "SELECT cluster, node, agent, seq_lo, seq_hi FROM agent_seq_gaps ORDER BY seq_lo"
        ).fetchall():
            gaps[cluster, node, agent].append([lo, hi])
        self.sequencer.load(rows, gaps)

    # -- ingest -------------------------------------------------------------------------------------------------
    def commit_batch(self, batch: list[Incoming]) -> BatchResult:
        """Validate, de-duplicate and commit a fetched batch in one transaction; bad messages become dead letters.

        At most ``fetch_max_records`` decoded records are committed at once (a message is never split: one alone may
        bring more): the messages from the one that would pass the bound on are left out, ``result.taken`` says how
        many were handled, and the caller commits the rest next, unacknowledged until then."""
        admission = Admission(batch, self.subjects, self.limits, self.sequencer)
        admitted: list[tuple[Envelope, Incoming]] = []
        # each kind's rows, added as messages are admitted: a compact batch's columns, taken at once, are not kept
        builders: dict[str, ColumnBuilder] = {}
        # rows that Arrow refused: the commit fails as a write would, and is bisected
        unbuilt: Exception | None = None
        for env, msg, columns in admission.admitted():
            admitted.append((env, msg))
            if unbuilt is None:
                try:
                    self._add_rows(builders, env, msg, columns)
                except Exception as exc:
                    unbuilt = exc
        result, changed = admission.result, admission.changed
        dead = [self._dead_letter(msg, reason, detail) for msg, reason, detail in admission.refused]
        try:
            if unbuilt is not None:
                raise unbuilt
            self._write(builders, dead, changed)
        except Exception as exc:  # rows that passed validation and still fail: find them, commit the rest
            if out_of_memory(exc):
                raise  # memory held by SQL queries, not the rows' fault: the caller retries the whole batch
            unwritable = self._unwritable(admitted)
            if not unwritable:
                raise  # not the rows' fault (disk, database): the batch stays unacknowledged
            log.warning(
                "commit failed (%s); dead-lettering %d of %d messages", exc, len(unwritable), len(admitted)
            )
            bad = {id(item) for item, _ in unwritable}
            admitted = [item for item in admitted if id(item) not in bad]
            dead += [
                self._dead_letter(msg, "commit_failed", f"{type(e).__name__}: {e}")
                for (_, msg), e in unwritable
            ]
            self._write(self._builders(admitted), dead, changed)
        for key, agent in self.sequencer.settle(changed):
            self._delete_seq(key, agent)
        result.dead_letters = len(dead)
        result.records = sum(len(env.records) for env, _ in admitted)
        result.accepted = [(env, msg.recv_ns) for env, msg in admitted]
        return result

    def _dead_letter(self, msg: Incoming, reason: str, detail: str) -> tuple[Any, ...]:
        kept = msg.data[: self.limits.dead_letter_payload_bytes]
        return naive_utc(msg.recv_ns), msg.subject, reason, detail[:2000], msg.msg_id, len(msg.data), kept

    def _add_rows(self, builders: dict[str, ColumnBuilder], env: Envelope, msg: Incoming,
                  columns: tuple[list[Any], ...] | None) -> None:  # fmt: skip
        """An admitted envelope's rows into its kind's builder: from ``columns`` where the codec read them so."""
        builder = builders.get(env.kind)
        if builder is None:
            builder = builders[env.kind] = ColumnBuilder(env.kind, kept_when=self._kept_when.get(env.kind))
        builder.add(
            env.cluster, env.node, env.agent, env.seq, env.ts, msg.recv_ns, env.ttl, env.records, columns
        )

    def _builders(self, admitted: list[tuple[Envelope, Incoming]]) -> dict[str, ColumnBuilder]:
        """The rows of ``admitted``, read from their records (after a failed commit: the columns are gone)."""
        builders: dict[str, ColumnBuilder] = {}
        for env, msg in admitted:
            self._add_rows(builders, env, msg, None)
        return builders

    def _insert_rows(self, builders: dict[str, ColumnBuilder]) -> None:
        con = self.con
        for kind, builder in builders.items():
            # Registered explicitly: the SQL sandbox turns off external access, which also disables
            # DuckDB's implicit scans of Python variables.
            con.register("arrow_batch", builder.table())
            try:
                con.execute(f'INSERT INTO "{kind}" BY NAME SELECT * FROM arrow_batch')
                if kind == "inspector" and self._fetched_rows:
                    # a record fetched on request that a message brings after all: the message's row is the one kept
                    con.execute(f"DELETE FROM inspector i WHERE i.seq = 0 AND EXISTS (SELECT 1 FROM arrow_batch b "
                                f"WHERE b.cluster = i.cluster AND {_SAME_RECORD})")  # fmt: skip
            finally:
                con.unregister("arrow_batch")

    def _write(self, builders: dict[str, ColumnBuilder], dead: list[tuple[Any, ...]],
               changed: Marks) -> None:  # fmt: skip
        con = self.con
        con.execute("BEGIN TRANSACTION")
        try:
            self._insert_rows(builders)
            if dead:  # columnar: a burst of bad messages costs what a batch of good ones does
                con.register(
                    "dead_batch", pa.table(dict(zip(_DEAD_COLUMNS, zip(*dead, strict=True), strict=True)))
                )
                try:
                    con.execute("INSERT INTO dead_letters BY NAME SELECT * FROM dead_batch")
                finally:
                    con.unregister("dead_batch")
            self._write_seq([s for incarnations in changed.values() for s in incarnations.values()])
            con.execute("COMMIT")
        except Exception:
            con.execute("ROLLBACK")
            raise

    def _unwritable(self, admitted: list[tuple[Envelope, Incoming]]) -> list[tuple[Any, Exception]]:
        """Bisect ``admitted`` in trial transactions (always rolled back): the messages whose rows cannot be written."""
        if not admitted:
            return []
        self.con.execute("BEGIN TRANSACTION")
        try:
            self._insert_rows(self._builders(admitted))
            return []
        except Exception as exc:
            if out_of_memory(exc):
                raise  # the pool filled up meanwhile: no row is to blame
            if len(admitted) == 1:
                return [(admitted[0], exc)]
        finally:
            self.con.execute("ROLLBACK")
        half = len(admitted) // 2
        return self._unwritable(admitted[:half]) + self._unwritable(admitted[half:])

    def _delete_seq(self, key: NodeKey, agent: str) -> None:
        for table in ("agent_seq", "agent_seq_gaps"):
            self.con.execute(
                f"DELETE FROM {table} WHERE cluster = ? AND node = ? AND agent = ?", [*key, agent]
            )

    def forget_idle(self, now_ns: int) -> int:
        """Drop the sequence state of nodes silent for ``node_forget_after_s`` (run on the writer thread); how many."""
        idle = self.sequencer.forget_idle(now_ns)
        for key, agents in idle:
            for agent in agents:
                self._delete_seq(key, agent)
        return len(idle)

    def _write_seq(self, changed: list[AgentSeq]) -> None:
        if not changed:
            return
        con = self.con
        rows = [(s.agent, s.cluster, s.node, s.high_seq, s.messages, s.duplicates, s.gaps_open,
                 naive_utc(s.first_recv), naive_utc(s.last_recv), s.seq_jumps) for s in changed]  # fmt: skip
        # One columnar upsert: executemany costs about a millisecond per agent, in every commit.
        con.register("seq_batch", pa.table(dict(zip(_SEQ_COLUMNS, zip(*rows, strict=True), strict=True))))
        try:
            con.execute("INSERT OR REPLACE INTO agent_seq BY NAME SELECT * FROM seq_batch")
        finally:
            con.unregister("seq_batch")
        # Gaps rewritten only where they changed, all in two columnar statements: a node with a gap that stays open
        # (a message lost for good) would otherwise cost a delete and an insert in every commit that touches it.
        moved = []
        for s in changed:
            stored = self.sequencer.stored((s.cluster, s.node), s.agent)
            if s.gaps != (stored.gaps if stored else []):
                moved.append(s)
        if not moved:
            return
        keys = pa.table({"cluster": [s.cluster for s in moved], "node": [s.node for s in moved],
                         "agent": [s.agent for s in moved]})  # fmt: skip
        gaps = [(s.cluster, s.node, s.agent, lo, hi) for s in moved for lo, hi in s.gaps]
        columns = list(zip(*gaps, strict=True)) if gaps else [()] * len(_GAP_TYPES)
        con.register("gap_keys", keys)
        con.register("gap_rows", pa.table({name: pa.array(column, type=kind) for (name, kind), column
                                           in zip(_GAP_TYPES.items(), columns, strict=True)}))  # fmt: skip
        try:
            con.execute("DELETE FROM agent_seq_gaps g USING gap_keys k "
                        "WHERE g.cluster = k.cluster AND g.node = k.node AND g.agent = k.agent")  # fmt: skip
            con.execute("INSERT INTO agent_seq_gaps BY NAME SELECT * FROM gap_rows")
        finally:
            con.unregister("gap_keys")
            con.unregister("gap_rows")

    def sequence_stats(self) -> dict[str, int]:
        return {**self.sequencer.stats(), "replay_skipped": self.replay_skipped}

    # -- replay -------------------------------------------------------------------------------------------------
    def replay(self, kinds: set[str], since_ns: int) -> list[tuple[Envelope, int]]:
        """Rebuild (envelope, receipt ns) pairs of ``kinds`` received since ``since_ns``, in receipt order.

        Stored rows are checked again like incoming messages (records, ts, ttl): a message whose rows do not make a
        valid envelope (written by an older version, or edited by hand) is skipped and counted in ``replay_skipped``.
        """
        out: list[tuple[Envelope, int]] = []
        for kind in sorted(kinds & set(RECORD_KINDS)):
            cur = self.con.execute(
                f'SELECT *, epoch_us(ts) AS _ts_us, epoch_us(recv_ts) AS _recv_us FROM "{kind}" '
                "WHERE recv_ts >= ? AND seq > 0 ORDER BY recv_ts, agent, seq",  # seq 0: fetched on request
                [naive_utc(since_ns)],
            )
            names = [d[0] for d in cur.description]
            current: Envelope | None = None
            skipping: tuple[str, int] | None = None
            for values in cur.fetchall():
                row = dict(zip(names, values, strict=True))
                msg_key = (row["agent"], row["seq"])
                if msg_key == skipping:
                    continue
                try:
                    if current is None or (current.agent, current.seq) != msg_key:
                        if row["_ts_us"] is None or row["_recv_us"] is None:
                            raise ValueError("ts or recv_ts is not a finite timestamp")
                        recv_ns = row["_recv_us"] * 1000
                        env = Envelope(
                            type=event_type(kind), cluster=row["cluster"], node=row["node"], agent=row["agent"],
                            seq=row["seq"], ts=row["_ts_us"] * 1000, ttl=row["ttl"], records=[],
                        )  # fmt: skip
                        check_times(env, recv_ns, self.limits)
                        current = env
                        out.append((current, recv_ns))
                    current.records.append(row_to_record(kind, row))
                except Exception as exc:  # any unusable row: skip its whole message, never stop the start
                    log.warning("replay: skipping stored %s message %s:%s: %s", kind, *msg_key, exc)
                    self.replay_skipped += 1
                    if current is not None and (current.agent, current.seq) == msg_key:
                        out.pop()  # the message being rebuilt is the last one out
                    current, skipping = None, msg_key
        out.sort(key=lambda item: item[1])
        return out

    def insert_raw_inspector(
        self, cluster: str, node: str, agent: str, records: list[Any], now_ns: int
    ) -> int:
        """Write raw ``inspector`` records fetched from an agent on request (not a message: ``seq`` 0, ``ttl`` 0,
        skipped by replay), except those already in history by their identity; how many were new. (One that a message
        brings later replaces its fetched twin: see ``_insert_rows``.)"""
        if not records:
            return 0
        builder = ColumnBuilder("inspector")
        builder.add(cluster, node, agent, 0, now_ns, now_ns, 0.0, records)
        times = [r.dump_ts_us for r in records]
        self.con.register("raw_batch", builder.table())
        try:
            # only history within the batch's dump times is compared (a zone-map range scan, not the whole table)
            [(inserted,)] = self.con.execute(
                f"INSERT INTO inspector BY NAME SELECT * FROM raw_batch b WHERE NOT EXISTS (SELECT 1 FROM inspector i "
                f"WHERE i.cluster = ? AND i.dump_ts_us BETWEEN ? AND ? AND {_SAME_RECORD}) "
                f"QUALIFY row_number() OVER (PARTITION BY {', '.join(INSPECTOR_IDENTITY)}) = 1",
                [cluster, min(times), max(times)],
            ).fetchall()
        finally:
            self.con.unregister("raw_batch")
        self._fetched_rows = self._fetched_rows or bool(inserted)
        return int(inserted)

    def append_rows(self, table: str, rows: list[dict[str, Any]]) -> None:
        """Columnar append of derived rows (findings, summaries) to ``table``, matched by column name."""
        self.con.register("derived_batch", pa.Table.from_pylist(rows))
        try:
            self.con.execute(f'INSERT INTO "{table}" BY NAME SELECT * FROM derived_batch')
        finally:
            self.con.unregister("derived_batch")

    # -- actions ------------------------------------------------------------------------------------------------
    def append_audit(self, rows: list[dict[str, Any]]) -> None:
        """Action steps (``aggregator.actions.runner.audit_rows``)."""
        self.append_rows("action_audit", rows)

    def action_states(self, since_ns: int, fingerprints: list[str]) -> list[dict[str, Any]]:
        """The latest step of each action that moved since ``since_ns`` or is about one of ``fingerprints`` (incidents
        firing now): what the planner must know again after a restart."""
        cur = self.con.execute(
            "SELECT * EXCLUDE (rn) FROM (SELECT *, row_number() OVER (PARTITION BY id ORDER BY step_at DESC, seq DESC) AS rn FROM action_audit) "
            "WHERE rn = 1 AND (step_at >= make_timestamp(?::BIGINT // 1000) OR list_contains(?::VARCHAR[], fingerprint))",
            [since_ns, fingerprints],
        )
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]

    # -- small helpers for readers ------------------------------------------------------------------------------
    def rows(self, sql: str, params: list[Any] | None = None) -> Iterator[dict[str, Any]]:
        cur = self.reader().execute(sql, params or [])
        names = [d[0] for d in cur.description]
        for values in cur.fetchall():
            yield dict(zip(names, values, strict=True))
