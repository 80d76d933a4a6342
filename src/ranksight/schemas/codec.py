"""The codec: the only module that speaks msgpack.

The agent process uses it as the aggregator does, with the record structs (:mod:`schemas.records`).

``encode_event`` packs an envelope with msgpack-python, its records in either wire form
(:data:`~schemas.wire.WireFormat`; compact by default). ``decode_event`` reads both forms into the records. It
validates the envelope and every record against the struct of its kind and raises :class:`DecodeError` (one exception
type, with a reason) on anything wrong: bytes that are not msgpack, a payload that is not a map, unknown ``type``,
missing or mistyped fields, integers or floats the store cannot hold (:data:`schemas.wire.STORED_BOUNDS`), too many
records, or none where the kind needs one (``Record.min_records``), a compact batch whose columns do not line up
(``bad_envelope``) or written by a newer record model (``unsupported_version``). It decodes with msgspec into the frozen
records, in two steps: the envelope with map-form records left as raw bytes, then the records with the decoder of their
kind. A compact batch's columns and constants are left as raw bytes too. Where the kind's struct holds no sub-record (the
Inspector and NIC kinds, most of the traffic: :func:`_raw_layout`), each column is decoded by a decoder of a list of its
field's type and each constant by one of the field's type (the checks of the map form's decoder, once a value), and the
records are built from those values in one C-level pass; :func:`decode_columns` hands the columns on with the envelope,
for the store to write as they are. Other batches are decoded, zipped into one dict per record and converted into the
same records. Anything wrong sends the envelope to the checked path (:func:`_decode_checked`: the envelope's values
decoded first, then the dicts), which says why: both paths give any envelope the same records, of the same classes, or
the same refusal.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from functools import cache
from itertools import repeat, starmap
from typing import Annotated, Any, NamedTuple, get_args, get_origin

import msgpack
import msgspec
import msgspec.inspect as mi

from ranksight.errors import ParseError
from ranksight.schemas.envelope import CompactRecords, Envelope
from ranksight.schemas.records import RECORD_KINDS
from ranksight.schemas.structs import set_fields
from ranksight.schemas.wire import MAX_RECORDS, MIN_COMPACT_RECORD_BYTES, TYPE_PREFIX, WireFormat


class DecodeError(ParseError):
    """Bytes that are not a valid envelope; ``reason`` is a short machine-friendly cause."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def _default(obj: Any) -> Any:
    """A sub-record's map, without its unset (None) fields."""
    if isinstance(obj, msgspec.Struct):
        return set_fields(obj)
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
def layout(kind: str) -> tuple[tuple[str, ...], operator.attrgetter[Any], dict[str, Any]]:
    """The kind's field names, a getter of all of them, and the default of each optional one."""
    fields = msgspec.structs.fields(RECORD_KINDS[kind].model)
    names = tuple(f.name for f in fields)
    defaults = {f.name: f.default if f.default_factory is msgspec.NODEFAULT else f.default_factory()
                for f in fields if not f.required}  # fmt: skip
    return names, operator.attrgetter(*names), defaults


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
    names, getter, defaults = layout(kind)
    count = len(records)
    batch: dict[str, Any] = {"record_version": RECORD_KINDS[kind].model.schema_version, "count": count}
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
_ENVELOPE_FIELDS = msgspec.structs.fields(Envelope)
_COMPACT_FIELDS = msgspec.structs.fields(CompactRecords)
_COMPACT_KEYS = tuple(f.name for f in _COMPACT_FIELDS)


def _raw(annotation: Any, raw: tuple[Any, ...]) -> Any:
    """``annotation`` with each part of it found in ``raw`` left as raw bytes (:class:`msgspec.Raw`)."""
    if annotation in raw:
        return msgspec.Raw
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return Annotated[_raw(args[0], raw), *annotation.__metadata__]
    if origin is list:
        return list[_raw(args[0], raw)]  # type: ignore[misc]
    if origin is dict:
        return dict[args[0], _raw(args[1], raw)]  # type: ignore[misc,valid-type]
    return annotation


