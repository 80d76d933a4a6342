"""The codec: the only module that speaks msgpack.

``encode_event`` packs an :class:`~schemas.envelope.Envelope` (msgpack-python; records are pydantic models), its records
in either wire form (:data:`~schemas.envelope.WireFormat`; compact by default).
``decode_event`` reads both forms. It validates the envelope and every record against the model of its kind and raises
:class:`DecodeError` (one exception type, with a reason) on anything wrong: bytes that are not msgpack, a payload that is
not a map, unknown ``type``, missing or mistyped fields, integers or floats the store cannot hold
(:data:`schemas.structs.STORED_BOUNDS`), too many records, or none where the kind needs one (``Record.min_records``), a
compact batch whose columns do not line up (``bad_envelope``) or written by a newer record model
(``unsupported_version``). It decodes with msgspec into the models' frozen twins (:mod:`schemas.structs`), in two
steps: the envelope with map-form records left as raw bytes, then the records with the decoder of their kind; compact
columns are zipped into one dict per record and converted into the same twins with the same checks.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from functools import cache
from itertools import repeat
from typing import Annotated, Any

import msgpack
import msgspec
from pydantic import BaseModel

from ranksight.errors import ParseError
from ranksight.schemas.envelope import (
    MAX_RECORDS,
    MIN_COMPACT_RECORD_BYTES,
    TYPE_PREFIX,
    CompactRecords,
    Envelope,
    WireFormat,
)
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


def encode_event(envelope: Envelope, wire: WireFormat = "compact") -> bytes:
    data: dict[str, Any] = {
        "type": envelope.type,
        "cluster": envelope.cluster,
        "node": envelope.node,
        "agent": envelope.agent,
        "seq": envelope.seq,
        "ts": envelope.ts,
        "ttl": envelope.ttl,
    }
    if wire == "compact":
        payload = msgpack.packb(
            data | _compact(envelope.kind, envelope.records), default=_default, use_bin_type=True
        )
        if len(payload) >= MIN_COMPACT_RECORD_BYTES * len(envelope.records):
            return payload  # else: records so alike that the decoder would refuse the batch as an expansion
    data["records"] = envelope.records
    return msgpack.packb(data, default=_default, use_bin_type=True)


_NOT_SET = object()
# Values a column may be folded into one constant for: an equal nested value need not be the same (1 == True == 1.0).
_SCALARS = frozenset({str, int, float, bool, type(None)})


@cache
def _layout(kind: str) -> tuple[tuple[str, ...], operator.attrgetter[Any], dict[str, Any]]:
    """The kind's field names, a getter of all of them, and the default of each optional one."""
    fields = RECORD_MODELS[kind].model_fields
    defaults = {name: info.get_default(call_default_factory=True) for name, info in fields.items()
                if not info.is_required()}  # fmt: skip
    return tuple(fields), operator.attrgetter(*fields), defaults


def _uniform(column: Sequence[Any]) -> bool:
    first = column[0]
    if len(column) == 1:
        return True
    if type(first) not in _SCALARS and first != [] and first != {}:
        return False
    return column.count(first) == len(column) and len(set(map(type, column))) == 1


def _compact(kind: str, records: Sequence[Any]) -> dict[str, Any]:
    """The :class:`~schemas.envelope.CompactRecords` keys of a batch: a column per field, except a field with one value
    in every record (a constant, or nothing at all when that value is the default); empty keys are left out."""
    names, getter, defaults = _layout(kind)
    count = len(records)
    batch: dict[str, Any] = {"record_version": RECORD_MODELS[kind].schema_version, "count": count}
    if not count:
        return batch
    fields, columns, constants = [], [], {}
    rows = map(getter, records) if len(names) > 1 else ((value,) for value in map(getter, records))
    all_columns = list(zip(*rows, strict=True))  # one C-level getter call per record, then a transposition
    for name, column in zip(names, all_columns, strict=True):
        if not _uniform(column):
            fields.append(name)
            columns.append(column)
            continue
        value, default = column[0], defaults.get(name, _NOT_SET)
        if type(value) is not type(default) or value != default:
            constants[name] = value
    if fields:
        batch.update(fields=fields, columns=columns)
    if constants:
        batch["constants"] = constants
    return batch


