"""The ``lateness_us`` series from ``inspector_summary`` rows: a window's parts (this version's agents publish each
window in parts, each agent at its own times) count as the rank's whole window, as older agents' one summary did."""

from __future__ import annotations

from pathlib import Path

import duckdb

from ranksight.aggregator.api.views import SERIES, SeriesQuery, _series

MIGRATIONS = sorted(
    (Path(__file__).parents[2] / "src" / "ranksight" / "aggregator" / "migrations").glob("*.sql")
)
W = 5_000_000


def lateness(rows: list[tuple[int, int, float]], comms: list[str] | None = None) -> dict[str, float]:
    """The series' value per rank over one window; ``rows``: (rank, timed, exec_sum_us) of each part or summary."""
    con = duckdb.connect()
    for migration in MIGRATIONS:  # the aggregator's schema
        con.execute(migration.read_text())
    for rank, timed, total in rows:
        con.execute(
            "INSERT INTO inspector_summary (cluster, node, agent, seq, ts, recv_ts, ttl, window_start_us, window_us, "
            "comm_id, rank, n_ranks, hostname, pid, op_kind, op, size_bucket, count, bytes, timed, exec_sum_us) "
            "VALUES ('c', ?, 'a', 1, now(), now(), 11, ?, ?, '0xabc', ?, 2, ?, ?, 'coll', 'AllReduce', 1024, ?, 0, ?, ?)",
            [f"n{rank}", W, W, rank, f"n{rank}", 100 + rank, timed, timed, total],
        )
    job = "j" if comms is not None else None  # a job's series: the rows of its communicators
    q = SeriesQuery(SERIES["lateness_us"], 0, 10 * W, 10 * W, "c", [], job, comms or [], 10)
    lines, _, _ = _series(con.cursor(), q)
    return {line["series"]: line["v"][0] for line in lines}


def test_a_window_s_parts_add_up_per_rank_before_its_lateness_is_taken() -> None:
    whole = lateness([(0, 10, 1000.0), (1, 10, 3000.0)])  # rank 0: 100 us a collective, rank 1: 300 us
    assert whole == {"n0 pid 100": 200.0, "n1 pid 101": 0.0}
    # the same window in parts: rank 1's first part holds one long collective
    parts = lateness([(0, 5, 500.0), (0, 5, 500.0), (1, 1, 900.0), (1, 9, 2100.0)])
    assert parts == whole
    # a job's series: the rows of its communicators only
    assert lateness([(0, 5, 500.0), (1, 6, 1800.0)], comms=["0xabc"]) == {
        "n0 pid 100": 200.0,
        "n1 pid 101": 0.0,
    }
    assert lateness([(0, 5, 500.0)], comms=["0xdef"]) == {}
