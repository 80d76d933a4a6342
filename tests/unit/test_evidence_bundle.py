"""``ranksight job evidence``'s own parts: the Inspector tail of a job's processes (on a real history database) and
the stacks file, from real dumps (``fixtures/flight_recorder/``)."""

from __future__ import annotations

import json
from pathlib import Path

from ranksight.aggregator.store import Store
from ranksight.api.forensics import inspector_tail_sql, stacks_text

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "flight_recorder"


def test_inspector_tail_is_the_job_processes_by_host_and_pid(tmp_path: Path) -> None:
    store = Store(tmp_path / "history.duckdb")
    store.open()
    try:
        for host, pid in [("node1", 100), ("node2", 100), ("node'3", 7)]:  # a pid recurs on another node
            store.con.execute(
                "INSERT INTO inspector (cluster, node, agent, seq, ts, recv_ts, ttl, hostname, pid, dump_ts_us) "
                "VALUES ('c', ?, 'a', 1, now(), now(), 15, ?, ?, 1)", [host, host, pid])  # fmt: skip

        def tail(procs: list[tuple[str, int]]) -> list[tuple[str, int]]:
            return sorted(
                store.con.execute(f"SELECT hostname, pid FROM ({inspector_tail_sql(procs)})").fetchall()
            )

        assert tail([("node1", 100), ("node'3", 7)]) == [("node'3", 7), ("node1", 100)]
        assert tail([("x' OR true --", 1)]) == [] and tail([]) == []
    finally:
        store.close_connection()
        store.shutdown()


def test_stacks_file_reads_as_tracebacks_of_every_thread() -> None:
    dumps = [json.loads(p.read_bytes()) for p in sorted((FIXTURES / "python_stuck").iterdir())]
    text = stacks_text(dumps)
    rank2 = text.split("rank 2, pid ")[1]
    assert (
        "thread MainThread (main):" in rank2 and ", in next_batch\n" in rank2 and "tests/fr_job.py" in rank2
    )
    assert text.count("thread MainThread (main):") == 3
    torch_only = {
        "version": "2.10",
        "entries": [],
        "ranksight": {"rank": 0, "pid": 5, "host": "h", "threads": []},
    }
    assert "no Python stacks" in stacks_text([torch_only])