def _envelope_wire(name: str, raw: tuple[Any, ...]) -> Any:
    return msgspec.defstruct(
        name,
        [(f.name, f.type) for f in _ENVELOPE_FIELDS if f.name != "records"]
        + [("records", msgspec.Raw, msgspec.Raw())]  # empty: absent
        + [(f.name, _raw(f.type, raw) | msgspec.UnsetType, msgspec.UNSET) for f in _COMPACT_FIELDS],
        module=__name__,
        gc=False,
    )


# Any: the fields are typed by the record, which mypy cannot see through defstruct. The checked decoder decodes every
# value of a compact batch; the fast one leaves each column, and each constant, as raw bytes (a view of the envelope).
_ENVELOPE_DECODER: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder(_envelope_wire("EnvelopeWire", ()))
_RAW_ENVELOPE_DECODER: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder(
    _envelope_wire("RawEnvelopeWire", (list[Any], Any))
)
_ENCODER = msgspec.msgpack.Encoder()


@cache
def _records_decoder(kind: str) -> msgspec.msgpack.Decoder[list[Any]]:
    struct = RECORD_KINDS[kind].model
    bounds = msgspec.Meta(min_length=struct.min_records, max_length=MAX_RECORDS)
    return msgspec.msgpack.Decoder(Annotated[list[struct], bounds])  # type: ignore[valid-type]


_AT = " - at `$"


@cache
def _records_type(kind: str) -> Any:
    model = RECORD_KINDS[kind].model
    return list[model]  # type: ignore[valid-type]


_SCALARS_INFO = (mi.NoneType, mi.BoolType, mi.IntType, mi.FloatType, mi.StrType, mi.LiteralType)


def _scalar(info: mi.Type) -> bool:
    if isinstance(info, mi.Metadata):  # a field's description
        return _scalar(info.type)
    if isinstance(info, mi.UnionType):
        return all(map(_scalar, info.types))
    return isinstance(info, _SCALARS_INFO)


def _decodes_whole(info: mi.Type) -> bool:
    """Whether decoding into this type reads the whole of a value, as decoding it untyped does: a sub-record (a struct)
    skips the keys it does not know, whose bytes the checked path decodes (and may refuse: not UTF-8, a bad timestamp,
    too deep)."""
    if isinstance(info, mi.Metadata):  # a field's description
        return _decodes_whole(info.type)
    if isinstance(info, mi.UnionType):
        return all(map(_decodes_whole, info.types))
    if isinstance(info, mi.ListType):
        return _decodes_whole(info.item_type)
    if isinstance(info, mi.DictType):
        return _decodes_whole(info.key_type) and _decodes_whole(info.value_type)
    return isinstance(info, (*_SCALARS_INFO, mi.AnyType))


_VALUE = msgspec.msgpack.Decoder()
_COLUMN_VALUES = msgspec.msgpack.Decoder(list[Any])


class _FieldReader(NamedTuple):
    """How the fast path reads one field of a kind's compact batch, derived from the struct's field."""

    # a column of it: a list of the field's type, with the type's constraints (Literals, the store's bounds)
    column: msgspec.msgpack.Decoder[list[Any]]
    # a constant of it: the field's type
    constant: msgspec.msgpack.Decoder[Any]
    # a scalar is immutable: one decoded constant stands in every record; a list or a map is decoded once for each
    # record, so that no record shares one with another
    scalar: bool
    # the values of ``count`` records that lack the field; None where it is required
    absent: Callable[[int], list[Any]] | None


class _RawLayout(NamedTuple):
    """How the fast path reads a kind's compact batch column by column."""

    # by name, in the struct's field order
    fields: dict[str, _FieldReader]
    # a struct from its values, given positionally in field order
    build: Callable[..., Any]


