"""The store's edge: what a decoded message must satisfy, what is dead-lettered and why, and the bounds on its state.

A real DuckDB file and the real store; messages are msgpack bytes as a (possibly hostile) peer would send them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import duckdb
import msgpack
import pytest

from ranksight.aggregator.columns import ColumnBuilder
from ranksight.aggregator.history import delete_older_than
from ranksight.aggregator.ingest.pipeline import Incoming
from ranksight.aggregator.ingest.settings import IngestSettings
from ranksight.aggregator.runtime import Aggregator
from ranksight.aggregator.state import NS, LiveState
from ranksight.aggregator.store import Store
from ranksight.aggregator.timefmt import naive_utc
from ranksight.schemas.codec import decode_columns, encode_event
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import NicRecord
from ranksight.schemas.subjects import Subjects
from ranksight.schemas.wire import event_type
from ranksight.settings import load_settings
from tests.unit.test_state_and_alerts import _beat

SUBJECTS = Subjects()
NOW = time.time_ns() // 1000 * 1000


def envelope(node: str = "a", kind: str = "gpu", **overrides: Any) -> bytes:
    records = {"gpu": [{"index": 0, "memory_used_bytes": 1}], "nic": [], "app": [],
               "heartbeat": [{"hostname": node, "version": "1", "pid": 1, "started_ns": 1}]}[kind]  # fmt: skip
    env = {"type": f"ranksight.ev.v1.{kind}", "cluster": "c", "node": node, "agent": f"{node}-inc", "seq": 1,
           "ts": NOW, "ttl": 10.0, "records": records}  # fmt: skip
    env.update(overrides)
    return msgpack.packb(env)


def incoming(data: bytes, node: str = "a", kind: str = "gpu", recv_ns: int = NOW) -> Incoming:
    return Incoming(SUBJECTS.event("c", node, kind), data, recv_ns)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    yield from _store(tmp_path, IngestSettings())


def _store(tmp_path: Path, limits: IngestSettings) -> Iterator[Store]:
    s = Store(tmp_path / "db.duckdb", SUBJECTS, limits)
    s.open()
    try:
        yield s
    finally:
        s.close_connection()
        s.shutdown()


def dead_reasons(store: Store) -> dict[str, int]:
    return dict(store.con.execute("SELECT reason, count(*) FROM dead_letters GROUP BY reason").fetchall())


POISON = {
    "seq_2_63": (envelope(seq=2**63), "bad_envelope"),
    "ts_2_64": (envelope(ts=2**64 - 1), "bad_envelope"),
    "ts_2_63_minus_1": (envelope(ts=2**63 - 1), "ts_out_of_range"),
    "ts_far_past": (envelope(ts=1), "ts_out_of_range"),
    "ttl_inf": (envelope(ttl=float("inf")), "bad_envelope"),
    "ttl_nan": (envelope(ttl=float("nan")), "bad_envelope"),
    "ttl_huge": (envelope(ttl=1e12), "ttl_out_of_range"),
    "record_int_2_63": (envelope(records=[{"index": 0, "memory_used_bytes": 2**63}]), "bad_record"),
    "record_float_nan": (envelope(records=[{"index": 0, "power_w": float("nan")}]), "bad_record"),
    "record_float_inf": (envelope(records=[{"index": 0, "sclk_hz": float("-inf")}]), "bad_record"),
    "nested_int_2_63": (
        envelope(kind="nic", records=[{"name": "x", "kind": "rdma", "counters": {"e": 2**63}}]),
        "bad_record",
    ),
    "list_int_2_63": (
        envelope(
            kind="app",
            records=[{"event": "heartbeat", "pid": 1, "n": 1, "client_ts": 1, "open_sections": [2**63]}],
        ),
        "bad_record",
    ),
}


@pytest.mark.parametrize("case", list(POISON))
def test_poison_pills_are_dead_lettered_and_the_rest_commits(store: Store, case: str) -> None:
    data, reason = POISON[case]
    kind = msgpack.unpackb(data, strict_map_key=False)["type"].rsplit(".", 1)[1]
    good = envelope(node="b", agent="b-inc", seq=1)
    result = store.commit_batch([incoming(data, kind=kind), incoming(good, node="b")])
    assert dead_reasons(store) == {reason: 1}
    assert store.con.execute("SELECT node, seq FROM gpu").fetchall() == [("b", 1)]
    assert result.records == 1 and result.dead_letters == 1


def test_empty_heartbeat_is_dead_lettered(store: Store) -> None:
    store.commit_batch([incoming(envelope(kind="heartbeat", records=[]), kind="heartbeat")])
    assert dead_reasons(store) == {"bad_envelope": 1}


def test_envelope_identity_must_match_the_subject(store: Store) -> None:
    spoof = envelope(node="victim", agent="victim-inc")  # sent on node a's subject as node "victim"
    store.commit_batch([incoming(spoof, node="a")])
    assert dead_reasons(store) == {"identity_mismatch": 1}
    assert store.con.execute("SELECT count(*) FROM gpu").fetchone() == (0,)


def test_dead_letter_payload_is_truncated_to_the_setting(tmp_path: Path) -> None:
    for store in _store(tmp_path, IngestSettings(dead_letter_payload_bytes=16)):
        store.commit_batch([incoming(b"\xc1" * 1000)])
        assert store.con.execute("SELECT size, octet_length(payload) FROM dead_letters").fetchone() == (
            1000,
            16,
        )


def test_a_commit_failure_dead_letters_only_the_offending_message(store: Store) -> None:
    # A constraint the validation cannot know about: the second message's row collides with a stored one.
    store.commit_batch([incoming(envelope(seq=1, records=[{"index": 0, "memory_used_bytes": 7}]))])
    store.con.execute("CREATE UNIQUE INDEX gpu_memory ON gpu (memory_used_bytes)")
    batch = [incoming(envelope(seq=s, records=[{"index": 0, "memory_used_bytes": m}])) for s, m in
             [(2, 10), (3, 11), (4, 7), (5, 12), (6, 13)]]  # fmt: skip
    result = store.commit_batch(batch)
    assert dead_reasons(store) == {"commit_failed": 1}
    assert [r[0] for r in store.con.execute("SELECT seq FROM gpu ORDER BY seq").fetchall()] == [1, 2, 3, 5, 6]
    assert [env.seq for env, _ in result.accepted] == [2, 3, 5, 6] and result.records == 4


def test_after_a_commit_failure_compact_batches_are_written_from_their_records(store: Store) -> None:
    """The store takes a compact batch's columns as the message is admitted and keeps only its records: a commit that
    fails is bisected and retried from the records, which give the same rows."""

    def nic(seq: int, rx: list[int]) -> bytes:
        ports = [
            NicRecord(name=f"p{i}", kind="netdev", rx_bytes=r, counters={"rx": r}) for i, r in enumerate(rx)
        ]
        env = Envelope(type=event_type("nic"), cluster="c", node="a", agent="a-inc", seq=seq, ts=NOW, ttl=6.0,
                       records=ports)  # fmt: skip
        return encode_event(env)

    store.commit_batch([incoming(nic(1, [7, 8]), kind="nic")])
    store.con.execute("CREATE UNIQUE INDEX nic_rx ON nic (rx_bytes)")
    batch = [nic(2, [10, 11]), nic(3, [12, 8]), nic(4, [13, 14])]
    assert all(decode_columns(data).columns is not None for data in batch)
    result = store.commit_batch([incoming(data, kind="nic") for data in batch])
    assert dead_reasons(store) == {"commit_failed": 1} and [env.seq for env, _ in result.accepted] == [2, 4]
    rows = store.con.execute("SELECT seq, name, rx_bytes, counters FROM nic ORDER BY seq, name").fetchall()
    assert rows == [(1, "p0", 7, '{"rx":7}'), (1, "p1", 8, '{"rx":8}'), (2, "p0", 10, '{"rx":10}'),
                    (2, "p1", 11, '{"rx":11}'), (4, "p0", 13, '{"rx":13}'), (4, "p1", 14, '{"rx":14}')]  # fmt: skip


def test_rows_that_cannot_become_arrow_are_dead_lettered_as_a_failed_commit(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows go into Arrow arrays as their messages are admitted, before the commit: a message whose rows fail there
    (nothing that passed validation should) is found and dead-lettered like one whose insert fails; the rest commit."""
    add = ColumnBuilder.add

    def refuse_seq_3(self: ColumnBuilder, *args: Any) -> None:
        if args[3] == 3:
            raise ValueError("refused")
        add(self, *args)

    monkeypatch.setattr(ColumnBuilder, "add", refuse_seq_3)
    result = store.commit_batch([incoming(envelope(seq=s)) for s in range(1, 6)])
    assert dead_reasons(store) == {"commit_failed": 1} and [env.seq for env, _ in result.accepted] == [
        1,
        2,
        4,
        5,
    ]
    assert [r[0] for r in store.con.execute("SELECT seq FROM gpu ORDER BY seq").fetchall()] == [1, 2, 4, 5]