# The envelope's fields with their constraints; map-form records stay raw bytes until the kind is known; the compact
# form's keys are all optional here and checked once the form is known.
_COMPACT_KEYS = tuple(CompactRecords.model_fields)
_EnvelopeWire = msgspec.defstruct(
    "EnvelopeWire",
    [(name, field_type(info)) for name, info in Envelope.model_fields.items() if name != "records"]
    + [("records", msgspec.Raw, msgspec.Raw())]  # empty: absent
    + [
        (name, field_type(info) | msgspec.UnsetType, msgspec.UNSET)
        for name, info in CompactRecords.model_fields.items()
    ],
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


@cache
def _records_type(kind: str) -> Any:
    return list[struct_for(RECORD_MODELS[kind])]  # type: ignore[misc]


def _columns_records(kind: str, wire: Any, size: int) -> list[Any]:
    """The twins of a compact batch (:class:`~schemas.envelope.CompactRecords`), validated like map-form records."""
    model = RECORD_MODELS[kind]
    for key in ("record_version", "count"):
        if getattr(wire, key) is msgspec.UNSET:
            raise DecodeError("bad_envelope", f"compact records without `{key}`")
    if wire.record_version > model.schema_version:
        raise DecodeError(
            "unsupported_version",
            f"{kind} records of schema version {wire.record_version}; this version reads up to {model.schema_version}",
        )
    count, constants = wire.count, wire.constants or {}
    fields, columns = wire.fields or [], wire.columns or []
    if len(columns) != len(fields):
        raise DecodeError("bad_envelope", f"{len(columns)} columns for {len(fields)} fields")
    for name, column in zip(fields, columns, strict=True):
        if len(column) != count:
            raise DecodeError("bad_envelope", f"column `{name}` holds {len(column)} values, count is {count}")
    names = [*fields, *constants]
    if len(set(names)) != len(names):
        raise DecodeError("bad_envelope", "a field is named twice in fields and constants")
    known = _layout(kind)[0]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise DecodeError(
            "bad_envelope", f"fields unknown to {kind} records: {', '.join(map(repr, unknown[:5]))}"
        )
    if count * MIN_COMPACT_RECORD_BYTES > size:
        raise DecodeError(
            "bad_envelope", f"{count} records in {size} bytes (at least {MIN_COMPACT_RECORD_BYTES} a record)"
        )
    if count < model.min_records:
        raise DecodeError("bad_envelope", f"records: {kind} needs at least {model.min_records} record")
    values = zip(*columns, *(repeat(value, count) for value in constants.values()), strict=True)
    rows = list(map(dict, map(zip, repeat(names), values))) if names else [{} for _ in range(count)]
    try:
        return msgspec.convert(rows, _records_type(kind))
    except msgspec.ValidationError as exc:
        raise DecodeError("bad_record", str(exc).replace(_AT, " - at `records")) from None


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
    if any(getattr(wire, key) is not msgspec.UNSET for key in _COMPACT_KEYS):
        if wire.records:
            raise DecodeError("bad_envelope", "both records and compact records")
        records = _columns_records(kind, wire, len(data))
    elif not wire.records:
        raise DecodeError("bad_envelope", "Object missing required field `records`")
    else:
        records = _map_records(kind, wire.records)
    return Envelope.decoded(type=wire.type, cluster=wire.cluster, node=wire.node, agent=wire.agent, seq=wire.seq,
                            ts=wire.ts, ttl=wire.ttl, records=records)  # fmt: skip


def _map_records(kind: str, raw: msgspec.Raw) -> list[Any]:
    try:
        return _records_decoder(kind).decode(raw)
    except msgspec.ValidationError as exc:
        message = str(exc)
        if _AT not in message:  # about the records value itself: not a list, or too long
            raise DecodeError("bad_envelope", f"records: {message}") from None
        raise DecodeError("bad_record", message.replace(_AT, " - at `records")) from None


def pack(obj: Any) -> bytes:
    """Plain msgpack for non-envelope payloads that share this codec (e.g. local sockets)."""
    return msgpack.packb(obj, default=_default, use_bin_type=True)


def unpack(data: bytes) -> Any:
    try:
        return msgpack.unpackb(data, raw=False)
    except Exception as exc:
        raise DecodeError("not_msgpack", f"{type(exc).__name__}: {exc}") from None
