"""``jobs`` and ``comms`` endpoints: the live RAS job and communicator state (params: ``cluster``, ``job``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ranksight.aggregator.api.endpoint import handles
from ranksight.aggregator.api.health import job_health
from ranksight.aggregator.api.merge import Merge
from ranksight.aggregator.state.jobs import JobState
from ranksight.aggregator.timefmt import iso
from ranksight.api.params import JobParams
from ranksight.schemas.api import ApiResponse
from ranksight.schemas.structs import to_builtins

if TYPE_CHECKING:
    from ranksight.aggregator.runtime import Aggregator


def _selected(agg: Aggregator, p: JobParams) -> list[JobState]:
    jobs = sorted(agg.state.jobs.jobs.values(), key=lambda j: (j.cluster, j.first_seen_ns))
    return [j for j in jobs if p.cluster in (None, j.cluster) and p.job in (None, j.job_id)]


@handles("jobs", merge=Merge(key=("cluster", "job"), order=("cluster", "first_seen"), newest="last_poll"))
async def jobs(agg: Aggregator, p: JobParams) -> ApiResponse:
    """RCCL/NCCL jobs seen through RAS, their state and health (``health``: the one vocabulary, ok/warning/critical;
    ``ras_health``: RAS's own word for its last status)."""
    rows = [{
        "job": j.job_id, "cluster": j.cluster, "state": j.state, "health": job_health(j.health),
        "ras_health": j.health, "endpoint": j.endpoint,
        "node": j.node, "version": j.version, "ranks": j.ranks, "comms": len(j.comms), "polls": j.polls,
        "first_seen": iso(j.first_seen_ns), "last_poll": iso(j.last_poll_ns), "ended": iso(j.ended_ns),
        "normal_end": j.normal_end,
        "missing_processes": to_builtins(j.missing_processes),
        "dead_processes": to_builtins(j.dead_processes),
    } for j in _selected(agg, p)]  # fmt: skip
    return ApiResponse.success(rows)


@handles("comms", merge=Merge(key=("cluster", "job", "hash"), order=("cluster", "job", "hash")))
async def comms(agg: Aggregator, p: JobParams) -> ApiResponse:
    """Communicators of the jobs RAS watches; those of an ended job are ``ENDED`` (``last_status``: what its last
    status said)."""
    rows = [{
        "job": j.job_id, "cluster": j.cluster, "hash": c.hash, "size": c.size,
        "status": "ENDED" if j.state == "ended" else c.status, "last_status": c.status, "job_state": j.state,
        "errors": c.errors, "missing_ranks": c.missing_ranks, "rank_status": c.rank_status, "op_count": c.op_total,
        "mismatch_polls": c.mismatch_polls, "stalled_polls": c.stalled_polls,
    } for j in _selected(agg, p) for c in j.comms.values()]  # fmt: skip
    return ApiResponse.success(rows)
