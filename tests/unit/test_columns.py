"""Records -> Arrow columns -> DuckDB rows -> records again (the replay path), for every kind."""

from __future__ import annotations

import duckdb

from aggregator.columns import ColumnBuilder, row_to_record
from schemas.records import GpuRecord, HeartbeatRecord, NicRecord
from schemas.records.heartbeat import CollectorHealth
from schemas.structs import to_builtins


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
    assert _round_trip("gpu", gpus) == [g.model_dump() for g in gpus]
    nics = [NicRecord(name="mlx5_0/1", kind="rdma", counters={"port_xmit_data": 2**40, "np_cnp_sent": 3})]
    assert _round_trip("nic", nics) == [n.model_dump() for n in nics]
    beat = HeartbeatRecord(hostname="h", version="1", pid=2, started_ns=3,
                           collectors=[CollectorHealth(name="gpu", state="absent", last_error="no GPU")])  # fmt: skip
    assert _round_trip("heartbeat", [beat]) == [beat.model_dump()]


def test_an_envelope_with_no_records_makes_an_empty_table() -> None:
    builder = ColumnBuilder("gpu")
    builder.add("c", "n", "a", 1, 5, 7, 10.0, [])
    assert builder.table().num_rows == 0
