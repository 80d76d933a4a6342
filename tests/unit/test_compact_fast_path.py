"""The compact wire's fast path (columns decoded by the types of their fields, records built from them) against the checked
path (every value decoded, one dict per record, converted): for every batch, hostile ones included, the same records of
the same classes, or the same refusal."""

from __future__ import annotations

import time
from typing import Any

import msgpack
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ranksight.formats.inspector import parse_op
from ranksight.schemas import codec
from ranksight.schemas.codec import DecodeError, decode_columns, decode_event, encode_event
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import RECORD_KINDS, GpuRecord, HeartbeatRecord, InspectorRecord
from ranksight.schemas.structs import to_builtins
from ranksight.schemas.wire import event_type
from ranksight.simulate.inspector import JobSpec, simulate, summarize
from tests.unit.test_compact_wire import _batches

FAST = sorted(kind for kind in RECORD_KINDS if codec._raw_layout(kind) is not None)


def _env(kind: str, records: list[Any]) -> Envelope:
    return Envelope(type=event_type(kind), cluster="c", node="n", agent="a1", seq=7, ts=time.time_ns(), ttl=15,
                    records=records)  # fmt: skip


def _outcome(decode: Any, data: bytes) -> tuple[Any, ...]:
    """What a decoder makes of ``data``: the records (their classes and their msgpack, which tells 0 from 0.0) and the
    envelope, or the refusal."""
    try:
        env = decode(data)
    except DecodeError as exc:
        return ("refused", exc.reason, exc.detail)
    header = (env.type, env.cluster, env.node, env.agent, env.seq, env.ts, env.ttl)
    return ("ok", header, [type(r) for r in env.records], msgspec.msgpack.encode(env.records))


def _same(data: bytes) -> tuple[Any, ...]:
    fast, checked = _outcome(decode_event, data), _outcome(codec._decode_checked, data)
    assert fast == checked
    return fast


def _inspector(n: int) -> list[InspectorRecord]:
    lines = simulate(JobSpec(nodes=2, gpus_per_node=8, steps=40))
    records = [parse_op(line) for (host, _), proc in lines.items() if host == "node000" for line in proc]
    return sorted(records, key=lambda r: r.dump_ts_us)[:n]


def _summaries(n: int) -> list[Any]:
    records = sorted(_inspector(10_000), key=lambda r: r.dump_ts_us)
    return [summary for _, summary in summarize(records, 5.0, 0.5, 1.0)][:n]


def test_the_inspector_kinds_take_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    assert {"inspector", "inspector_summary"} <= set(FAST)
    assert (
        codec._raw_layout("heartbeat") is None
    )  # a sub-record would skip unknown keys the checked path decodes
    batches = {"inspector": _inspector(100), "inspector_summary": _summaries(50)}
    payloads = {kind: encode_event(_env(kind, records)) for kind, records in batches.items()}
    expected = {kind: _same(payload) for kind, payload in payloads.items()}

    monkeypatch.setattr(codec, "_decode_checked", lambda data: pytest.fail("the checked path"))
    monkeypatch.setattr(codec, "_rows_records", lambda *args: pytest.fail("converted from dicts"))
    for kind, payload in payloads.items():
        assert "columns" in msgpack.unpackb(payload)
        env = decode_event(payload)
        assert _outcome(decode_event, payload) == expected[kind]
        assert all(type(r) is RECORD_KINDS[kind].model for r in env.records)
        assert [to_builtins(r) for r in batches[kind]] == [msgspec.to_builtins(r) for r in env.records]


def test_constants_and_defaults() -> None:
    """Fields in neither columns nor constants take the record's defaults; constants go into every record; a column of
    a nullable field holds None (left in, not taken for a missing value)."""
    data = msgpack.unpackb(encode_event(_env("inspector", _inspector(4))))
    data.update(fields=["sn", "comm_name"], columns=[[1, 2, 3, 4], ["a", None, "b", None]])
    data["constants"] = {"comm_id": "c0", "rank": 3, "n_ranks": 8, "hostname": "h", "pid": 1, "op_kind": "coll",
                         "op": "AllReduce", "msg_size_bytes": 4096, "dump_ts_us": 5}  # fmt: skip
    payload = msgpack.packb(data)
    assert _same(payload)[0] == "ok"
    records = decode_event(payload).records
    assert [(r.sn, r.comm_name, r.rank, r.peer, r.capture_model, r.bw_mismatch) for r in records] == [
        (1, "a", 3, None, "sampled", False),
        (2, None, 3, None, "sampled", False),
        (3, "b", 3, None, "sampled", False),
        (4, None, 3, None, "sampled", False),
    ]


