"""The compact wire: both record forms of every kind decode into the same records; hostile compact batches get one clear
reason; an aggregator of the previous release refuses compact envelopes and reads map-form ones."""

from __future__ import annotations

import time
from typing import Any

import msgpack
import msgspec
import msgspec.inspect as mi
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msgspec.structs import replace

from ranksight.formats.inspector import parse_op
from ranksight.schemas.codec import DecodeError, decode_event, encode_event
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import RECORD_KINDS, GpuRecord, HeartbeatRecord, InspectorRecord, NicRecord
from ranksight.schemas.structs import to_builtins
from ranksight.schemas.wire import MAX_RECORDS, event_type
from ranksight.settings import load_settings
from ranksight.simulate.inspector import JobSpec, simulate
from tests import previous_codec
from tests.model_values import bounds, number


def _env(kind: str, records: list[Any]) -> Envelope:
    return Envelope(type=event_type(kind), cluster="c", node="n", agent="a1", seq=7, ts=time.time_ns(), ttl=15,
                    records=records)  # fmt: skip


# -- valid records of every kind, drawn from the structs -------------------------------------------------------------
_SMALL = {str: st.sampled_from(["a", "b"])}
_SMALL_NUMBERS: dict[Any, list[Any]] = {int: [-2, -1, 0, 1, 2], float: [0.5, 1.0, 2.5]}
_FULL = {str: st.text(max_size=6)}


def _values(info: mi.Type) -> st.SearchStrategy[Any]:
    """Any valid value for a field's type; small domains often, so that columns of a batch repeat their values."""
    if isinstance(info, mi.Metadata):
        return _values(info.type)
    if isinstance(info, mi.UnionType):
        return st.one_of([_values(t) for t in info.types])
    if isinstance(info, mi.LiteralType):
        return st.sampled_from(info.values)
    if isinstance(info, mi.ListType):
        return st.lists(_values(info.item_type), max_size=2)
    if isinstance(info, mi.DictType):
        return st.dictionaries(st.sampled_from(["k", "l"]), _values(info.value_type), max_size=2)
    if isinstance(info, mi.StructType):
        return _records(info.cls)
    if isinstance(info, mi.NoneType):
        return st.none()
    if isinstance(info, mi.BoolType):
        return st.booleans()
    if isinstance(info, mi.StrType):
        return st.one_of(_SMALL[str], _FULL[str])
    assert isinstance(info, mi.IntType | mi.FloatType), info
    low, high, _, _ = bounds(info)
    small = [v for v in _SMALL_NUMBERS[int if isinstance(info, mi.IntType) else float] if low < v < high]
    return st.one_of(st.sampled_from(small or [low]), number(info))


def _records(model: type) -> st.SearchStrategy[Any]:
    fields = mi.type_info(model).fields  # type: ignore[attr-defined]
    values = {f.name: _values(f.type) for f in fields}
    optional = [f.name for f in fields if not f.required]
    return st.builds(
        lambda values, absent: msgspec.convert({k: v for k, v in values.items() if k not in absent}, model),
        st.fixed_dictionaries(values),
        st.sets(st.sampled_from(optional)) if optional else st.just(set()),
    )


def _batches(kind: str) -> st.SearchStrategy[list[Any]]:
    model = RECORD_KINDS[kind].model
    record = _records(model)
    return st.one_of(
        st.lists(record, min_size=model.min_records, max_size=4),
        st.builds(
            lambda r, n: [r] * n, record, st.integers(1, 3)
        ),  # identical records: every column constant
    )


@pytest.mark.parametrize("kind", sorted(RECORD_KINDS))
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_both_forms_decode_to_the_same_records(kind: str, data: st.DataObject) -> None:
    records = data.draw(_batches(kind))
    env = _env(kind, records)
    compact, as_map = decode_event(encode_event(env)), decode_event(encode_event(env, "map"))
    assert compact.records == as_map.records
    assert [to_builtins(r) for r in compact.records] == [to_builtins(r) for r in records]
    assert (compact.msg_id, compact.ts, compact.ttl) == (as_map.msg_id, as_map.ts, as_map.ttl)


def _inspector_batch(n: int) -> list[InspectorRecord]:
    lines = simulate(JobSpec(nodes=2, gpus_per_node=8, steps=20))
    records = [parse_op(line) for (host, _), proc in lines.items() if host == "node000" for line in proc]
    records.sort(key=lambda r: r.dump_ts_us)
    return records[:n]


