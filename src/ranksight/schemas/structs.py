"""The record twins at work: which twin stands for a model, and plain values from records of either form.

Every model of the wire contract has a msgspec twin (:mod:`schemas.twins`, generated from the models by
:mod:`schemas.generate`): the aggregator decodes events into them, and the agent builds them. :func:`to_builtins`,
:func:`to_json` and :func:`replace` take a record of either form (twin or pydantic model); nothing here imports
pydantic, so the agent process can use them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from ranksight.schemas import twins


def struct_for(model: type) -> type[msgspec.Struct]:
    """The frozen msgspec twin of ``model`` (a model of the wire contract)."""
    twin = getattr(twins, model.__name__, None)
    if not (isinstance(twin, type) and issubclass(twin, msgspec.Struct)):
        raise LookupError(f"{model.__name__} has no twin: add it to schemas.generate and run it")
    return twin


def _model_builtins(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):  # a pydantic model
        return obj.model_dump()
    # a compact map of live state (a port's counters), read like the dict it stands for
    if isinstance(obj, Mapping):
        return dict(obj)
    raise NotImplementedError(f"cannot convert {type(obj).__name__}")


def to_builtins(obj: Any) -> Any:
    """Plain dicts, lists and scalars from a record, a sub-record, or a list of them; twins and models alike."""
    return msgspec.to_builtins(obj, enc_hook=_model_builtins)


def set_fields(record: msgspec.Struct) -> dict[str, Any]:
    """A twin's fields that hold a value (not None), by name: what the wire carries of it."""
    return {name: value for name in record.__struct_fields__ if (value := getattr(record, name)) is not None}


def replace(record: Any, **changes: Any) -> Any:
    """A copy of a record (twin or model) with ``changes``."""
    if isinstance(record, msgspec.Struct):
        return msgspec.structs.replace(record, **changes)
    return record.model_copy(update=changes)


def to_json(obj: Any) -> str:
    """JSON text of a record or a list of them (twins and models alike), as stored in JSON columns."""
    return msgspec.json.encode(obj, enc_hook=_model_builtins).decode()


def from_builtins(model: type, values: dict[str, Any]) -> Any:
    """The twin of ``model`` from plain values (a stored row, for replay), validated like decoded input."""
    return msgspec.convert(values, struct_for(model))
