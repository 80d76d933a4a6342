"""Hypothesis strategies drawn from the record models: each value within its field's declared range (the field's own
``ge``/``le``/``gt``/``lt`` within what the store holds), the bounds and the values just inside them most likely."""

from __future__ import annotations

import math
import sys
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
from hypothesis import strategies as st
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from ranksight.schemas.wire import STORED_BOUNDS


def bounds(kind: type, metadata: list[Any]) -> tuple[Any, Any, bool, bool]:
    """(low, high, low excluded, high excluded) of a number: the field's own constraints within the stored ones."""
    low, high = STORED_BOUNDS[kind]["ge"], STORED_BOUNDS[kind]["le"]
    low_open = high_open = False
    for item in metadata:
        if isinstance(item, annotated_types.Ge):
            low = max(low, item.ge)
        elif isinstance(item, annotated_types.Gt):
            low, low_open = max(low, item.gt), True
        elif isinstance(item, annotated_types.Le):
            high = min(high, item.le)
        elif isinstance(item, annotated_types.Lt):
            high, high_open = min(high, item.lt), True
    return low, high, low_open, high_open


def number(kind: type, metadata: list[Any]) -> st.SearchStrategy[Any]:
    low, high, low_open, high_open = bounds(kind, metadata)
    if kind is int:
        low, high = low + low_open, high - high_open
        edges = [v for v in (low, high, 0, 1, -1, low + 1, high - 1, 2**31, 2**53) if low <= v <= high]
        return st.sampled_from(edges) | st.integers(low, high)
    if low_open:
        low = math.nextafter(low, math.inf)
    if high_open:
        high = math.nextafter(high, -math.inf)
    edges = [v for v in (low, high, 0.0, -0.0, 1.0, sys.float_info.min, 5e-324, high / 2, low / 2, 1e9, 1e18)
             if low <= v <= high]  # fmt: skip
    return st.sampled_from(edges) | st.floats(low, high, allow_nan=False, allow_infinity=False)


_TEXT = st.sampled_from(["", "x", "0", "-1", "a.b", "\x1b]0;T\x07\n<row>", "é" * 40]) | st.text(max_size=12)


def values(annotation: Any, metadata: list[Any] | None = None) -> st.SearchStrategy[Any]:
    """Values of ``annotation`` that its model accepts, extremes first."""
    metadata = list(metadata or [])
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        extra = [m for item in args[1:] for m in (item.metadata if isinstance(item, FieldInfo) else [item])]
        return values(args[0], metadata + extra)
    if origin in (Union, types.UnionType):
        return st.one_of(*(values(a, metadata) for a in args))
    if origin is Literal:
        return st.sampled_from(args)
    if origin is list:
        high = next((m.max_length for m in metadata if isinstance(m, annotated_types.MaxLen)), 3)
        return st.lists(values(args[0]), max_size=min(high, 3))
    if origin is dict:
        return st.dictionaries(_TEXT, values(args[1]), max_size=3)
    if annotation is type(None):
        return st.none()
    if annotation is bool:
        return st.booleans()
    if annotation in (int, float):
        return number(annotation, metadata)
    if annotation is str:
        return _TEXT
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return record(annotation)
    raise AssertionError(f"no strategy for {annotation!r}")


def record(model: type[BaseModel]) -> st.SearchStrategy[dict[str, Any]]:
    """A map-form record of ``model``: every required field, and any of the optional ones."""
    fields = {name: values(info.annotation, info.metadata) for name, info in model.model_fields.items()}
    required = {name for name, info in model.model_fields.items() if info.is_required()}
    return st.fixed_dictionaries(
        {name: s for name, s in fields.items() if name in required},
        optional={name: s for name, s in fields.items() if name not in required},
    )