def test_a_huge_seq_jump_opens_no_gap(store: Store) -> None:
    store.commit_batch([incoming(envelope(seq=1)), incoming(envelope(seq=2**62))])
    stats = store.sequence_stats()
    assert stats["gaps_open"] == 0 and stats["seq_jumps"] == 1
    store.commit_batch([incoming(envelope(seq=2**62 + 5))])  # a plausible jump still opens its gap
    assert store.sequence_stats()["gaps_open"] == 4


def test_another_node_cannot_move_an_incarnations_marks(store: Store) -> None:
    # Node b learned a's incarnation id and publishes under it, on its own subject, with a huge seq.
    hostile = envelope(node="b", agent="a-inc", seq=2**62)
    store.commit_batch([incoming(envelope(seq=1)), incoming(hostile, node="b")])
    store.commit_batch([incoming(envelope(seq=2))])  # a's next message is not taken for a duplicate
    rows = store.con.execute("SELECT node, seq FROM gpu WHERE agent = 'a-inc' ORDER BY node, seq").fetchall()
    assert rows == [("a", 1), ("a", 2), ("b", 2**62)]


def test_same_seq_different_content_is_counted_and_kept(store: Store) -> None:
    first = envelope(seq=1)
    store.commit_batch([incoming(first)])
    again = store.commit_batch([incoming(first)])  # a redelivery: the same bytes
    other = store.commit_batch([incoming(envelope(seq=1, records=[{"index": 5}]))])
    assert again.duplicates == 1 and again.dead_letters == 0
    assert other.conflicts == 1 and dead_reasons(store) == {"seq_conflict": 1}


