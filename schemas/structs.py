"""Decoding twins of the record models: one msgspec ``Struct`` per pydantic model, derived from it at import.

The pydantic models stay the contract (agents build them, documentation and JSON Schema come from them). The aggregator
decodes every event it ingests, and msgspec validates msgpack straight into typed objects about ten times faster than
msgpack followed by pydantic (``benchmarks/ingest.py``), so the codec decodes into these twins. A twin has the model's
fields, types, defaults and constraints (``ge``, ``le``, ``gt``, ``lt``, ``min_length``, ``max_length``), ignores unknown
fields as the records do, and reads like the model (same attribute names). Every ``int`` and ``float``, at any depth, is
also bounded to what the store keeps (:data:`STORED_BOUNDS`: BIGINT, finite DOUBLE), so a value that passes decoding
can always be committed: an integer >= 2^63, ``inf`` or ``NaN`` is rejected at the edge. Twins are frozen: live state shares them.
They are not tracked by the cyclic GC (``gc=False``; decoded data cannot form cycles), which keeps millions of live
records from slowing every collection.

:func:`to_builtins` turns a record of either form (twin or model) into plain dicts and lists.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Mapping
from functools import cache
from typing import Annotated, Any, Union, get_args, get_origin

import annotated_types
import msgspec
from pydantic import BaseModel
from pydantic.fields import FieldInfo

# What the store can hold: every integer column is BIGINT, every float column a finite DOUBLE (the bounds also reject
# inf and NaN). Declared once here; every int and float of the envelope and the records takes them.
STORED_BOUNDS: dict[type, dict[str, Any]] = {
    int: {"ge": -(2**63), "le": 2**63 - 1},
    float: {"ge": -sys.float_info.max, "le": sys.float_info.max},
}

# pydantic's constraint metadata -> the msgspec.Meta keyword (each is also the metadata object's attribute)
_CONSTRAINTS: dict[type, str] = {
    annotated_types.Ge: "ge",
    annotated_types.Gt: "gt",
    annotated_types.Le: "le",
    annotated_types.Lt: "lt",
    annotated_types.MinLen: "min_length",
    annotated_types.MaxLen: "max_length",
}


def _twin_type(annotation: Any) -> Any:
    """The msgspec type for one pydantic annotation: sub-models become their twins, containers are mapped inside."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return struct_for(annotation)
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, types.UnionType):
        return Union[tuple(_twin_type(a) for a in args)]  # noqa: UP007 - built from a runtime tuple
    if origin is list:
        return list[_twin_type(args[0])]  # type: ignore[misc]
    if origin is dict:
        return dict[_twin_type(args[0]), _twin_type(args[1])]  # type: ignore[misc]
    if annotation in STORED_BOUNDS:
        return Annotated[annotation, msgspec.Meta(**STORED_BOUNDS[annotation])]
    return annotation  # str, bool, Literal, Any


def _constraints(info: FieldInfo) -> dict[str, Any]:
    kwargs = {}
    for item in info.metadata:
        for kind, keyword in _CONSTRAINTS.items():
            if isinstance(item, kind):
                kwargs[keyword] = getattr(item, keyword)
    return kwargs


def _tightest(stored: dict[str, Any], model: dict[str, Any]) -> dict[str, Any]:
    """The model's bounds within the stored ones (msgspec takes one ``ge``/``le`` per type, not a stack of them)."""
    merged = {**stored, **model}
    if "gt" in model:
        merged.pop("ge")
    if "lt" in model:
        merged.pop("le")
    if "ge" in model:
        merged["ge"] = max(stored["ge"], model["ge"])
    if "le" in model:
        merged["le"] = min(stored["le"], model["le"])
    return merged


def field_type(info: FieldInfo) -> Any:
    """The msgspec type of one model field, constraints included."""
    kwargs = _constraints(info)
    if info.annotation in STORED_BOUNDS:  # a bounded scalar: one Meta with the tighter of each bound
        return Annotated[info.annotation, msgspec.Meta(**_tightest(STORED_BOUNDS[info.annotation], kwargs))]
    twin = _twin_type(info.annotation)
    return Annotated[twin, msgspec.Meta(**kwargs)] if kwargs else twin


def _default(info: FieldInfo) -> Any:
    factory = info.default_factory
    if isinstance(factory, type) and issubclass(factory, BaseModel):
        return msgspec.field(default_factory=struct_for(factory))
    if factory is not None:
        return msgspec.field(default_factory=factory)  # type: ignore[arg-type]
    if isinstance(info.default, BaseModel):  # a sub-model default: a fresh twin per record
        model, values = type(info.default), info.default.model_dump()
        return msgspec.field(default_factory=lambda: msgspec.convert(values, struct_for(model)))
    return info.default  # msgspec copies an empty list or dict default for every instance


@cache
def struct_for(model: type[BaseModel]) -> type[msgspec.Struct]:
    """The frozen msgspec twin of ``model`` (cached: one class per model)."""
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for name, info in model.model_fields.items():
        if info.is_required():
            fields.append((name, field_type(info)))
        else:
            fields.append((name, field_type(info), _default(info)))
    return msgspec.defstruct(
        model.__name__,
        fields,
        module=__name__,
        kw_only=True,  # pydantic allows required fields after defaulted ones
        frozen=True,
        gc=False,
        forbid_unknown_fields=model.model_config.get("extra") == "forbid",
    )


def _model_builtins(obj: Any) -> Any:
    if isinstance(obj, BaseModel):
        return obj.model_dump()
    # a compact map of live state (a port's counters), read like the dict it stands for
    if isinstance(obj, Mapping):
        return dict(obj)
    raise NotImplementedError(f"cannot convert {type(obj).__name__}")


def to_builtins(obj: Any) -> Any:
    """Plain dicts, lists and scalars from a record, a sub-record, or a list of them; twins and models alike."""
    return msgspec.to_builtins(obj, enc_hook=_model_builtins)


def replace(record: Any, **changes: Any) -> Any:
    """A copy of a record (twin or model) with ``changes``."""
    if isinstance(record, msgspec.Struct):
        return msgspec.structs.replace(record, **changes)
    return record.model_copy(update=changes)


def to_json(obj: Any) -> str:
    """JSON text of a record or a list of them (twins and models alike), as stored in JSON columns."""
    return msgspec.json.encode(obj, enc_hook=_model_builtins).decode()


def from_builtins(model: type[BaseModel], values: dict[str, Any]) -> Any:
    """The twin of ``model`` from plain values (a stored row, for replay), validated like decoded input."""
    return msgspec.convert(values, struct_for(model))
