from __future__ import annotations

import time

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ranksight.schemas.codec import DecodeError, decode_event, encode_event
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import CollectorHealth, GpuRecord, HeartbeatRecord
from ranksight.schemas.structs import to_builtins
from ranksight.schemas.wire import event_type


def _env(kind: str, records: list) -> Envelope:  # type: ignore[type-arg]
    return Envelope(type=event_type(kind), cluster="c", node="n", agent="a1", seq=7, ts=time.time_ns(), ttl=15,
                    records=records)  # fmt: skip


def test_round_trip_typed_records() -> None:
    beat = HeartbeatRecord(hostname="h", version="1", pid=1, started_ns=5,
                           collectors=[CollectorHealth(name="gpu", state="absent")])  # fmt: skip
    decoded = decode_event(encode_event(_env("heartbeat", [beat])))
    assert decoded.kind == "heartbeat" and decoded.msg_id == "a1:7"
    assert [to_builtins(r) for r in decoded.records] == [to_builtins(beat)]
    assert type(decoded.records[0]) is HeartbeatRecord


def test_a_decoded_envelope_has_the_encoded_fields() -> None:
    env = _env("gpu", [GpuRecord(index=0)])
    decoded = decode_event(encode_event(env))
    assert type(decoded) is Envelope
    fields = [name for name in Envelope.__struct_fields__ if name != "records"]
    assert [getattr(decoded, f) for f in fields] == [getattr(env, f) for f in fields]
    assert decoded.msg_id == "a1:7"


def test_unsupported_values_stay_null() -> None:
    decoded = decode_event(encode_event(_env("gpu", [GpuRecord(index=0, power_w=None)])))
    assert decoded.records[0].power_w is None


def test_newer_agent_fields_are_ignored() -> None:
    raw = msgpack.packb(
        {**to_builtins(_env("gpu", [])), "future": 1, "records": [{"index": 1, "new_field": "x"}]}
    )
    assert decode_event(raw).records[0].index == 1


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"\xc1", "not_msgpack"),
        (msgpack.packb("text"), "not_a_map"),
        (msgpack.packb({"type": "ranksight.ev.v1.gpu"}), "bad_envelope"),
        (msgpack.packb({**to_builtins(_env("gpu", [])), "type": "ranksight.ev.v1.nope"}), "unknown_type"),
        (msgpack.packb({**to_builtins(_env("gpu", [])), "records": [{"index": "x"}]}), "bad_record"),
        (msgpack.packb({**to_builtins(_env("gpu", [])), "records": "notalist"}), "bad_envelope"),
        (msgpack.packb({**to_builtins(_env("gpu", [])), "seq": 0}), "bad_envelope"),
        (
            msgpack.packb({**to_builtins(_env("gpu", [])), "records": [{"index": 1}] * 100_001}),
            "bad_envelope",
        ),
        (
            msgpack.packb({**to_builtins(_env("gpu", [])), "records": [{"index": 1, "links": [{}]}]}),
            "bad_record",
        ),
        (msgpack.packb(to_builtins(_env("gpu", []))) + b"\x00", "not_msgpack"),
    ],
)
def test_bad_input_raises_one_clear_error(payload: bytes, reason: str) -> None:
    with pytest.raises(DecodeError) as info:
        decode_event(payload)
    assert info.value.reason == reason
    assert reason in str(info.value)


def test_errors_say_where() -> None:
    payload = msgpack.packb({**to_builtins(_env("gpu", [])), "records": [{"index": 0}, {"index": "x"}]})
    with pytest.raises(DecodeError, match=r"records\[1\]\.index"):
        decode_event(payload)
    with pytest.raises(DecodeError, match=r"`int` >= 1 - at `seq`"):
        decode_event(msgpack.packb({**to_builtins(_env("gpu", [])), "seq": 0}))


@settings(max_examples=300)
@given(st.binary(max_size=300))
def test_random_bytes_only_ever_raise_decode_error(data: bytes) -> None:
    try:
        decode_event(data)
    except DecodeError:
        pass