def _absent(field: msgspec.structs.FieldInfo) -> Callable[[int], list[Any]] | None:
    """The values of ``count`` records that lack ``field``: its default, or a new one from its factory for each record
    (msgspec takes a mutable default, an empty list or map, only as a factory); None where it is required."""
    if field.required:
        return None
    if field.default_factory is msgspec.NODEFAULT:
        return lambda count: [field.default] * count
    return lambda count: list(starmap(field.default_factory, repeat((), count)))


def _builder(struct: type[msgspec.Struct]) -> Callable[..., Any]:
    """A function building ``struct`` from its values given positionally, in field order. A struct takes keywords only (a
    required field may follow one with a default) and matches them fastest in its field order, so each is passed by
    name in that order, by a call generated once: about 2.6 us a summary record (39 fields), where a dict per record
    passed as ``**`` costs 3.6. The constructor checks no value's type (it runs ``__post_init__``, as decoding does):
    the values come from the decoders of the fields' types."""
    names = struct.__struct_fields__
    namespace = {"struct": struct}
    exec(
        f"def build({', '.join(names)}):\n    return struct({', '.join(f'{n}={n}' for n in names)})",
        namespace,
    )
    return namespace["build"]


@cache
def _raw_layout(kind: str) -> _RawLayout | None:
    """The fast path's layout of a kind whose struct decodes whole values only (no sub-record); None for the other
    kinds."""
    struct = RECORD_KINDS[kind].model
    infos = mi.type_info(struct).fields  # type: ignore[attr-defined]
    if not all(_decodes_whole(info.type) for info in infos):
        return None
    fields = {
        field.name: _FieldReader(
            msgspec.msgpack.Decoder(list[field.type]),  # type: ignore[name-defined]
            msgspec.msgpack.Decoder(field.type),
            _scalar(info.type),
            _absent(field),
        )
        for field, info in zip(msgspec.structs.fields(struct), infos, strict=True)
    }
    return _RawLayout(fields, _builder(struct))


# How the encoder starts an envelope of a kind without a layout (a map of at most 15 keys, ``type`` first): one that
# does goes to the checked path at once, as raw values would only add work there. A shortcut only: either path gets the
# same records, or the same refusal, from any envelope.
_CHECKED_TYPES = tuple(
    msgpack.packb({"type": f"{TYPE_PREFIX}{kind}"})[1:]
    for kind in sorted(RECORD_KINDS)
    if _raw_layout(kind) is None
)


# A list or map constant is decoded again for each record by the fast path; beyond this many times the envelope's bytes,
# a batch is converted from dicts (which refer to one decoded value from every record).
_MAX_CONSTANT_SPREAD = 16
# Each record gets a value of its own from a constant (a list constant: a new list per record), so what a batch's
# constants come to once repeated is bounded like its columns are by the envelope: an agent's constants (names, ids)
# stay far below; a hostile list constant over 100,000 records would otherwise take gigabytes from a 2 MB message.
_MAX_CONSTANT_BYTES_PER_BYTE = 4
_MAX_CONSTANT_BYTES_FLOOR = 1 << 20


def _repeated_bytes(count: int, constants: dict[str, Any]) -> int:
    """What a batch's decoded constants come to once written into each of its ``count`` records."""
    return count * sum(len(_ENCODER.encode(value)) for value in constants.values())


def _raw_repeated_bytes(count: int, constants: dict[str, msgspec.Raw]) -> int:
    """:func:`_repeated_bytes` of raw constants, at most: a value decoded and encoded again takes at most 1.8 x its
    bytes (a float32 comes back a float64, 5 -> 9 bytes; any other value as long or shorter), so the fast path never
    admits a batch that the checked path refuses."""
    return 2 * count * sum(map(len, constants.values()))


@cache
def _known(kind: str) -> frozenset[str]:
    return frozenset(layout(kind)[0])


def _count(wire: Any) -> int:
    """A compact batch's record count, refused without one (or without a record version)."""
    for key in ("record_version", "count"):
        if getattr(wire, key) is msgspec.UNSET:
            raise DecodeError("bad_envelope", f"compact records without `{key}`")
    return wire.count


