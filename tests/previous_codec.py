"""The event decoder of the release before the compact wire (``schemas/codec.py`` at commit 3e1a446), kept as a fixture
of behaviour: what an older aggregator does with what this version's agents send.

Copied verbatim but for the envelope fields, which are spelled out as they were then (the current model may gain
fields) and for ``DecodeError``, which is this version's (same class, same reasons). Record models are this version's:
the compact wire changed none of them.
"""

from __future__ import annotations

from functools import cache
from typing import Annotated, Any

import msgspec

from ranksight.schemas.codec import DecodeError
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import RECORD_KINDS
from ranksight.schemas.wire import MAX_RECORDS, STORED_BOUNDS, TYPE_PREFIX

_SEQ = Annotated[int, msgspec.Meta(ge=1, le=STORED_BOUNDS[int]["le"])]
_TS = Annotated[int, msgspec.Meta(ge=0, le=STORED_BOUNDS[int]["le"])]
_TTL = Annotated[float, msgspec.Meta(ge=0, le=STORED_BOUNDS[float]["le"])]
_NAME = Annotated[str, msgspec.Meta(min_length=1)]
_EnvelopeWire = msgspec.defstruct(
    "EnvelopeWire",
    [
        ("type", str),
        ("cluster", _NAME),
        ("node", _NAME),
        ("agent", _NAME),
        ("seq", _SEQ),
        ("ts", _TS),
        ("ttl", _TTL),
        ("records", msgspec.Raw),
    ],
    gc=False,
)
_ENVELOPE_DECODER: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder(_EnvelopeWire)


@cache
def _records_decoder(kind: str) -> msgspec.msgpack.Decoder[list[Any]]:
    model = RECORD_KINDS[kind].model
    bounds = msgspec.Meta(min_length=model.min_records, max_length=MAX_RECORDS)
    return msgspec.msgpack.Decoder(Annotated[list[model], bounds])  # type: ignore[valid-type]


_AT = " - at `$"


def decode_event(data: bytes) -> Envelope:
    try:
        wire = _ENVELOPE_DECODER.decode(data)
    except msgspec.ValidationError as exc:
        message = str(exc)
        if _AT not in message and message.startswith("Expected `object`"):
            raise DecodeError("not_a_map", f"envelope is not a map: {message}") from None
        raise DecodeError("bad_envelope", message.replace(_AT + ".", " - at `")) from None
    except Exception as exc:  # malformed bytes (msgspec.DecodeError), or nesting too deep
        raise DecodeError("not_msgpack", f"{type(exc).__name__}: {exc}") from None
    kind = wire.type.removeprefix(TYPE_PREFIX)
    if not wire.type.startswith(TYPE_PREFIX) or kind not in RECORD_KINDS:
        raise DecodeError("unknown_type", f"unknown event type {wire.type!r}")
    try:
        records = _records_decoder(kind).decode(wire.records)
    except msgspec.ValidationError as exc:
        message = str(exc)
        if _AT not in message:  # about the records value itself: not a list, or too long
            raise DecodeError("bad_envelope", f"records: {message}") from None
        raise DecodeError("bad_record", message.replace(_AT, " - at `records")) from None
    return Envelope(type=wire.type, cluster=wire.cluster, node=wire.node, agent=wire.agent,
                                    seq=wire.seq, ts=wire.ts, ttl=wire.ttl, records=records)  # fmt: skip
