"""How the straggler engine holds aggregates: keys numbered, a column of values per key number, rows of aggregates
by key number (:class:`Rows`), and the ledger of what was folded since the last evaluation.
"""

from __future__ import annotations

from array import array
from collections.abc import Hashable, Iterable, Sequence
from typing import Any, Generic, NamedTuple, TypeVar

import numpy as np

K = TypeVar("K", bound=Hashable)


class Index(Generic[K]):
    """Keys numbered in order of first use; ``reset`` numbers them again from nothing (``version`` says which
    numbering an array made from them belongs to)."""

    def __init__(self) -> None:
        self.ids: dict[K, int] = {}
        self.keys: list[K] = []
        self.version = 0

    def number(self, key: K) -> int:
        got = self.ids.get(key)
        if got is None:
            got = self.ids[key] = len(self.keys)
            self.keys.append(key)
        return got

    def reset(self) -> None:
        self.ids, self.keys = {}, []
        self.version += 1


class Column:
    """A NumPy array of one value per key number, grown as keys are numbered."""

    def __init__(self, dtype: Any, fill: float | int) -> None:
        self.dtype, self.fill = dtype, fill
        self.values = np.full(64, fill, dtype)
        self.size = 0

    def append(self, value: float | int) -> None:
        if self.size == len(self.values):
            self.values = np.concatenate([self.values, np.full(len(self.values), self.fill, self.dtype)])
        self.values[self.size] = value
        self.size += 1

    @property
    def view(self) -> np.ndarray[Any, Any]:
        return self.values[: self.size]


I64 = np.int64
F64 = np.float64


class Rows(NamedTuple):
    """Aggregates by key number (``key``: an aggregate key's number): per row the count, sum and minimum of exec times
    and the ``coll_sn`` span (its lowest ``lo`` with the earliest dump time ``lo_ts`` among those, its highest ``hi``
    with the earliest ``hi_ts``). A slice holds one row per key, sorted; a horizon is its slices' rows one after the
    other, ``pos`` the slice each row is in."""

    key: np.ndarray[Any, Any]
    n: np.ndarray[Any, Any]
    total: np.ndarray[Any, Any]
    low: np.ndarray[Any, Any]
    lo: np.ndarray[Any, Any]
    lo_ts: np.ndarray[Any, Any]
    hi: np.ndarray[Any, Any]
    hi_ts: np.ndarray[Any, Any]

    @classmethod
    def empty(cls) -> Rows:
        return cls(*(np.empty(0, F64 if name in ("total", "low") else I64) for name in cls._fields))

    def take(self, where: Any) -> Rows:
        return Rows(*(column[where] for column in self))

    @classmethod
    def joined(cls, parts: list[Rows]) -> Rows:
        if len(parts) == 1:
            return parts[0]
        return cls(*(np.concatenate(columns) for columns in zip(*parts, strict=True)))

    def reduced(self) -> Rows:
        """One row per key: counts and sums added, minima kept, spans merged as :class:`SnSpan` merges them."""
        by_lo = np.lexsort((self.lo_ts, self.lo, self.key))
        keys = self.key[by_lo]
        starts = run_starts(keys)
        by_hi = np.lexsort((self.hi_ts, ~self.hi, self.key))  # highest hi first (~ reverses without overflow)
        return Rows(keys[starts], np.add.reduceat(self.n[by_lo], starts),
                     np.add.reduceat(self.total[by_lo], starts), np.minimum.reduceat(self.low[by_lo], starts),
                     self.lo[by_lo][starts], self.lo_ts[by_lo][starts], self.hi[by_hi][starts],
                     self.hi_ts[by_hi][starts])  # fmt: skip


EMPTY = Rows.empty()
DEAD = np.iinfo(I64).max  # a forgotten key's newest slice: never forgotten again


class Ledger:
    """What was folded since the last evaluation, as it came: per fold (a record, or a summary) the aggregate key's
    number, the process's number, how many rows, and the window's start and slice length (µs); per row its slice of
    that window and the :class:`Rows` values. Plain arrays of machine numbers, appended a batch of summaries at a time
    in C: which engine slice a row lands in is computed at :meth:`.slices.Slices._absorb`, for all rows at once."""

    PER_FOLD = ("key", "proc", "rows", "start", "step")
    PER_ROW = ("index", "n", "total", "low", "lo", "lo_ts", "hi", "hi_ts")

    def __init__(self) -> None:
        self.folds: dict[str, array[Any]] = {name: array("q") for name in self.PER_FOLD}
        self.rows: dict[str, array[Any]] = {
            name: array("d" if name in ("total", "low") else "q") for name in self.PER_ROW
        }

    def __len__(self) -> int:
        return len(self.folds["key"])

    def fold(self, folds: Sequence[Sequence[int]], rows: Sequence[Iterable[Any]]) -> bool:
        """Append ``folds`` (a column per :attr:`PER_FOLD` name) and ``rows`` (likewise, :attr:`PER_ROW`); False, and
        nothing appended, when a value does not fit in 64 bits."""
        sizes = [(column, len(column)) for column in (*self.folds.values(), *self.rows.values())]
        try:  # from lists: a third faster than extending from an iterator
            for name, per_fold in zip(self.PER_FOLD, folds, strict=True):
                self.folds[name].fromlist(list(per_fold))
            for name, per_row in zip(self.PER_ROW, rows, strict=True):
                self.rows[name].fromlist(list(per_row))
        except OverflowError:
            for column, size in sizes:
                del column[size:]
            return False
        return True

    def taken(self) -> tuple[dict[str, np.ndarray[Any, Any]], dict[str, np.ndarray[Any, Any]]]:
        """The folds and the rows as NumPy arrays; the ledger starts over."""
        folds, rows, fresh = self.folds, self.rows, Ledger()
        self.folds, self.rows = fresh.folds, fresh.rows
        return ({name: _numpy(values) for name, values in folds.items()},
                {name: _numpy(values) for name, values in rows.items()})  # fmt: skip


def _numpy(values: array[Any]) -> np.ndarray[Any, Any]:
    kind = F64 if values.typecode == "d" else I64
    return np.frombuffer(values, kind) if len(values) else np.empty(0, kind)


def run_starts(keys: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Where each run of equal values of sorted ``keys`` (not empty) starts."""
    return np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