def test_a_conflict_within_one_batch_is_caught(store: Store) -> None:
    result = store.commit_batch(
        [incoming(envelope(seq=1)), incoming(envelope(seq=1, records=[{"index": 5}]))]
    )
    assert result.conflicts == 1 and dead_reasons(store) == {"seq_conflict": 1}


def test_digests_of_a_failed_commit_are_not_kept_and_committed_ones_are_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for store in _store(tmp_path, IngestSettings(conflict_window=2)):
        store.commit_batch([incoming(envelope(seq=1))])
        # the disk fails: not the rows' fault, the batch stays unacknowledged
        with monkeypatch.context() as patched:
            patched.setattr(store, "_write", lambda *args: (_ for _ in ()).throw(OSError("disk full")))
            with pytest.raises(OSError):
                store.commit_batch([incoming(envelope(seq=2, records=[{"index": 5}]))])
        [marks] = store.sequencer.marks[("c", "a")].values()
        assert list(marks.digests) == [1] and marks.high_seq == 1
        # that seq 2 was never committed: another message with seq 2 is new, and its own bytes are what count next
        assert store.commit_batch([incoming(envelope(seq=2))]).conflicts == 0
        assert store.commit_batch([incoming(envelope(seq=2, records=[{"index": 5}]))]).conflicts == 1
        store.commit_batch([incoming(envelope(seq=n)) for n in (3, 4)])
        [seq] = store.sequencer.marks[("c", "a")].values()
        assert sorted(seq.digests) == [3, 4] and not seq.pending
        # seq 1 is beyond the window: a redelivery is taken for a duplicate, whatever its bytes
        assert store.commit_batch([incoming(envelope(seq=1, records=[{"index": 5}]))]).duplicates == 1


def test_nodes_beyond_the_cap_are_dead_lettered(tmp_path: Path) -> None:
    for store in _store(tmp_path, IngestSettings(max_nodes=3)):
        batch = [incoming(envelope(node=f"n{i}"), node=f"n{i}") for i in range(5)]
        store.commit_batch(batch)
        store.commit_batch([incoming(envelope(node="n0", seq=2), node="n0")])  # a known node goes on
        assert dead_reasons(store) == {"too_many_nodes": 2}
        assert store.sequence_stats()["nodes"] == 3
        assert store.con.execute("SELECT count(*) FROM gpu").fetchone() == (4,)


