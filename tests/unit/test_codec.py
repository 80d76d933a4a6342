from __future__ import annotations

import time

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ranksight.schemas.codec import DecodeError, decode_event, encode_event
from ranksight.schemas.envelope import Envelope, event_type
from ranksight.schemas.records import CollectorHealth, GpuRecord, HeartbeatRecord
from ranksight.schemas.structs import struct_for, to_builtins


def _env(kind: str, records: list) -> Envelope:  # type: ignore[type-arg]
    return Envelope(type=event_type(kind), cluster="c", node="n", agent="a1", seq=7, ts=time.time_ns(), ttl=15,
                    records=records)  # fmt: skip


def test_round_trip_typed_records() -> None:
    beat = HeartbeatRecord(hostname="h", version="1", pid=1, started_ns=5,
                           collectors=[CollectorHealth(name="gpu", state="absent")])  # fmt: skip
    decoded = decode_event(encode_event(_env("heartbeat", [beat])))
    assert decoded.kind == "heartbeat" and decoded.msg_id == "a1:7"
    assert [to_builtins(r) for r in decoded.records] == [beat.model_dump()]
    assert type(decoded.records[0]) is struct_for(HeartbeatRecord)


def test_a_decoded_envelope_is_the_model_it_was_encoded_from() -> None:
    """Built without ``model_construct``'s work per field, it is still the same pydantic model in every respect."""
    env = _env("gpu", [GpuRecord(index=0)])
    decoded = decode_event(encode_event(env))
    plain = Envelope.model_construct(**{name: getattr(decoded, name) for name in Envelope.model_fields})
    assert decoded == plain
    assert decoded.model_fields_set == plain.model_fields_set == set(Envelope.model_fields)
    assert decoded.model_dump(exclude={"records"}) == env.model_dump(exclude={"records"})
    assert decoded.model_copy(update={"seq": 8}).msg_id == "a1:8" and decoded.msg_id == "a1:7"


def test_unsupported_values_stay_null() -> None:
    decoded = decode_event(encode_event(_env("gpu", [GpuRecord(index=0, power_w=None)])))
    assert decoded.records[0].power_w is None


def test_newer_agent_fields_are_ignored() -> None:
    raw = msgpack.packb(
        {**_env("gpu", []).model_dump(), "future": 1, "records": [{"index": 1, "new_field": "x"}]}
    )
    assert decode_event(raw).records[0].index == 1


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"\xc1", "not_msgpack"),
        (msgpack.packb("text"), "not_a_map"),
        (msgpack.packb({"type": "ranksight.ev.v1.gpu"}), "bad_envelope"),
        (msgpack.packb({**_env("gpu", []).model_dump(), "type": "ranksight.ev.v1.nope"}), "unknown_type"),
        (msgpack.packb({**_env("gpu", []).model_dump(), "records": [{"index": "x"}]}), "bad_record"),
        (msgpack.packb({**_env("gpu", []).model_dump(), "records": "notalist"}), "bad_envelope"),
        (msgpack.packb({**_env("gpu", []).model_dump(), "seq": 0}), "bad_envelope"),
        (
            msgpack.packb({**_env("gpu", []).model_dump(), "records": [{"index": 1}] * 100_001}),
            "bad_envelope",
        ),
        (
            msgpack.packb({**_env("gpu", []).model_dump(), "records": [{"index": 1, "links": [{}]}]}),
            "bad_record",
        ),
        (msgpack.packb(_env("gpu", []).model_dump()) + b"\x00", "not_msgpack"),
    ],
)
def test_bad_input_raises_one_clear_error(payload: bytes, reason: str) -> None:
    with pytest.raises(DecodeError) as info:
        decode_event(payload)
    assert info.value.reason == reason
    assert reason in str(info.value)


def test_errors_say_where() -> None:
    payload = msgpack.packb({**_env("gpu", []).model_dump(), "records": [{"index": 0}, {"index": "x"}]})
    with pytest.raises(DecodeError, match=r"records\[1\]\.index"):
        decode_event(payload)
    with pytest.raises(DecodeError, match=r"`int` >= 1 - at `seq`"):
        decode_event(msgpack.packb({**_env("gpu", []).model_dump(), "seq": 0}))


@settings(max_examples=300)
@given(st.binary(max_size=300))
def test_random_bytes_only_ever_raise_decode_error(data: bytes) -> None:
    try:
        decode_event(data)
    except DecodeError:
        pass
