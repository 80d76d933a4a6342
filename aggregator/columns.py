"""Record models -> Arrow columns, for columnar batch inserts (never row-by-row ``executemany``).

The Arrow schema of each kind is derived once from its pydantic model: ints, floats, strings and bools map to Arrow
types; ``Literal`` to strings; nested values (lists, dicts, sub-models) are stored as JSON text.
"""

from __future__ import annotations

import json
import types
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal, Union, get_args, get_origin

import pyarrow as pa
from pydantic import BaseModel

from schemas.records import RECORD_MODELS

ENVELOPE_FIELDS: list[tuple[str, pa.DataType]] = [
    ("cluster", pa.string()),
    ("node", pa.string()),
    ("agent", pa.string()),
    ("seq", pa.int64()),
    ("ts", pa.timestamp("ns")),
    ("recv_ts", pa.timestamp("ns")),
    ("ttl", pa.float64()),
]

_SCALARS: dict[Any, pa.DataType] = {int: pa.int64(), float: pa.float64(), str: pa.string(), bool: pa.bool_()}


@dataclass(frozen=True)
class KindColumns:
    fields: tuple[str, ...]
    json_fields: frozenset[str]
    schema: pa.Schema


def _arrow_type(annotation: Any) -> tuple[pa.DataType, bool]:
    """(arrow type, stored as JSON?) for one field annotation."""
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        inner = [a for a in get_args(annotation) if a is not type(None)]
        if len(inner) == 1:
            return _arrow_type(inner[0])
    if origin is Literal:
        return pa.string(), False
    if annotation in _SCALARS:
        return _SCALARS[annotation], False
    return pa.string(), True


@cache
def kind_columns(kind: str) -> KindColumns:
    model = RECORD_MODELS[kind]
    fields, json_fields, arrow_fields = [], set(), list(ENVELOPE_FIELDS)
    for name, info in model.model_fields.items():
        arrow_type, is_json = _arrow_type(info.annotation)
        fields.append(name)
        if is_json:
            json_fields.add(name)
        arrow_fields.append((name, arrow_type))
    return KindColumns(tuple(fields), frozenset(json_fields), pa.schema(arrow_fields))


def _to_json(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    if isinstance(value, list) and value and isinstance(value[0], BaseModel):
        return "[" + ",".join(v.model_dump_json() for v in value) + "]"
    return json.dumps(value)


class ColumnBuilder:
    """Accumulates the rows of one kind across the envelopes of a batch, then yields one Arrow table."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.cols = kind_columns(kind)
        self.data: dict[str, list[Any]] = {name: [] for name in self.cols.schema.names}

    def add(self, cluster: str, node: str, agent: str, seq: int, ts: int, recv_ts: int, ttl: float,
            records: list[Any]) -> None:  # fmt: skip
        n = len(records)
        data = self.data
        for name, value in (("cluster", cluster), ("node", node), ("agent", agent), ("seq", seq), ("ts", ts),
                            ("recv_ts", recv_ts), ("ttl", ttl)):  # fmt: skip
            data[name].extend([value] * n)
        json_fields = self.cols.json_fields
        for name in self.cols.fields:
            column = data[name]
            if name in json_fields:
                column.extend(_to_json(getattr(r, name)) for r in records)
            else:
                column.extend(getattr(r, name) for r in records)

    def __len__(self) -> int:
        return len(self.data["seq"])

    def table(self) -> pa.Table:
        return pa.Table.from_pydict(self.data, schema=self.cols.schema)


def row_to_record(kind: str, row: dict[str, Any]) -> BaseModel:
    """Inverse of the mapping above, for replay: a stored row back into its record model."""
    cols = kind_columns(kind)
    values = {
        f: (json.loads(row[f]) if f in cols.json_fields and row[f] is not None else row[f])
        for f in cols.fields
    }
    return RECORD_MODELS[kind].model_validate({k: v for k, v in values.items() if v is not None})