def test_incarnations_per_node_are_capped_and_idle_nodes_forgotten(tmp_path: Path) -> None:
    limits = IngestSettings(max_incarnations_per_node=2, node_forget_after_s=60)
    for store in _store(tmp_path, limits):
        for i in range(5):
            store.commit_batch([incoming(envelope(agent=f"inc-{i}"), recv_ns=NOW + i)])
        assert store.sequence_stats()["agents"] == 2
        assert store.con.execute("SELECT agent FROM agent_seq ORDER BY agent").fetchall() == [
            ("inc-3",),
            ("inc-4",),
        ]
        store.commit_batch([incoming(envelope(node="b"), node="b", recv_ns=NOW + 100 * NS)])
        assert store.forget_idle(NOW + 120 * NS) == 1  # node a: silent for 120 s
        assert store.sequence_stats()["nodes"] == 1
        assert store.con.execute("SELECT DISTINCT node FROM agent_seq").fetchall() == [("b",)]
        assert store.con.execute("SELECT count(*) FROM gpu WHERE node = 'a'").fetchone() == (
            5,
        )  # history stays


def test_replay_skips_and_counts_rows_live_state_cannot_use(store: Store) -> None:
    beat = envelope(kind="heartbeat")
    store.commit_batch([incoming(beat, kind="heartbeat")])
    # Rows an older version let in: an infinite TTL, a timestamp at the end of time.
    for seq, ts, ttl in [(2, "'infinity'", 10.0), (3, "now()", float("inf"))]:
        store.con.execute(
            f"INSERT INTO heartbeat (cluster, node, agent, seq, ts, recv_ts, ttl, hostname, version, pid, started_ns) "
            f"VALUES ('c', 'a', 'a-inc', {seq}, {ts}, now(), ?, 'a', '1', 1, 1)",
            [ttl],
        )
    replayed = store.replay({"heartbeat"}, NOW - 60 * NS)
    assert [env.seq for env, _ in replayed] == [1]
    assert store.replay_skipped == 2 and store.sequence_stats()["replay_skipped"] == 2


def test_live_state_forgets_nodes_silent_too_long() -> None:
    state = LiveState(gone_after_s=10, forget_after_s=100)
    state.observe(_beat("n1", 1, NOW), NOW)
    state.tick(NOW + 50 * NS)
    assert state.nodes.nodes[("c", "n1")].state == "gone"
    state.tick(NOW + 101 * NS)
    assert ("c", "n1") not in state.nodes.nodes


def test_dead_letters_have_their_own_retention(store: Store) -> None:
    old = NOW - 10 * 86400 * NS
    store.commit_batch([incoming(b"\xc1", recv_ns=old), incoming(envelope(ts=old), recv_ns=old)])
    cutoff = naive_utc(NOW - 30 * 86400 * NS)
    deleted = delete_older_than(store.con, cutoff, {"dead_letters": naive_utc(NOW - 7 * 86400 * NS)})
    assert deleted == {"dead_letters": 1}
    assert store.con.execute("SELECT count(*) FROM gpu").fetchone() == (1,)


def test_an_older_database_keeps_its_sequence_marks(tmp_path: Path) -> None:
    path = tmp_path / "db.duckdb"
    with duckdb.connect(str(path)) as con:  # the database as the version before 0910 left it
        con.execute("CREATE TABLE schema_migrations (version VARCHAR PRIMARY KEY, applied_at TIMESTAMP)")
        for f in sorted(resources.files("ranksight.aggregator.migrations").iterdir(), key=lambda f: f.name):
            if f.name.endswith(".sql") and f.name < "0910":
                con.execute(f.read_text())
                con.execute("INSERT INTO schema_migrations VALUES (?, now())", [f.name.removesuffix(".sql")])
        con.execute("INSERT INTO agent_seq VALUES ('a-inc', 'c', 'a', 5, 4, 0, 1, now(), now())")
        con.execute("INSERT INTO agent_seq_gaps VALUES ('a-inc', 3, 3)")
    for store in _store(tmp_path, IngestSettings()):
        late = store.commit_batch([incoming(envelope(seq=3)), incoming(envelope(seq=4))])
        again = store.commit_batch([incoming(envelope(seq=3))])
        assert late.records == 1 and late.duplicates == 1 and again.duplicates == 1
        assert store.sequence_stats()["gaps_open"] == 0


