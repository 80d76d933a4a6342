"""Record models -> Arrow columns, for columnar batch inserts (never row-by-row ``executemany``), and table columns.

The Arrow schema of each kind is derived once from its record struct: ints, floats, strings and bools map to Arrow
types; ``Literal`` to strings; nested values (lists, dicts, sub-models) are stored as JSON text. The kind's DuckDB
table is derived from the same schema (:func:`table_columns`): the store creates it and adds the columns of new fields.
"""

from __future__ import annotations

import json
import operator
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import msgspec
import pyarrow as pa

from ranksight.schemas.records import RECORD_KINDS
from ranksight.schemas.structs import to_json

ENVELOPE_FIELDS: list[tuple[str, pa.DataType]] = [
    ("cluster", pa.string()),
    ("node", pa.string()),
    ("agent", pa.string()),
    ("seq", pa.int64()),
    ("ts", pa.timestamp("ns")),
    ("recv_ts", pa.timestamp("ns")),
    ("ttl", pa.float64()),
]

# Arrow's canonical JSON type: DuckDB stores such a column in a JSON column as it is, where plain text is parsed again
# to be validated (a fifth of inserting NIC rows of a hundred counters). The text is msgspec's: valid JSON.
_JSON = pa.json_()
_SCALARS: dict[Any, pa.DataType] = {int: pa.int64(), float: pa.float64(), str: pa.string(), bool: pa.bool_()}
_SQL_TYPES: dict[pa.DataType, str] = {pa.int64(): "BIGINT", pa.float64(): "DOUBLE", pa.string(): "VARCHAR",
                                      pa.bool_(): "BOOLEAN", pa.timestamp("ns"): "TIMESTAMP"}  # fmt: skip


@dataclass(frozen=True)
class KindColumns:
    fields: tuple[str, ...]
    json_fields: frozenset[str]  # sub-models and maps, stored as JSON text
    nested_fields: frozenset[str]  # lists of scalars, native Arrow
    schema: pa.Schema  # envelope columns then record columns
    record_schema: pa.Schema


def _bare(annotation: Any) -> Any:
    """The type under a declared range (``schemas.records.quantities``): the column is the type's."""
    return _bare(get_args(annotation)[0]) if get_origin(annotation) is Annotated else annotation


def _scalar(annotation: Any) -> pa.DataType | None:
    annotation = _bare(annotation)
    if get_origin(annotation) is Literal:
        return pa.string()
    return _SCALARS.get(annotation)


def _arrow_type(annotation: Any) -> tuple[pa.DataType, bool]:
    """(arrow type, stored as JSON text?) for one field annotation.

    Lists of scalars stay native Arrow (DuckDB casts them into JSON columns without a Python round trip, and a
    migration may have made their column a native list); sub-models and str-keyed maps go through JSON text (msgspec
    writes a map of hundreds of NIC counters about 5x faster than Arrow builds it and DuckDB casts it to JSON).
    """
    annotation = _bare(annotation)
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        inner = [a for a in get_args(annotation) if a is not type(None)]
        if len(inner) == 1:
            return _arrow_type(inner[0])
    scalar = _scalar(annotation)
    if scalar is not None:
        return scalar, False
    args = get_args(annotation)
    if origin is list and len(args) == 1 and _scalar(args[0]) is not None:
        return pa.list_(_scalar(args[0])), False
    return _JSON, True


@cache
def kind_columns(kind: str) -> KindColumns:
    fields, json_fields, nested_fields, record_fields = [], set(), set(), []
    for field in msgspec.structs.fields(RECORD_KINDS[kind].model):
        name = field.name
        arrow_type, is_json = _arrow_type(field.type)
        fields.append(name)
        if is_json:
            json_fields.add(name)
        elif pa.types.is_list(arrow_type):
            nested_fields.add(name)
        record_fields.append(pa.field(name, arrow_type))
    record_schema = pa.schema(record_fields)
    schema = pa.schema([pa.field(n, t) for n, t in ENVELOPE_FIELDS] + record_fields)
    return KindColumns(tuple(fields), frozenset(json_fields), frozenset(nested_fields), schema, record_schema)


@cache
def table_columns(kind: str) -> dict[str, str]:
    """Column name -> DuckDB type of the kind's table: the envelope columns, then one per record field (nested
    values as JSON)."""
    cols = kind_columns(kind)
    nested = cols.json_fields | cols.nested_fields
    return {f.name: "JSON" if f.name in nested else _SQL_TYPES[f.type] for f in cols.schema}


def _to_json(value: Any) -> str | None:
    return None if value is None else to_json(value)


def _json_column(values: Sequence[Any]) -> list[str | None]:
    # The common cases (no sub-records, an empty map): one C-level pass and no serializer call.
    for empty, text in (([], "[]"), ({}, "{}")):
        if values.count(empty) == len(values):
            return [text] * len(values)
    return [_to_json(v) for v in values]


