"""The ``markers`` endpoint: timeline markers posted by jobs (``client.marker``), from history, oldest first."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ranksight.aggregator.timefmt import iso
from ranksight.schemas.api import ApiResponse

if TYPE_CHECKING:
    from ranksight.aggregator.runtime import Aggregator

DEFAULT_LIMIT = 1000
MAX_LIMIT = 10_000
PARAMS = {"job", "cluster", "limit"}

_SQL = (
    "SELECT client_ts, epoch_ns(recv_ts) AS recv_ns, cluster, node, job_id, rank, pid, text, fields FROM app "
    "WHERE event = 'marker' AND (? IS NULL OR job_id = ?) AND (? IS NULL OR cluster = ?) "
    "ORDER BY client_ts, node, pid, n LIMIT ?"
)


def _check(params: dict[str, Any]) -> int:
    """Validate the parameters; return the row limit."""
    from ranksight.aggregator.api.queries import (
        RequestError,  # here: queries imports this module for ENDPOINTS
    )

    unknown = set(params) - PARAMS
    if unknown:
        raise RequestError(f"unknown parameter(s): {', '.join(sorted(unknown))}")
    for name in ("job", "cluster"):
        if params.get(name) is not None and not isinstance(params[name], str):
            raise RequestError(f"{name} must be a string")
    limit = params.get("limit", DEFAULT_LIMIT)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIMIT:
        raise RequestError(f"limit must be an integer from 1 to {MAX_LIMIT}")
    return limit


async def markers(agg: Aggregator, params: dict[str, Any]) -> ApiResponse:
    limit = _check(params)
    job, cluster = params.get("job"), params.get("cluster")
    args = [job, job, cluster, cluster, limit + 1]
    rows = await agg.store.call(lambda: list(agg.store.rows(_SQL, args)))
    out = [
        {
            "time": iso(r["client_ts"]), "received": iso(r["recv_ns"]), "cluster": r["cluster"],
            "node": r["node"], "job": r["job_id"], "rank": r["rank"], "pid": r["pid"], "text": r["text"],
            "fields": json.loads(r["fields"]) if r["fields"] else {},
        }
        for r in rows[:limit]
    ]  # fmt: skip
    return ApiResponse.success(out, truncated=len(rows) > limit)
