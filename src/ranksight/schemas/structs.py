"""Plain values from records (:mod:`schemas.records`): for JSON answers, JSON columns and the wire."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec


def _mapping_builtins(obj: Any) -> Any:
    # a compact map of live state (a port's counters), read like the dict it stands for
    if isinstance(obj, Mapping):
        return dict(obj)
    raise NotImplementedError(f"cannot convert {type(obj).__name__}")


def to_builtins(obj: Any) -> Any:
    """Plain dicts, lists and scalars from a record, a sub-record, or a list of them."""
    return msgspec.to_builtins(obj, enc_hook=_mapping_builtins)


def set_fields(record: msgspec.Struct) -> dict[str, Any]:
    """A record's fields that hold a value (not None), by name: what the wire carries of it."""
    return {name: value for name in record.__struct_fields__ if (value := getattr(record, name)) is not None}


def to_json(obj: Any) -> str:
    """JSON text of a record or a list of them, as stored in JSON columns."""
    return msgspec.json.encode(obj, enc_hook=_mapping_builtins).decode()
