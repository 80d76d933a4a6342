"""The ``job_dump`` and ``job_evidence`` endpoints' handler: a job's hang dumps on demand, matched across ranks (the
commands and the evidence file: :mod:`ranksight.api.forensics`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ranksight.aggregator.analysis.forensics import finding_evidence, named_ranks
from ranksight.aggregator.api.endpoint import handles
from ranksight.aggregator.hang_forensics import job_nodes
from ranksight.api.contract import RequestError
from ranksight.api.params import JobDumpParams
from ranksight.schemas.api import ApiResponse

if TYPE_CHECKING:
    from ranksight.aggregator.runtime import Aggregator


@handles("job_dump")
@handles("job_evidence")
async def job_dump(agg: Aggregator, p: JobDumpParams) -> ApiResponse:
    """Ask the job's agents for every process's Flight Recorder and Python stacks now, and match them across ranks."""
    cluster = p.cluster or agg.settings.cluster
    state = agg.analysis_state or agg.state
    if not job_nodes(state, cluster, p.job):
        raise RequestError(f"no rank of job {p.job!r} in cluster {cluster!r} is known: its processes report through "
                           "ranksight.client (RANK and a scheduler job id in their environment), or RAS watches a "
                           "job of that id")  # fmt: skip
    report = await agg.hang_forensics.dump_now(agg, cluster, p.job)
    # a row per named rank: the finding, and where the rank runs (host, pid, GPU, node, its group's RAS communicator)
    rows = [{**finding_evidence(finding, {rank}, report.max_named),
             **{k: v for k, v in named.items() if k not in ("summary", "corroboration")}}
            for finding, rank, named in named_ranks(report)]  # fmt: skip
    meta: dict[str, Any] = {
        "job": p.job, "cluster": cluster, "ranks_seen": report.report.ranks_seen,
        "ranks_missing_dump": report.report.ranks_missing_dump, "world_size": report.report.world_size,
        "dump_errors": report.errors, "corroboration": {str(r): v for r, v in report.corroboration.items()},
        "nodes": {str(r): n for r, n in sorted(report.nodes.items())}, "ras_comms": report.ras_comms,
        "merged_into": report.merged_into,
    }  # fmt: skip
    if p.include_dumps:
        meta["dumps"] = report.raw_dumps
    return ApiResponse.success(rows, meta=meta)