def _check_compact(
    kind: str,
    wire: Any,
    fields: list[str],
    columns: list[Any],
    constants: dict[str, Any],
    spread: int,
    size: int,
) -> None:
    """Refuse a compact batch (:class:`~schemas.envelope.CompactRecords`) whose keys are wrong: before its records.
    ``spread``: what its constants come to repeated (:func:`_repeated_bytes`)."""
    model = RECORD_KINDS[kind].model
    if wire.record_version > model.schema_version:
        raise DecodeError(
            "unsupported_version",
            f"{kind} records of schema version {wire.record_version}; this version reads up to {model.schema_version}",
        )
    count = wire.count
    if len(columns) != len(fields):
        raise DecodeError("bad_envelope", f"{len(columns)} columns for {len(fields)} fields")
    for name, column in zip(fields, columns, strict=True):
        if len(column) != count:
            raise DecodeError("bad_envelope", f"column `{name}` holds {len(column)} values, count is {count}")
    names = [*fields, *constants]
    if len(set(names)) != len(names):
        raise DecodeError("bad_envelope", "a field is named twice in fields and constants")
    known = _known(kind)
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
    if spread > _MAX_CONSTANT_BYTES_PER_BYTE * size + _MAX_CONSTANT_BYTES_FLOOR:
        raise DecodeError(
            "bad_envelope",
            f"constants of {count} records come to {spread} bytes repeated, over {_MAX_CONSTANT_BYTES_PER_BYTE} x the "
            f"envelope's {size} bytes + {_MAX_CONSTANT_BYTES_FLOOR}",
        )


def _columns_records(kind: str, wire: Any, size: int) -> list[Any]:
    """The records of a compact batch, validated like map-form records: the checked path, which says what is wrong."""
    fields, columns, constants = wire.fields or [], wire.columns or [], wire.constants or {}
    count = _count(wire)
    _check_compact(kind, wire, fields, columns, constants, _repeated_bytes(count, constants), size)
    return _rows_records(kind, count, fields, columns, constants)


def _rows_records(
    kind: str, count: int, fields: list[str], columns: list[Any], constants: dict[str, Any]
) -> list[Any]:
    """The records of a compact batch's decoded values: one dict per record, converted."""
    names = [*fields, *constants]
    values = zip(*columns, *(repeat(value, count) for value in constants.values()), strict=True)
    rows = list(map(dict, map(zip, repeat(names), values))) if names else [{} for _ in range(count)]
    try:
        return msgspec.convert(rows, _records_type(kind))
    except msgspec.ValidationError as exc:
        raise DecodeError("bad_record", str(exc).replace(_AT, " - at `records")) from None


def _raw_columns_records(kind: str, wire: Any, size: int) -> tuple[list[Any], tuple[list[Any], ...] | None]:
    """The records of a compact batch left raw by the envelope's fast decoder, and their values column by column where
    the kind has a layout (else None). There, each column is decoded by a decoder of a list of its field's type (every
    check of the field's type, once), each constant by one of the field's type, and the records are built from the
    values, record by record in one C-level pass. Else, or for a batch with no records (whose constants would go
    unread) or with wide constants (decoded for each record), its values are decoded and converted as by the checked
    path. Raises on anything wrong, not necessarily what the checked path says."""
    layout = _raw_layout(kind)
    fields, raw, constants = wire.fields or [], wire.columns or [], wire.constants or {}
    count = _count(wire)
    spread = _raw_repeated_bytes(count, constants)
    if layout is None or not count or spread > _MAX_CONSTANT_SPREAD * size:
        columns = [_COLUMN_VALUES.decode(column) for column in raw]
        values = {name: _VALUE.decode(value) for name, value in constants.items()}
        _check_compact(kind, wire, fields, columns, values, _repeated_bytes(count, values), size)
        return _rows_records(kind, count, fields, columns, values), None
    readers = layout.fields
    columns = [readers[name].column.decode(column) for name, column in zip(fields, raw, strict=True)]
    _check_compact(kind, wire, fields, columns, constants, spread, size)
    by_name = dict(zip(fields, columns, strict=True))
    for name, value in constants.items():
        reader = readers[name]
        decode = reader.constant.decode
        by_name[name] = [decode(value)] * count if reader.scalar else list(map(decode, repeat(value, count)))
    for name in readers.keys() - by_name.keys():
        absent = readers[name].absent
        if absent is None:  # the checked path says which record lacks it
            raise DecodeError("bad_record", f"`{name}` is required")
        by_name[name] = absent(count)
    ordered = tuple(map(by_name.__getitem__, readers))
    return list(map(layout.build, *ordered)), ordered


