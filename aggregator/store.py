"""The one DuckDB writer: migrations, batched columnar ingest with exactly-once effect, dead letters, alerts.

All work on the database happens on one dedicated thread (``await store.call(fn, ...)``), so the event loop never
blocks on DuckDB and there is exactly one writer. Readers (the SQL API) take their own cursors.

Exactly-once effect: each agent incarnation numbers its messages 1, 2, 3...; the store keeps, per agent, the highest
sequence committed and the ranges never seen (gaps). A message at or below the high-water mark that does not fill a gap is
a duplicate (redelivery after a crash, or a re-publish after a lost ack) and is skipped. The marks are written in the same
transaction as the rows, so a crash between commit and ack cannot double anything.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import pyarrow as pa

from aggregator.columns import ColumnBuilder, row_to_record
from schemas.alerts import Alert, Silence
from schemas.codec import DecodeError, decode_event
from schemas.envelope import Envelope, event_type
from schemas.records import RECORD_MODELS
from schemas.subjects import SubjectError, Subjects

log = logging.getLogger(__name__)
T = TypeVar("T")
MAX_GAP_RANGES = 1000


@dataclass
class Incoming:
    subject: str
    data: bytes
    recv_ns: int
    msg_id: str | None = None


@dataclass
class AgentSeq:
    agent: str
    cluster: str
    node: str
    high_seq: int = 0
    messages: int = 0
    duplicates: int = 0
    gaps: list[list[int]] = field(default_factory=list)  # [lo, hi] inclusive, ascending
    first_recv: int = 0
    last_recv: int = 0

    @property
    def gaps_open(self) -> int:
        return sum(hi - lo + 1 for lo, hi in self.gaps)

    def accept(self, seq: int) -> bool:
        """Record ``seq``; False if it is a duplicate."""
        if seq > self.high_seq:
            if seq > self.high_seq + 1:
                self.gaps.append([self.high_seq + 1, seq - 1])
                del self.gaps[:-MAX_GAP_RANGES]
            self.high_seq = seq
            return True
        for i, (lo, hi) in enumerate(self.gaps):
            if lo <= seq <= hi:  # a late message fills a gap
                pieces = [p for p in ([lo, seq - 1], [seq + 1, hi]) if p[0] <= p[1]]
                self.gaps[i : i + 1] = pieces
                return True
        return False

    def copy(self) -> AgentSeq:
        return AgentSeq(self.agent, self.cluster, self.node, self.high_seq, self.messages, self.duplicates,
                        [list(g) for g in self.gaps], self.first_recv, self.last_recv)  # fmt: skip


@dataclass
class BatchResult:
    accepted: list[tuple[Envelope, int]] = field(default_factory=list)  # (envelope, receipt ns)
    records: int = 0
    duplicates: int = 0
    dead_letters: int = 0
    new_gaps: int = 0


_ALERT_SCHEMA = pa.schema(
    [
        (c, pa.string())
        for c in ("fingerprint", "rule", "severity", "state", "cluster", "node", "job", "comm", "entity")
    ]
    + [
        ("rank", pa.int64()),
        ("summary", pa.string()),
        ("started_at", pa.string()),
        ("resolved_at", pa.string()),
        ("updated_at", pa.string()),
        ("evidence", pa.string()),
        ("silenced_by", pa.string()),
    ]
)


_SEQ_COLUMNS = ("agent", "cluster", "node", "high_seq", "messages", "duplicates", "gaps_open", "first_recv",
                "last_recv")  # fmt: skip


def _ns_to_dt(ns: int) -> datetime.datetime:
    """Naive UTC datetime: all TIMESTAMP columns hold UTC."""
    return datetime.datetime.fromtimestamp(ns / 1e9, tz=datetime.UTC).replace(tzinfo=None)


class Store:
    def __init__(self, path: str | Path, subjects: Subjects | None = None) -> None:
        self.path = Path(path)
        self.subjects = subjects or Subjects()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="duckdb-writer")
        self._con: duckdb.DuckDBPyConnection | None = None
        self._seq: dict[str, AgentSeq] = {}

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
        return self.con.cursor()

    # -- lifecycle ----------------------------------------------------------------------------------------------
    def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._con = duckdb.connect(str(self.path))
        self.migrate()
        self._load_seq()

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
            (f for f in resources.files("aggregator.migrations").iterdir() if f.name.endswith(".sql")),
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
            log.info("applied migration %s", version)
        return applied

    def _load_seq(self) -> None:
        gaps: dict[str, list[list[int]]] = defaultdict(list)
        for agent, lo, hi in self.con.execute(
            "SELECT agent, seq_lo, seq_hi FROM agent_seq_gaps ORDER BY seq_lo"
        ).fetchall():
            gaps[agent].append([lo, hi])
        rows = self.con.execute(
            "SELECT agent, cluster, node, high_seq, messages, duplicates, epoch_ns(first_recv), epoch_ns(last_recv) "
            "FROM agent_seq"
        ).fetchall()
        self._seq = {
            agent: AgentSeq(agent, cluster, node, high, messages, dups, gaps[agent], first, last)
            for agent, cluster, node, high, messages, dups, first, last in rows
        }

    # -- ingest -------------------------------------------------------------------------------------------------
    def commit_batch(self, batch: list[Incoming]) -> BatchResult:
        """Decode, de-duplicate and commit one fetched batch in one transaction."""
        result = BatchResult()
        builders: dict[str, ColumnBuilder] = {}
        dead: list[tuple[Any, ...]] = []
        changed: dict[str, AgentSeq] = {}
        for msg in batch:
            try:
                env = decode_event(msg.data)
                where = self.subjects.parse_event(msg.subject)
                if where.kind != env.kind:
                    raise DecodeError(
                        "subject_mismatch", f"subject kind {where.kind!r} but type {env.type!r}"
                    )
            except (DecodeError, SubjectError) as exc:
                reason = exc.reason if isinstance(exc, DecodeError) else "bad_subject"
                dead.append((_ns_to_dt(msg.recv_ns), msg.subject, reason, str(exc)[:2000], msg.msg_id, len(msg.data),
                             msg.data))  # fmt: skip
                continue
            seq = changed.get(env.agent) or self._seq.get(env.agent)
            seq = seq.copy() if seq is not None and env.agent not in changed else seq
            if seq is None:
                seq = AgentSeq(env.agent, env.cluster, env.node, first_recv=msg.recv_ns)
            changed[env.agent] = seq
            gaps_before = seq.gaps_open
            seq.last_recv = msg.recv_ns
            if not seq.accept(env.seq):
                seq.duplicates += 1
                result.duplicates += 1
                continue
            result.new_gaps += max(0, seq.gaps_open - gaps_before)
            seq.messages += 1
            builder = builders.get(env.kind)
            if builder is None:
                builder = builders[env.kind] = ColumnBuilder(env.kind)
            builder.add(env.cluster, env.node, env.agent, env.seq, env.ts, msg.recv_ns, env.ttl, env.records)
            result.records += len(env.records)
            result.accepted.append((env, msg.recv_ns))
        result.dead_letters = len(dead)

        con = self.con
        con.execute("BEGIN TRANSACTION")
        try:
            for kind, builder in builders.items():
                # Registered explicitly: the SQL sandbox turns off external access, which also disables
                # DuckDB's implicit scans of Python variables.
                con.register("arrow_batch", builder.table())
                con.execute(f'INSERT INTO "{kind}" BY NAME SELECT * FROM arrow_batch')
                con.unregister("arrow_batch")
            if dead:
                con.executemany("INSERT INTO dead_letters VALUES (?, ?, ?, ?, ?, ?, ?)", dead)
            self._write_seq(changed)
            con.execute("COMMIT")
        except Exception:
            con.execute("ROLLBACK")
            raise
        self._seq.update(changed)
        return result

    def _write_seq(self, changed: dict[str, AgentSeq]) -> None:
        if not changed:
            return
        con = self.con
        rows = [(s.agent, s.cluster, s.node, s.high_seq, s.messages, s.duplicates, s.gaps_open,
                 _ns_to_dt(s.first_recv), _ns_to_dt(s.last_recv)) for s in changed.values()]  # fmt: skip
        # One columnar upsert: executemany costs about a millisecond per agent, in every commit.
        con.register("seq_batch", pa.table(dict(zip(_SEQ_COLUMNS, zip(*rows, strict=True), strict=True))))
        try:
            con.execute("INSERT OR REPLACE INTO agent_seq BY NAME SELECT * FROM seq_batch")
        finally:
            con.unregister("seq_batch")
        touched = [
            s for s in changed.values() if s.gaps or (self._seq.get(s.agent) and self._seq[s.agent].gaps)
        ]
        for s in touched:
            con.execute("DELETE FROM agent_seq_gaps WHERE agent = ?", [s.agent])
            if s.gaps:
                con.executemany(
                    "INSERT INTO agent_seq_gaps VALUES (?, ?, ?)", [(s.agent, lo, hi) for lo, hi in s.gaps]
                )

    def sequence_stats(self) -> dict[str, int]:
        return {
            "agents": len(self._seq),
            "messages": sum(s.messages for s in self._seq.values()),
            "duplicates": sum(s.duplicates for s in self._seq.values()),
            "gaps_open": sum(s.gaps_open for s in self._seq.values()),
        }

    # -- replay -------------------------------------------------------------------------------------------------
    def replay(self, kinds: set[str], since_ns: int) -> list[tuple[Envelope, int]]:
        """Rebuild (envelope, receipt ns) pairs of ``kinds`` received since ``since_ns``, in receipt order."""
        out: list[tuple[Envelope, int]] = []
        for kind in sorted(kinds & set(RECORD_MODELS)):
            cur = self.con.execute(
                f'SELECT *, epoch_ns(ts) AS _ts, epoch_ns(recv_ts) AS _recv FROM "{kind}" '
                "WHERE recv_ts >= ? ORDER BY recv_ts, agent, seq",
                [_ns_to_dt(since_ns)],
            )
            names = [d[0] for d in cur.description]
            current: Envelope | None = None
            for values in cur.fetchall():
                row = dict(zip(names, values, strict=True))
                if current is None or (current.agent, current.seq) != (row["agent"], row["seq"]):
                    current = Envelope.model_construct(
                        type=event_type(kind), cluster=row["cluster"], node=row["node"], agent=row["agent"],
                        seq=row["seq"], ts=row["_ts"], ttl=row["ttl"], records=[],
                    )  # fmt: skip
                    out.append((current, row["_recv"]))
                current.records.append(row_to_record(kind, row))
        out.sort(key=lambda item: item[1])
        return out

    def append_rows(self, table: str, rows: list[dict[str, Any]]) -> None:
        """Columnar append of derived rows (findings, summaries) to ``table``, matched by column name."""
        self.con.register("derived_batch", pa.Table.from_pylist(rows))
        try:
            self.con.execute(f'INSERT INTO "{table}" BY NAME SELECT * FROM derived_batch')
        finally:
            self.con.unregister("derived_batch")

    # -- alerts -------------------------------------------------------------------------------------------------
    def write_alerts(self, alerts: list[Alert]) -> None:
        """Append alert transitions (one columnar insert: a mass resolve can be thousands of rows)."""
        if not alerts:
            return
        columns = ("fingerprint", "rule", "severity", "state", "cluster", "node", "job", "comm", "entity", "rank",
                   "summary", "started_at", "resolved_at", "updated_at")  # fmt: skip
        data: dict[str, list[Any]] = {c: [getattr(a, c) for a in alerts] for c in columns}
        data["evidence"] = [json.dumps(a.evidence, default=str) for a in alerts]
        data["silenced_by"] = [json.dumps(a.silenced_by) if a.silenced_by else None for a in alerts]
        batch = pa.table(data, schema=_ALERT_SCHEMA)
        self.con.register("alert_batch", batch)
        try:
            self.con.execute(
                "INSERT INTO alerts BY NAME SELECT * REPLACE (started_at::TIMESTAMP AS started_at, "
                "resolved_at::TIMESTAMP AS resolved_at, updated_at::TIMESTAMP AS updated_at) FROM alert_batch"
            )
        finally:
            self.con.unregister("alert_batch")

    def active_alerts(self) -> list[Alert]:
        cur = self.con.execute(
            "SELECT fingerprint, rule, severity, state, cluster, node, job, comm, rank, summary, evidence, "
            "strftime(started_at, '%Y-%m-%dT%H:%M:%S.%fZ'), strftime(updated_at, '%Y-%m-%dT%H:%M:%S.%fZ'), entity "
            "FROM alerts QUALIFY row_number() OVER (PARTITION BY fingerprint ORDER BY updated_at DESC, "
            "state = 'resolved' DESC) = 1"
        )
        out = []
        for r in cur.fetchall():
            if r[3] != "firing":
                continue
            out.append(Alert(fingerprint=r[0], rule=r[1], severity=r[2], state=r[3], cluster=r[4], node=r[5],
                             job=r[6], comm=r[7], rank=r[8], summary=r[9], evidence=json.loads(r[10] or "{}"),
                             started_at=r[11], updated_at=r[12], entity=r[13]))  # fmt: skip
        return out

    def save_silence(self, silence: Silence) -> None:
        """Insert or update (an early expiry moves ``ends_at``) one silence."""
        self.con.execute(
            "INSERT OR REPLACE INTO silences VALUES (?, ?, ?::TIMESTAMP, ?::TIMESTAMP, ?, ?, now()::TIMESTAMP)",
            [silence.id, json.dumps([m.model_dump() for m in silence.matchers]), silence.starts_at.rstrip("Z"),
             silence.ends_at.rstrip("Z"), silence.created_by, silence.comment],
        )  # fmt: skip

    def silences(self, since_ns: int) -> list[Silence]:
        """Silences that end after ``since_ns``, oldest first."""
        cur = self.con.execute(
            "SELECT id, matchers, strftime(starts_at, '%Y-%m-%dT%H:%M:%S.%fZ'), "
            "strftime(ends_at, '%Y-%m-%dT%H:%M:%S.%fZ'), created_by, comment FROM silences "
            "WHERE ends_at > make_timestamp(?::BIGINT // 1000) ORDER BY starts_at, id",
            [since_ns],
        )
        return [Silence(id=r[0], matchers=json.loads(r[1]), starts_at=r[2], ends_at=r[3], created_by=r[4],
                        comment=r[5]) for r in cur.fetchall()]  # fmt: skip

    def set_drained(self, cluster: str, nodes: list[str], drained: bool, reason: str) -> None:
        self.con.execute(
            "INSERT INTO node_drains SELECT ?, unnest(?::VARCHAR[]), ?, now()::TIMESTAMP, ?",
            [cluster, nodes, drained, reason],
        )

    def drained_nodes(self) -> list[dict[str, Any]]:
        """The nodes drained now: cluster, node, since (ISO), reason."""
        cur = self.con.execute(
            "SELECT cluster, node, strftime(changed_at, '%Y-%m-%dT%H:%M:%S.%fZ'), reason FROM node_drains "
            "QUALIFY row_number() OVER (PARTITION BY cluster, node ORDER BY changed_at DESC) = 1 AND drained "
            "ORDER BY cluster, node"
        )
        return [{"cluster": c, "node": n, "since": at, "reason": r} for c, n, at, r in cur.fetchall()]

    # -- small helpers for readers ------------------------------------------------------------------------------
    def rows(self, sql: str, params: list[Any] | None = None) -> Iterator[dict[str, Any]]:
        cur = self.reader().execute(sql, params or [])
        names = [d[0] for d in cur.description]
        for values in cur.fetchall():
            yield dict(zip(names, values, strict=True))
