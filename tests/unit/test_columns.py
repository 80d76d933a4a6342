"""Records -> Arrow columns -> DuckDB rows -> records again (the replay path), for every kind."""

from __future__ import annotations

import duckdb

from ranksight.aggregator.columns import ColumnBuilder, row_to_record
from ranksight.schemas.structs import to_builtins
from ranksight.schemas.twins import CollectorHealth, GpuRecord, HeartbeatRecord, NicRecord


def _round_trip(kind: str, records: list) -> list:  # type: ignore[type-arg]
    builder = ColumnBuilder(kind)
    builder.add("c", "n", "a", 1, 5, 7, 10.0, records)
    builder.add("c", "n", "a", 2, 6, 8, 10.0, [])  # an empty batch adds no rows
    table = builder.table()
    assert table.num_rows == len(records)
    con = duckdb.connect()
    con.register("t", table)
    cur = con.execute("SELECT * FROM t")
    names = [d[0] for d in cur.description]
    return [to_builtins(row_to_record(kind, dict(zip(names, row, strict=True)))) for row in cur.fetchall()]


def test_scalars_lists_maps_and_sub_models_survive() -> None:
    gpus = [GpuRecord(index=0, throttled=True, throttle_reasons=["thermal", "power"], power_w=None),
            GpuRecord(index=1, name="MI300X", memory_used_bytes=2**40)]  # fmt: skip
    assert _round_trip("gpu", gpus) == [to_builtins(g) for g in gpus]
    nics = [NicRecord(name="mlx5_0/1", kind="rdma", counters={"port_xmit_data": 2**40, "np_cnp_sent": 3})]
    assert _round_trip("nic", nics) == [to_builtins(n) for n in nics]
    beat = HeartbeatRecord(hostname="h", version="1", pid=2, started_ns=3,
                           collectors=[CollectorHealth(name="gpu", state="absent", last_error="no GPU")])  # fmt: skip
    assert _round_trip("heartbeat", [beat]) == [to_builtins(beat)]


def test_an_envelope_with_no_records_makes_an_empty_table() -> None:
    builder = ColumnBuilder("gpu")
    builder.add("c", "n", "a", 1, 5, 7, 10.0, [])
    assert builder.table().num_rows == 0


def test_chunked_building_keeps_every_row_in_order_in_one_chunk() -> None:
    chunked, whole = ColumnBuilder("gpu", chunk_rows=3), ColumnBuilder("gpu", chunk_rows=10**6)
    for seq in range(1, 6):
        records = [
            GpuRecord(index=i, power_w=seq * 100.0 + i, links=[{"name": f"x{i}"}] if i else [])
            for i in range(seq)
        ]
        for builder in (chunked, whole):
            builder.add("c", "n", "a", seq, seq, seq, 10.0, records)
    table = chunked.table()
    assert table.equals(whole.table())
    assert table.num_rows == 15 and {column.num_chunks for column in table.columns} == {1}
    assert table.column("power_w").to_pylist()[:4] == [100.0, 200.0, 201.0, 300.0]