def test_an_inspector_record_takes_at_most_110_bytes_in_a_batch() -> None:
    records = _inspector_batch(100)
    env = Envelope(type=event_type("inspector"), cluster="prod-a", node="gpu-node-017", agent="0123456789abcdef",
                   seq=123456, ts=time.time_ns(), ttl=60, records=records)  # fmt: skip
    compact, as_map = encode_event(env), encode_event(env, "map")
    assert len(compact) / len(records) <= 110 < len(as_map) / len(records) / 2
    assert decode_event(compact).records == decode_event(as_map).records


def test_newer_record_schema_version_is_unsupported() -> None:
    data = msgpack.unpackb(encode_event(_env("gpu", [GpuRecord(index=1)])))
    data["record_version"] = GpuRecord.schema_version + 1
    with pytest.raises(DecodeError) as info:
        decode_event(msgpack.packb(data))
    assert info.value.reason == "unsupported_version"
    assert "gpu records of schema version 2; this version reads up to 1" in str(info.value)
    data["record_version"] = GpuRecord.schema_version  # the same batch at the current version decodes
    assert decode_event(msgpack.packb(data)).records[0].index == 1


def _compact(kind: str = "gpu", **keys: Any) -> bytes:
    """A compact gpu envelope of two records (index 0 and 1, power 300 W in both), ``keys`` replacing its own."""
    records = [GpuRecord(index=0, power_w=300.0, name="x"), GpuRecord(index=1, power_w=300.0, name="y")]
    data = msgpack.unpackb(encode_event(_env(kind, records) if kind == "gpu" else _env(kind, [])))
    assert kind != "gpu" or (data["fields"], data["constants"]) == (["index", "name"], {"power_w": 300.0})
    data.update(keys)
    return msgpack.packb({k: v for k, v in data.items() if v is not _DROP})


_DROP = object()


@pytest.mark.parametrize(
    ("payload", "reason", "detail"),
    [
        (
            _compact(columns=[[0, 1], ["x"]]),
            "bad_envelope",
            "column `name` holds 1 values, count is 2",
        ),  # arity
        (_compact(columns=[[0, 1]]), "bad_envelope", "1 columns for 2 fields"),
        (_compact(fields=["index"]), "bad_envelope", "2 columns for 1 fields"),
        (_compact(count=3), "bad_envelope", "holds 2 values, count is 3"),
        (
            _compact(columns=[[0, "one"], ["x", "y"]]),
            "bad_record",
            "Expected `int`, got `str` - at `records[1].index`",
        ),
        (
            _compact(columns=[[0, 2**63], ["x", "y"]]),
            "bad_record",
            "<= 2147483647 - at `records[1].index`",
        ),
        (_compact(constants={"power_w": float("inf")}), "bad_record", "at `records[0].power_w`"),
        (_compact(constants={"ecc_correctable": 2**64 - 1}), "bad_record", "at `records[0].ecc_correctable`"),
        (_compact(fields=["name"], columns=[["x", "y"]]), "bad_record", "missing required field `index`"),
        (_compact(fields=["index", "index"]), "bad_envelope", "named twice"),
        (_compact(constants={"name": "z"}), "bad_envelope", "named twice"),
        (_compact(constants={"watts": 1}), "bad_envelope", "fields unknown to gpu records: 'watts'"),
        (
            _compact(fields=[], columns=[], constants={"index": 1}, count=100_000),
            "bad_envelope",
            "100000 records in",
        ),  # a few bytes must not become many rows
        (_compact(count=MAX_RECORDS + 1), "bad_envelope", "count"),
        (_compact(count=-1), "bad_envelope", "count"),
        (_compact(record_version=0), "bad_envelope", "record_version"),
        (_compact(record_version=_DROP), "bad_envelope", "compact records without `record_version`"),
        (_compact(count=_DROP), "bad_envelope", "compact records without `count`"),
        (_compact(columns="abc"), "bad_envelope", "Expected `array`, got `str` - at `columns`"),
        (_compact(columns=[[0, 1], "xy"]), "bad_envelope", "at `columns[1]`"),
        (_compact(records=[]), "bad_envelope", "both records and compact records"),
        (_compact(constants=[1]), "bad_envelope", "Expected `object`, got `array` - at `constants`"),
        (_compact("heartbeat"), "bad_envelope", "heartbeat needs at least 1 record"),
        (
            _compact(record_version=_DROP, count=_DROP, fields=_DROP, columns=_DROP, constants=_DROP),
            "bad_envelope",
            "Object missing required field `records`",
        ),
    ],
)
def test_hostile_compact_batches_get_one_clear_reason(payload: bytes, reason: str, detail: str) -> None:
    with pytest.raises(DecodeError) as info:
        decode_event(payload)
    assert info.value.reason == reason
    assert detail in str(info.value)


