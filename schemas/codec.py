"""The codec: the only module that speaks msgpack.

``encode_event`` packs an :class:`~schemas.envelope.Envelope`; ``decode_event`` unpacks, validates the envelope and every
record against the model of its kind, and raises :class:`DecodeError` (one exception type, with a reason) on anything wrong:
bytes that are not msgpack, a payload that is not a map, unknown ``type``, missing or mistyped fields, too many records.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import msgpack
from pydantic import BaseModel, TypeAdapter, ValidationError

from schemas.envelope import TYPE_PREFIX, Envelope
from schemas.records import RECORD_MODELS


class DecodeError(ValueError):
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


@cache
def _records_adapter(kind: str) -> TypeAdapter[list[Any]]:
    model = RECORD_MODELS[kind]
    return TypeAdapter(list[model])  # type: ignore[valid-type]


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    return f"{loc}: {err['msg']}" + (f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else "")


def decode_event(data: bytes) -> Envelope:
    try:
        raw = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise DecodeError("not_msgpack", f"{type(exc).__name__}: {exc}") from None
    if not isinstance(raw, dict):
        raise DecodeError("not_a_map", f"envelope is a {type(raw).__name__}, not a map")
    try:
        envelope = Envelope.model_validate(raw)
    except ValidationError as exc:
        raise DecodeError("bad_envelope", _first_error(exc)) from None
    if not envelope.type.startswith(TYPE_PREFIX) or envelope.kind not in RECORD_MODELS:
        raise DecodeError("unknown_type", f"unknown event type {envelope.type!r}")
    try:
        envelope.records = _records_adapter(envelope.kind).validate_python(envelope.records)
    except ValidationError as exc:
        raise DecodeError("bad_record", f"records.{_first_error(exc)}") from None
    return envelope


def pack(obj: Any) -> bytes:
    """Plain msgpack for non-envelope payloads that share this codec (e.g. local sockets)."""
    return msgpack.packb(obj, default=_default, use_bin_type=True)


def unpack(data: bytes) -> Any:
    try:
        return msgpack.unpackb(data, raw=False)
    except Exception as exc:
        raise DecodeError("not_msgpack", f"{type(exc).__name__}: {exc}") from None
