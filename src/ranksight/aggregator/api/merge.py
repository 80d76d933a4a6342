"""How the query front joins the shards' answers to one endpoint into one answer for the whole cluster (design §9).

A :class:`Merge` is declared beside its endpoint (:mod:`aggregator.api.endpoints`); :meth:`Merge.merge` is pure.
Rows are unioned by the endpoint's ``key``; where shards overlap on a key (a partition that moved between shards, the
analysis lead's copy of a node) the row with the latest ``newest`` column is kept, on a tie the one of the earlier
answer (the front puts the analysis lead's first: it holds the alerts). The union is then sorted by ``order`` and cut
at the ``limit`` parameter. ``meta``: the numbers named in ``counts`` are summed, lists are concatenated, mappings are
joined, anything else is the first answer's; ``meta.shards`` keeps each shard's own meta.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ranksight.schemas.api import ApiResponse

Columns = tuple[str, ...]
Row = dict[str, Any]
P = TypeVar("P")


@dataclass(frozen=True)
class Merge(Generic[P]):
    """``key``, ``order``: columns, or a function of the request's parameters giving them; ``-column`` in ``order``
    sorts that column descending (missing values last either way)."""

    key: Columns | Callable[[P], Columns]
    order: Columns | Callable[[P], Columns] = ()
    newest: str | None = None
    limit: str | None = None  # the parameter that caps the rows, applied again after the union
    counts: Columns = ()

    def merge(self, params: P, answers: list[tuple[str, ApiResponse]]) -> ApiResponse:
        """One answer from the successful ``(shard_id, answer)`` pairs, in order of preference."""
        key = self.key(params) if callable(self.key) else self.key
        order = self.order(params) if callable(self.order) else self.order
        rows: dict[tuple[Any, ...], Row] = {}
        for _, answer in answers:
            for row in answer.rows:
                k = tuple(row.get(c) for c in key)
                kept = rows.get(k)
                if kept is None or (self.newest and _later(row.get(self.newest), kept.get(self.newest))):
                    rows[k] = row
        merged = sort_rows(list(rows.values()), order)
        limit = getattr(params, self.limit) if self.limit else None
        truncated = any(a.truncated for _, a in answers) or (limit is not None and len(merged) > limit)
        meta = merge_meta([a.meta for _, a in answers], self.counts)
        meta["shards"] = {shard: answer.meta for shard, answer in answers}
        return ApiResponse.success(merged[:limit], truncated=truncated, meta=meta)


def _later(value: Any, than: Any) -> bool:
    return value is not None and (than is None or value > than)


def sort_rows(rows: list[Row], order: Columns) -> list[Row]:
    """Rows sorted by ``order`` (``-column``: descending); rows missing a column sort after the others."""
    for column in reversed(order):  # stable sorts, the last column first
        descending = column.startswith("-")
        name = column.removeprefix("-")
        present = [r for r in rows if r.get(name) is not None]
        absent = [r for r in rows if r.get(name) is None]
        rows = sorted(present, key=lambda r: r[name], reverse=descending) + absent
    return rows


def merge_meta(metas: list[dict[str, Any]], counts: Columns) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for meta in metas:
        for name, value in meta.items():
            if name not in merged:
                merged[name] = list(value) if isinstance(value, list) else value
            elif name in counts:
                merged[name] += value
            elif isinstance(value, list):
                merged[name] += value
            elif isinstance(value, dict):
                merged[name] = {**value, **merged[name]}
    return merged