def _kind(wire: Any) -> str:
    kind: str = wire.type.removeprefix(TYPE_PREFIX)
    if not wire.type.startswith(TYPE_PREFIX) or kind not in RECORD_KINDS:
        raise DecodeError("unknown_type", f"unknown event type {wire.type!r}")
    return kind


def _compact_form(wire: Any) -> bool:
    return any(getattr(wire, key) is not msgspec.UNSET for key in _COMPACT_KEYS)


class DecodedEvent(NamedTuple):
    """An envelope, and its records' values column by column where it came compact and was read so: one list per field
    of the kind's struct, in the struct's order, of ``count`` values each, the very values the records hold (what the store
    writes); None where only the records hold them (the map form, a kind with sub-records, a batch converted from
    dicts)."""

    envelope: Envelope
    columns: tuple[list[Any], ...] | None


def decode_event(data: bytes) -> Envelope:
    return decode_columns(data).envelope


def decode_columns(data: bytes) -> DecodedEvent:
    """:func:`decode_event`, with the records' values column by column where it read them so."""
    if isinstance(data, (bytes, bytearray)) and data.startswith(_CHECKED_TYPES, 1):
        return DecodedEvent(_decode_checked(data), None)
    try:
        wire = _RAW_ENVELOPE_DECODER.decode(data)
    except Exception:
        return DecodedEvent(_decode_checked(data), None)  # which says why
    if not _compact_form(wire):  # then read as by the checked decoder
        return DecodedEvent(_decoded(wire, _map_form(_kind(wire), wire)), None)
    try:
        if wire.records:
            raise DecodeError("bad_envelope", "both records and compact records")
        records, columns = _raw_columns_records(_kind(wire), wire, len(data))
        return DecodedEvent(_decoded(wire, records), columns)
    except Exception:
        return DecodedEvent(_decode_checked(data), None)  # which says why


def _decode_checked(data: bytes) -> Envelope:
    """:func:`decode_event` with every value of a compact batch decoded before its records: what says why an envelope
    is refused."""
    try:
        wire = _ENVELOPE_DECODER.decode(data)
    except msgspec.ValidationError as exc:
        message = str(exc)
        if _AT not in message and message.startswith("Expected `object`"):
            raise DecodeError("not_a_map", f"envelope is not a map: {message}") from None
        raise DecodeError("bad_envelope", message.replace(_AT + ".", " - at `")) from None
    except Exception as exc:  # malformed bytes (msgspec.DecodeError), or nesting too deep
        raise DecodeError("not_msgpack", f"{type(exc).__name__}: {exc}") from None
    kind = _kind(wire)
    if _compact_form(wire):
        if wire.records:
            raise DecodeError("bad_envelope", "both records and compact records")
        return _decoded(wire, _columns_records(kind, wire, len(data)))
    return _decoded(wire, _map_form(kind, wire))


def _map_form(kind: str, wire: Any) -> list[Any]:
    if not wire.records:
        raise DecodeError("bad_envelope", "Object missing required field `records`")
    return _map_records(kind, wire.records)


def _decoded(wire: Any, records: list[Any]) -> Envelope:
    return Envelope(type=wire.type, cluster=wire.cluster, node=wire.node, agent=wire.agent, seq=wire.seq,
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
