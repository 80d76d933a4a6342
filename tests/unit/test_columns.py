"""Records (or a compact batch's columns) -> Arrow columns -> DuckDB rows -> records again (the replay path), for every
kind."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import duckdb
import msgpack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ranksight.aggregator.columns import ColumnBuilder, row_to_record
from ranksight.aggregator.ingest.pipeline import Incoming
from ranksight.aggregator.store import Store
from ranksight.schemas.codec import decode_columns, encode_event
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import RECORD_KINDS, CollectorHealth, GpuRecord, HeartbeatRecord, NicRecord
from ranksight.schemas.structs import to_builtins
from ranksight.schemas.subjects import Subjects
from ranksight.schemas.wire import WireFormat, event_type
from tests.unit.test_compact_wire import _batches
from tests.unit.test_ingest_admission import NOW


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


# -- a compact batch's columns and map-form records: the same rows ----------------------------------------------------
def _committed_rows(
    batches: list[tuple[str, list[Any]]], wire: WireFormat
) -> dict[str, list[tuple[Any, ...]]]:
    """Every table's rows once ``batches`` ((kind, records), one envelope each) are committed in the ``wire`` form."""
    with tempfile.TemporaryDirectory(prefix="ranksight-forms-") as tmp:
        store = Store(Path(tmp) / "history.duckdb")
        store.open()
        try:
            messages = [Incoming(Subjects().event("c", "n", kind), encode_event(_env(kind, seq, records), wire), NOW)
                        for seq, (kind, records) in enumerate(batches, 1)]  # fmt: skip
            result = store.commit_batch(messages)
            assert result.dead_letters == 0 and len(result.accepted) == len(batches)
            return {kind: store.con.execute(f'SELECT * FROM "{kind}" ORDER BY rowid').fetchall()
                    for kind in RECORD_KINDS}  # fmt: skip
        finally:
            store.close_connection()
            store.shutdown()


def _env(kind: str, seq: int, records: list[Any]) -> Envelope:
    return Envelope(type=event_type(kind), cluster="c", node="n", agent="n-1", seq=seq, ts=NOW, ttl=15.0,
                    records=records)  # fmt: skip


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_both_forms_commit_the_same_rows_for_every_kind(data: st.DataObject) -> None:
    """The store writes a compact batch from the codec's columns, a map-form one from its records: row for row the
    same tables, every kind (JSON text, lists, the NIC history's counters kept by their flag)."""
    batches = [(kind, records) for kind in sorted(RECORD_KINDS)
               for records in data.draw(st.lists(_batches(kind), min_size=1, max_size=3))]  # fmt: skip
    assert any(decode_columns(encode_event(_env(kind, 1, records))).columns for kind, records in batches)
    assert _committed_rows(batches, "compact") == _committed_rows(batches, "map")


def test_an_integer_in_a_float_column_is_stored_as_its_record_holds_it() -> None:
    """A float field decoded from an integer holds a float, in the record and in its column; Arrow would refuse the
    integer itself in a DOUBLE column beyond 2^53."""
    records = [
        NicRecord(name=f"p{i}", kind="netdev", tx_bps=1.5 + i, counters={"rx": i}, counters_full=i != 1)
        for i in range(3)
    ]
    payload = msgpack.unpackb(encode_event(_env("nic", 1, records)))
    # beyond 2^53 (a double cannot hold it exactly) and within the field's declared range (quantities.Gauge)
    payload["columns"][payload["fields"].index("tx_bps")] = [2**59 + 1, 3, -(2**59)]
    decoded = decode_columns(msgpack.packb(payload))
    assert decoded.columns is not None and [r.tx_bps for r in decoded.envelope.records] == [
        2.0**59,
        3.0,
        -(2.0**59),
    ]
    batches = [("nic", list(decoded.envelope.records))]
    assert _committed_rows(batches, "compact") == _committed_rows(batches, "map")
