"""The ``markers`` endpoint: timeline markers posted by jobs (``client.marker``), from history, oldest first."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from ranksight.aggregator.api.endpoint import handles
from ranksight.aggregator.api.merge import Merge
from ranksight.aggregator.timefmt import iso
from ranksight.api.params import MarkersParams
from ranksight.schemas.api import ApiResponse

if TYPE_CHECKING:
    from ranksight.aggregator.runtime import Aggregator


_SQL = (
    "SELECT client_ts, epoch_ns(recv_ts) AS recv_ns, cluster, node, job_id, rank, pid, text, fields FROM app "
    "WHERE event = 'marker' AND (? IS NULL OR job_id = ?) AND (? IS NULL OR cluster = ?) "
    "ORDER BY client_ts, node, pid, n LIMIT ?"
)


@handles(
    "markers",
    merge=Merge(key=("cluster", "node", "pid", "time", "text"), order=("time", "node", "pid"), limit="limit"),
)
async def markers(agg: Aggregator, p: MarkersParams) -> ApiResponse:
    """Timeline markers posted by jobs, oldest first."""
    args = [p.job, p.job, p.cluster, p.cluster, p.limit + 1]
    rows = await agg.store.call(lambda: list(agg.store.rows(_SQL, args)))
    out = [
        {
            "time": iso(r["client_ts"]), "received": iso(r["recv_ns"]), "cluster": r["cluster"],
            "node": r["node"], "job": r["job_id"], "rank": r["rank"], "pid": r["pid"], "text": r["text"],
            "fields": json.loads(r["fields"]) if r["fields"] else {},
        }
        for r in rows[: p.limit]
    ]  # fmt: skip
    return ApiResponse.success(out, truncated=len(rows) > p.limit)