class ColumnBuilder:
    """Accumulates the rows of one kind across the envelopes of a batch, then yields one Arrow table.

    This is the hot path of ingest. A compact batch's values come column by column from the codec
    (:func:`schemas.codec.decode_columns`) and are taken as they are; other records are read field by field with one
    C-level ``attrgetter`` per record, and these rows are transposed into columns when a chunk is made (or before a
    compact batch's columns follow them). Only sub-model fields go through JSON, column by column. Chunks hold about
    ``chunk_rows`` rows: small enough to stay in the CPU cache (transposing 200k rows at once costs twice as much),
    large enough that the fixed cost of a chunk (one Arrow array per column) vanishes behind small envelopes.

    ``kept_when`` maps a field to a bool field of the same record: the first is stored only in the rows where the
    second is true, NULL in the others (the ``nic`` history keeps the counters of a port's full records only).
    """

    def __init__(self, kind: str, chunk_rows: int = 2048, kept_when: Mapping[str, str] | None = None) -> None:
        self.kind = kind
        self.cols = kind_columns(kind)
        self.chunk_rows = chunk_rows
        index = {name: i for i, name in enumerate(self.cols.fields)}
        self._kept_when = [(index[field], index[flag]) for field, flag in (kept_when or {}).items()]
        self._fields = operator.attrgetter(*self.cols.fields)
        self._chunks: list[pa.RecordBatch] = []
        self._pending = 0  # rows added since the last chunk: those in the columns, then the records' rows
        self._columns: list[list[Any]] = [[] for _ in self.cols.fields]
        self._rows: list[Any] = []  # attrgetter results: tuples, or values when the kind has one field
        self._envelope: dict[str, list[Any]] = {name: [] for name, _ in ENVELOPE_FIELDS}

    def add(self, cluster: str, node: str, agent: str, seq: int, ts: int, recv_ts: int, ttl: float,
            records: list[Any], columns: Sequence[list[Any]] | None = None) -> None:  # fmt: skip
        """An envelope's records; ``columns``, where the codec read them so, their values: one list per field, in the
        order of the kind's fields."""
        n = len(records)
        env = self._envelope
        for name, value in (("cluster", cluster), ("node", node), ("agent", agent), ("seq", seq), ("ts", ts),
                            ("recv_ts", recv_ts), ("ttl", ttl)):  # fmt: skip
            env[name].extend([value] * n)
        if columns is None:
            self._rows.extend(map(self._fields, records))
        else:
            self._transpose_rows()
            for pending, column in zip(self._columns, columns, strict=True):
                pending.extend(column)
        self._pending += n
        if self._pending >= self.chunk_rows:
            self._chunks.append(self._chunk())

    def _transpose_rows(self) -> None:
        """The records' pending rows moved into the columns, after the rows there."""
        if not self._rows:
            return
        # attrgetter of one name returns the value itself, not a 1-tuple
        columns = zip(*self._rows, strict=True) if len(self._columns) > 1 else [self._rows]
        for pending, column in zip(self._columns, columns, strict=True):
            pending.extend(column)
        self._rows = []

    def _chunk(self) -> pa.RecordBatch:
        """The pending rows as one record batch; the pending lists start over."""
        arrays = [pa.array(self._envelope[name], type=t) for name, t in ENVELOPE_FIELDS]
        self._transpose_rows()
        columns = self._columns
        for field, flag in self._kept_when:
            columns[field] = [
                v if keep else None for v, keep in zip(columns[field], columns[flag], strict=True)
            ]
        for field, values in zip(self.cols.record_schema, columns, strict=True):
            if field.name in self.cols.json_fields:
                arrays.append(
                    pa.ExtensionArray.from_storage(_JSON, pa.array(_json_column(values), pa.string()))
                )
            else:
                arrays.append(pa.array(values, type=field.type))
        self._pending = 0
        self._columns = [[] for _ in self.cols.fields]
        self._envelope = {name: [] for name, _ in ENVELOPE_FIELDS}
        return pa.RecordBatch.from_arrays(arrays, schema=self.cols.schema)

    def table(self) -> pa.Table:
        """Every row added, as one contiguous table (DuckDB scans one chunk much faster than many small ones)."""
        chunks = [*self._chunks, self._chunk()] if self._pending or not self._chunks else self._chunks
        self._chunks = []
        return pa.Table.from_batches(chunks, schema=self.cols.schema).combine_chunks()


def row_to_record(kind: str, row: dict[str, Any]) -> Any:
    """Inverse of the mapping above, for replay: a stored row back into its record, as ingest decodes it.

    Nested values come back as JSON text (sub-models, and lists or maps stored in JSON columns).
    """
    cols = kind_columns(kind)
    nested = cols.json_fields | cols.nested_fields
    values = {
        f: (json.loads(row[f]) if f in nested and isinstance(row[f], str) else row[f]) for f in cols.fields
    }
    return msgspec.convert({k: v for k, v in values.items() if v is not None}, RECORD_KINDS[kind].model)
