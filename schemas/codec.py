"""The codec: the only module that speaks msgpack.

``encode_event`` packs an :class:`~schemas.envelope.Envelope` (msgpack-python; records are pydantic models).
``decode_event`` validates the envelope and every record against the model of its kind and raises :class:`DecodeError`
(one exception type, with a reason) on anything wrong: bytes that are not msgpack, a payload that is not a map, unknown
``type``, missing or mistyped fields, integers or floats the store cannot hold (:data:`schemas.structs.STORED_BOUNDS`),
too many records, or none where the kind needs one (``Record.min_records``). It decodes with msgspec into the models'
frozen twins (:mod:`schemas.structs`), in two steps: the envelope with its records left as raw bytes, then the records with the
decoder of their kind.
"""

from __future__ import annotations

from functools import cache
from typing import Annotated, Any

import msgpack
import msgspec
from pydantic import BaseModel

from ranksight.errors import ParseError
from ranksight.schemas.envelope import MAX_RECORDS, TYPE_PREFIX, Envelope
from ranksight.schemas.records import RECORD_MODELS
from ranksight.schemas.structs import field_type, struct_for


class DecodeError(ParseError):
    """Bytes that are not a valid envelope; ``reason`` is a short machine-friendly cause."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def _default(obj: Any) -> Any:
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="python", exclude_none=True)
    raise TypeError(f"cannot encode {type(obj).__name__}")


def encode_event(envelope: Envelope) -> bytes:
    data = {
        "type": envelope.type,
        "cluster": envelope.cluster,
        "node": envelope.node,
        "agent": envelope.agent,
        "seq": envelope.seq,
        "ts": envelope.ts,
        "ttl": envelope.ttl,
        "records": envelope.records,
    }
    return msgpack.packb(data, default=_default, use_bin_type=True)


# The envelope's fields with their constraints; records stay raw bytes until the kind is known.
_EnvelopeWire = msgspec.defstruct(
    "EnvelopeWire",
    [(name, field_type(info)) for name, info in Envelope.model_fields.items() if name != "records"]
    + [("records", msgspec.Raw)],
    gc=False,
)
# Any: the fields are typed by the model, which mypy cannot see through defstruct.
_ENVELOPE_DECODER: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder(_EnvelopeWire)


@cache
def _records_decoder(kind: str) -> msgspec.msgpack.Decoder[list[Any]]:
    model = RECORD_MODELS[kind]
    twin = struct_for(model)
    bounds = msgspec.Meta(min_length=model.min_records, max_length=MAX_RECORDS)
    return msgspec.msgpack.Decoder(Annotated[list[twin], bounds])  # type: ignore[valid-type]


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
    if not wire.type.startswith(TYPE_PREFIX) or kind not in RECORD_MODELS:
        raise DecodeError("unknown_type", f"unknown event type {wire.type!r}")
    try:
        records = _records_decoder(kind).decode(wire.records)
    except msgspec.ValidationError as exc:
        message = str(exc)
        if _AT not in message:  # about the records value itself: not a list, or too long
            raise DecodeError("bad_envelope", f"records: {message}") from None
        raise DecodeError("bad_record", message.replace(_AT, " - at `records")) from None
    return Envelope.model_construct(type=wire.type, cluster=wire.cluster, node=wire.node, agent=wire.agent,
                                    seq=wire.seq, ts=wire.ts, ttl=wire.ttl, records=records)  # fmt: skip


def pack(obj: Any) -> bytes:
    """Plain msgpack for non-envelope payloads that share this codec (e.g. local sockets)."""
    return msgpack.packb(obj, default=_default, use_bin_type=True)


def unpack(data: bytes) -> Any:
    try:
        return msgpack.unpackb(data, raw=False)
    except Exception as exc:
        raise DecodeError("not_msgpack", f"{type(exc).__name__}: {exc}") from None