def test_other_batches_are_converted_from_dicts_without_decoding_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch of no records, one with a wide constant (written into every record's map), one of a kind with
    sub-records whose ``type`` is not where the encoder writes it: their values are decoded from the envelope's raw
    bytes and converted from one dict per record, as by the checked path."""
    wide = msgpack.unpackb(encode_event(_env("inspector_summary", _summaries(40))))
    wide.setdefault("constants", {})["slice_index"] = list(range(8_000))
    if "slice_index" in wide["fields"]:
        at = wide["fields"].index("slice_index")
        del wide["fields"][at], wide["columns"][at]
    empty = msgpack.unpackb(encode_event(_env("inspector", _inspector(3))))
    empty.update(count=0, columns=[[] for _ in empty["fields"]])
    gpu = msgpack.unpackb(encode_event(_env("gpu", [GpuRecord(index=i, power_w=300.0) for i in range(8)])))
    gpu = {key: value for key, value in gpu.items() if key != "type"} | {"type": gpu["type"]}
    payloads = [msgpack.packb(wide), msgpack.packb(empty), msgpack.packb(gpu)]
    expected = [_same(payload) for payload in payloads]
    assert [outcome[0] for outcome in expected] == ["ok"] * 3
    converted = []
    rows_records = codec._rows_records
    monkeypatch.setattr(
        codec, "_rows_records", lambda *args: converted.append(args[0]) or rows_records(*args)
    )
    monkeypatch.setattr(codec, "_decode_checked", lambda data: pytest.fail("decoded twice"))
    assert [_outcome(decode_event, payload) for payload in payloads] == expected
    assert converted == ["inspector_summary", "inspector", "gpu"]
    assert all(r.slice_index == list(range(8_000)) for r in decode_event(payloads[0]).records)


def test_constants_repeated_past_their_bound_are_refused_on_both_paths() -> None:
    """A list constant is a new list in every record: 100,000 records of one 1 MB constant would be 100 GB decoded.
    Refused before any record is made, by both paths, with the same reason."""
    data = msgpack.unpackb(encode_event(_env("inspector_summary", _summaries(40))))
    kept = [(f, c) for f, c in zip(data["fields"], data["columns"], strict=True) if f != "slice_index"]
    data["fields"], data["columns"] = [f for f, _ in kept], [c for _, c in kept]
    data.setdefault("constants", {})["slice_index"] = list(range(300_000))
    payload = msgpack.packb(data)
    outcome = _same(payload)
    assert outcome[:2] == ("refused", "bad_envelope") and "constants of 40 records" in outcome[2], outcome


def test_a_constant_that_grows_once_decoded_is_bounded_as_by_the_checked_path() -> None:
    """A list of float32s takes 5 bytes a value on the wire and 9 once decoded and encoded again, as the checked path
    measures it: a batch whose constants come under the bound by their wire bytes and over it decoded is refused by
    both paths."""
    data = msgpack.unpackb(encode_event(_env("inspector_summary", _summaries(48))))
    data["count"] *= 3
    kept = [
        (f, c * 3) for f, c in zip(data["fields"], data["columns"], strict=True) if f != "slice_exec_sum_us"
    ]
    data["fields"], data["columns"] = [f for f, _ in kept], [c for _, c in kept]
    data.setdefault("constants", {})["slice_exec_sum_us"] = _PLACEHOLDER
    float32s = b"\xdc\x03\xe8" + b"\xca\x3f\xc0\x00\x00" * 1000  # 1000 x 1.5
    payload = _pack(data, [float32s])
    bound = 4 * len(payload) + (1 << 20)
    assert 144 * len(float32s) < bound < 144 * len(msgspec.msgpack.encode([1.5] * 1000))
    outcome = _same(payload)
    assert outcome[:2] == ("refused", "bad_envelope") and "constants of 144 records" in outcome[2], outcome


def test_an_unknown_key_of_a_sub_record_is_decoded_as_by_the_checked_path() -> None:
    """Decoding into a sub-record skips the keys it does not know without reading them; the checked path decodes
    every value first, and refuses this one (not UTF-8). Kinds with sub-records have no layout: whichever path the
    envelope takes, the same refusal."""
    assert codec._raw_layout("gpu") is None
    data = msgpack.unpackb(
        encode_event(_env("gpu", [GpuRecord(index=i, power_w=300.0 + i) for i in range(4)]))
    )
    data.setdefault("constants", {})["links"] = _PLACEHOLDER
    for envelope in (
        data,
        {key: value for key, value in data.items() if key != "type"} | {"type": data["type"]},
    ):
        payload = _pack(envelope, [_BAD_LINKS])
        assert _same(payload)[:2] == ("refused", "not_msgpack")


def test_kinds_with_sub_records_go_to_the_checked_path_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    payloads = [
        encode_event(_env("gpu", [GpuRecord(index=i, power_w=300.0, name="x") for i in range(8)])),
        encode_event(_env("heartbeat", [HeartbeatRecord(hostname="h", version="1", pid=1, started_ns=5)])),
    ]
    expected = [_same(payload) for payload in payloads]
    monkeypatch.setattr(codec, "_RAW_ENVELOPE_DECODER", None)  # not used
    assert [_outcome(decode_event, payload) for payload in payloads] == expected


@pytest.mark.parametrize(
    ("column", "value", "reason", "detail"),
    [
        ("sn", "one", "bad_record", "Expected `int`, got `str` - at `records[2].sn`"),
        ("sn", 1.0, "bad_record", "Expected `int`, got `float` - at `records[2].sn`"),
        ("sn", True, "bad_record", "Expected `int`, got `bool` - at `records[2].sn`"),
        ("sn", 2**63, "bad_record", "Expected `int` <= 9007199254740992 - at `records[2].sn`"),
        (
            "exec_time_us",
            float("nan"),
            "bad_record",
            "Expected `float` >= 0.0 - at `records[2].exec_time_us`",
        ),
        ("op", None, "bad_record", "Expected `str`, got `null` - at `records[2].op`"),
        ("comm_name", b"x", "bad_record", "Expected `str | null`, got `bytes` - at `records[2].comm_name`"),
        ("comm_name", [1], "bad_record", "Expected `str | null`, got `array` - at `records[2].comm_name`"),
    ],
)
def test_a_hostile_value_is_refused_as_by_the_checked_path(
    column: str, value: Any, reason: str, detail: str
) -> None:
    data = msgpack.unpackb(encode_event(_env("inspector", _inspector(6))))
    data["columns"][data["fields"].index(column)][2] = value
    payload = msgpack.packb(data)
    with pytest.raises(DecodeError) as info:
        decode_event(payload)
    assert (info.value.reason, info.value.detail) == (reason, detail)
    assert _same(payload)[0] == "refused"


@pytest.mark.parametrize("kind", FAST)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_columns_are_the_records_values_and_no_record_shares_a_list_or_a_map(
    kind: str, data: st.DataObject
) -> None:
    """Built from columns, constants and defaults, each record holds a list or a map of its own (a constant's is one
    value on the wire; live state may change a record's in place), as on the checked path; the columns handed on
    are the records' values."""
    records = data.draw(_batches(kind))
    payload = encode_event(_env(kind, records))
    assert _same(payload)[0] == "ok"
    decoded = decode_columns(payload)
    decoded_records = decoded.envelope.records
    if not records:
        return
    model = RECORD_KINDS[kind].model
    assert decoded.columns is not None  # read column by column
    assert list(decoded.columns) == [
        [getattr(r, name) for r in decoded_records] for name in model.__struct_fields__
    ]
    for name in model.__struct_fields__:
        values = [getattr(r, name) for r in decoded_records]
        if isinstance(values[0], (list, dict)):
            assert len(set(map(id, values))) == len(values), name


# -- any batch, mutated: both paths agree -----------------------------------------------------------------------------
_PLACEHOLDER = "\x00placeholder\x00"
_BAD_LINKS = (
    b"\x91\x82\xa4name\xa1n\xa1z\xa2\xff\xfe"  # [{"name": "n", "z": <not UTF-8>}]: `z` is unknown to GpuLink
)
_BYTES = [
    b"\xa2\xff\xfe",  # a str that is not UTF-8
    b"\xd5\xff\x00\x01",  # a timestamp of a bad length
    b"\xd4\x05\x01",  # an ext
    b"\xd6\xff\x00\x00\x00\x01",  # a timestamp
    b"\xca\x3f\x80\x00\x00",  # a float32
    b"\x91" * 2000 + b"\x01",  # deep nesting
    b"\xc1",  # never used
    _BAD_LINKS,
]
_HOSTILE = [None, True, False, 0, 1, -1, 1.0, 0.5, 2**63 - 1, 2**63, 2**64 - 1, -(2**63), "", "a", "coll", "ring", b"",
            [], [1], [1.5, 2], ["a"], {}, {"k": 1}, {1: 2}, float("inf"), float("nan")]  # fmt: skip
_VALUES = st.one_of(
    st.sampled_from(_HOSTILE),
    st.sampled_from(_BYTES),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(),
    st.text(max_size=3),
    st.lists(st.integers(-3, 3), max_size=3),
)


def _pack(data: dict[str, Any], raw: list[bytes]) -> bytes:
    payload = msgpack.packb(data)
    for item in raw:
        payload = payload.replace(msgpack.packb(_PLACEHOLDER), item, 1)
    return payload


@st.composite
def _mutated(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(sorted(RECORD_KINDS)))
    records = draw(_batches(kind))
    data = msgpack.unpackb(encode_event(_env(kind, records)))
    if "records" in data:  # sent as maps: make it compact
        data = msgpack.unpackb(msgpack.packb(data | codec._compact(kind, records), default=codec._default))
        del data["records"]
    raw: list[bytes] = []

    def value() -> Any:
        drawn = draw(_VALUES)
        if isinstance(drawn, bytes) and drawn in _BYTES:
            raw.append(drawn)
            return _PLACEHOLDER
        return drawn

    fields, columns, constants = data.get("fields", []), data.get("columns", []), data.get("constants", {})
    known = list(RECORD_KINDS[kind].model.__struct_fields__)
    for _ in range(draw(st.integers(0, 3))):
        action = draw(
            st.sampled_from(["value", "constant", "fold", "drop", "unknown", "twice", "count", "column"])
        )
        lists = [column for column in columns if isinstance(column, list) and column]
        if action == "value" and lists:
            column = draw(st.sampled_from(lists))
            column[draw(st.integers(0, len(column) - 1))] = value()
        elif action == "constant":
            constants[draw(st.sampled_from(known))] = value()
        elif action == "fold" and fields:
            at = draw(st.integers(0, len(fields) - 1))
            name, column = fields.pop(at), columns.pop(at)
            if isinstance(column, list) and column:
                constants[name] = column[0]
        elif action == "drop" and fields:
            at = draw(st.integers(0, len(fields) - 1))
            del fields[at], columns[at]
        elif action == "unknown":
            constants["not_a_field"] = 1
        elif action == "twice" and fields:
            constants[fields[0]] = value()
        elif action == "count":
            data["count"] += draw(st.sampled_from([-1, 1]))
        elif action == "column" and columns:
            columns[draw(st.integers(0, len(columns) - 1))] = value()
    data.update(fields=fields, columns=columns, constants=constants)
    if draw(st.booleans()):  # not where the encoder writes it: every kind then takes the raw path
        data = {key: value for key, value in data.items() if key != "type"} | {"type": data["type"]}
    return _pack(data, raw)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(payload=_mutated())
def test_both_paths_agree_on_any_batch(payload: bytes) -> None:
    _same(payload)
