"""Hypothesis strategies drawn from the record structs: each value within its field's declared range (the field's own
``ge``/``le``/``gt``/``lt`` within what the store holds), the bounds and the values just inside them most likely."""

from __future__ import annotations

import math
import sys
from typing import Any

import msgspec.inspect as mi
from hypothesis import strategies as st

from ranksight.schemas.wire import STORED_BOUNDS


def bounds(info: mi.IntType | mi.FloatType) -> tuple[Any, Any, bool, bool]:
    """(low, high, low excluded, high excluded) of a number: the field's own constraints within the stored ones."""
    kind = int if isinstance(info, mi.IntType) else float
    low, high = STORED_BOUNDS[kind]["ge"], STORED_BOUNDS[kind]["le"]
    low_open = high_open = False
    if info.ge is not None:
        low = max(low, info.ge)
    if info.gt is not None:
        low, low_open = max(low, info.gt), True
    if info.le is not None:
        high = min(high, info.le)
    if info.lt is not None:
        high, high_open = min(high, info.lt), True
    return low, high, low_open, high_open


def number(info: mi.IntType | mi.FloatType) -> st.SearchStrategy[Any]:
    low, high, low_open, high_open = bounds(info)
    if isinstance(info, mi.IntType):
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


def values(info: mi.Type) -> st.SearchStrategy[Any]:
    """Values of a field's type (:func:`msgspec.inspect.type_info`) that its record accepts, extremes first."""
    if isinstance(info, mi.Metadata):
        return values(info.type)
    if isinstance(info, mi.UnionType):
        return st.one_of(*(values(t) for t in info.types))
    if isinstance(info, mi.LiteralType):
        return st.sampled_from(info.values)
    if isinstance(info, mi.ListType):
        return st.lists(values(info.item_type), max_size=min(info.max_length or 3, 3))
    if isinstance(info, mi.DictType):
        return st.dictionaries(_TEXT, values(info.value_type), max_size=3)
    if isinstance(info, mi.NoneType):
        return st.none()
    if isinstance(info, mi.BoolType):
        return st.booleans()
    if isinstance(info, mi.IntType | mi.FloatType):
        return number(info)
    if isinstance(info, mi.StrType):
        return _TEXT
    if isinstance(info, mi.StructType):
        return _fields(info)
    raise AssertionError(f"no strategy for {info!r}")


def _fields(info: mi.StructType) -> st.SearchStrategy[dict[str, Any]]:
    fields = {f.name: values(f.type) for f in info.fields}
    required = {f.name for f in info.fields if f.required}
    return st.fixed_dictionaries(
        {name: s for name, s in fields.items() if name in required},
        optional={name: s for name, s in fields.items() if name not in required},
    )


def record(model: type) -> st.SearchStrategy[dict[str, Any]]:
    """A map-form record of ``model``: every required field, and any of the optional ones."""
    info = mi.type_info(model)
    assert isinstance(info, mi.StructType)
    return _fields(info)