def test_records_too_alike_for_the_compact_form_go_as_maps() -> None:
    """Identical records fold into constants; below 8 bytes a record the decoder would refuse the batch (a flood of
    records from a few bytes), so the encoder sends such a batch in the map form, which every version reads."""
    few, many = _env("gpu", [GpuRecord(index=0)] * 3), _env("gpu", [GpuRecord(index=0)] * 200)
    assert "count" in msgpack.unpackb(encode_event(few)) and "records" in msgpack.unpackb(encode_event(many))
    assert [r.index for r in decode_event(encode_event(many)).records] == [0] * 200
    expansion = _compact(fields=[], columns=[], constants={"index": 0}, count=200)
    with pytest.raises(DecodeError, match=r"200 records in \d+ bytes \(at least 8 a record\)"):
        decode_event(expansion)


def test_columns_fill_defaults_and_constants() -> None:
    """An older agent's batch may lack a newer optional field: the model default fills it."""
    payload = _compact(fields=["index"], columns=[[4, 5]], constants={})
    assert [(r.index, r.power_w, r.links) for r in decode_event(payload).records] == [
        (4, None, []),
        (5, None, []),
    ]


def test_a_nic_batch_of_version_1_reads_as_every_counter() -> None:
    """Agents before `counters_full` (NIC records of version 1) sent every counter in every record."""
    port = NicRecord(name="enp1s0", kind="netdev", counters={"rx_crc_errors": 3})
    data = msgpack.unpackb(encode_event(_env("nic", [port, replace(port, **{"name": "enp2s0"})])))
    assert (
        data["record_version"] == NicRecord.schema_version == 2 and "counters_full" not in data["constants"]
    )
    data["record_version"] = 1
    records = decode_event(msgpack.packb(data)).records
    assert [(r.name, r.counters, r.counters_full) for r in records] == [
        ("enp1s0", {"rx_crc_errors": 3}, True),
        ("enp2s0", {"rx_crc_errors": 3}, True),
    ]


# -- the previous release -------------------------------------------------------------------------------------------
def _one_of_each() -> list[tuple[str, list[Any]]]:
    batches = [(kind, _examples(kind)) for kind in sorted(RECORD_KINDS)]
    return [*batches, ("inspector", _inspector_batch(20))]


def _examples(kind: str) -> list[Any]:
    return [_records(RECORD_KINDS[kind].model).example() for _ in range(3)]


@pytest.mark.filterwarnings("ignore::hypothesis.errors.NonInteractiveExampleWarning")
def test_the_previous_release_refuses_compact_and_reads_map_form() -> None:
    for kind, records in _one_of_each():
        env = _env(kind, records)
        with pytest.raises(DecodeError) as info:
            previous_codec.decode_event(encode_event(env))
        assert (info.value.reason, info.value.detail) == (
            "bad_envelope",
            "Object missing required field `records`",
        )
        old = previous_codec.decode_event(encode_event(env, "map"))
        assert (
            old.records
            == decode_event(encode_event(env, "map")).records
            == decode_event(encode_event(env)).records
        )


def test_this_release_reads_what_the_previous_release_agent_sent() -> None:
    """The previous agent's encoder was the map form byte for byte: same keys, same order, ``None`` left out."""
    beat = HeartbeatRecord(hostname="h", version="0.9", pid=1, started_ns=5)
    env = _env("heartbeat", [beat])
    header = {name: getattr(env, name) for name in ("type", "cluster", "node", "agent", "seq", "ts", "ttl")}
    fields = {name: value for name, value in to_builtins(beat).items() if value is not None}
    previous = msgpack.packb({**header, "records": [fields]}, use_bin_type=True)
    assert encode_event(env, "map") == previous
    assert decode_event(previous).records == decode_event(encode_event(env)).records


def test_the_agent_wire_format_setting() -> None:
    assert load_settings(None).agent.wire_format == "compact"
    assert load_settings(None, agent={"wire_format": "map"}).agent.wire_format == "map"
    with pytest.raises(ValueError, match="wire_format"):
        load_settings(None, agent={"wire_format": "json"})