class _BrokenTracker:
    """A tracker with a bug: live state must count the message it cannot use and go on."""

    kinds = frozenset({"heartbeat"})

    def observe(self, env: Any, recv_ns: int) -> None:
        raise ZeroDivisionError("bug")

    def tick(self, now_ns: int) -> None:
        pass

    def forget(self, nodes: set[tuple[str, str]]) -> None:
        pass


def test_a_message_live_state_cannot_use_is_counted_not_fatal(tmp_path: Path) -> None:
    agg = Aggregator(load_settings(None, state_dir=tmp_path, aggregator={"http": {"port": 0}}))
    try:
        agg.state.trackers.insert(0, _BrokenTracker())
        agg._observe(_beat("n1", 1, NOW), NOW)
        assert agg.stats.state_skipped == 1 and agg.status_meta()["ingest"]["state_skipped"] == 1
    finally:
        agg.store.shutdown()


def test_a_batch_over_the_record_bound_commits_in_parts_and_loses_nothing(tmp_path: Path) -> None:
    """A hostile fetch: many records in few bytes. Each commit holds at most ``fetch_max_records`` decoded records
    (a message alone may bring more); the rest is left to the next commit with its sequence marks untouched."""
    gpus = [{"index": i, "memory_used_bytes": i} for i in range(6)]
    batch = [incoming(envelope(seq=seq, records=gpus)) for seq in range(1, 5)]
    batch.insert(2, incoming(b"\xc1"))  # dead-lettered wherever it falls
    batch.append(incoming(envelope(node="b", seq=1, records=gpus * 2), node="b"))  # 12: over the bound alone
    for s in _store(tmp_path, IngestSettings(fetch_max_records=10)):
        commits = []
        while batch:
            result = s.commit_batch(batch)
            commits.append((result.taken, result.records))
            batch = batch[result.taken :]
        assert commits == [(1, 6), (2, 6), (1, 6), (1, 6), (1, 12)]
        assert s.con.execute("SELECT node, seq, count(*) FROM gpu GROUP BY ALL ORDER BY ALL").fetchall() == [
            ("a", 1, 6), ("a", 2, 6), ("a", 3, 6), ("a", 4, 6), ("b", 1, 12)]  # fmt: skip
        assert dead_reasons(s) == {"not_msgpack": 1}
        assert s.sequence_stats()["duplicates"] == s.sequence_stats()["gaps_open"] == 0


def test_gaps_are_stored_as_they_change_and_read_back(tmp_path: Path) -> None:
    """Gaps are written in one pass over the commit's changed incarnations, only where they moved; a restart reads
    what the last commit left (gaps opened, narrowed, closed; other nodes' untouched)."""

    def stored(s: Store) -> list[tuple[Any, ...]]:
        return s.con.execute("SELECT node, agent, seq_lo, seq_hi FROM agent_seq_gaps ORDER BY ALL").fetchall()

    path = tmp_path / "db.duckdb"
    s = Store(path, SUBJECTS)
    s.open()
    s.commit_batch([incoming(envelope(seq=n), "a") for n in (1, 3, 7)]
                   + [incoming(envelope("b", seq=n), "b") for n in (1, 4)])  # fmt: skip
    assert stored(s) == [("a", "a-inc", 2, 2), ("a", "a-inc", 4, 6), ("b", "b-inc", 2, 3)]
    s.commit_batch([incoming(envelope(seq=n), "a") for n in (2, 5, 8)])  # one closed, one split, b untouched
    assert stored(s) == [("a", "a-inc", 4, 4), ("a", "a-inc", 6, 6), ("b", "b-inc", 2, 3)]
    s.commit_batch([incoming(envelope("b", seq=n), "b") for n in (2, 3)])
    s.close_connection()
    s.shutdown()
    again = Store(path, SUBJECTS)
    again.open()
    try:
        assert stored(again) == [("a", "a-inc", 4, 4), ("a", "a-inc", 6, 6)]
        assert again.sequence_stats()["gaps_open"] == 2
    finally:
        again.close_connection()
        again.shutdown()
