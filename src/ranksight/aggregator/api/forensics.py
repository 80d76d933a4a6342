"""The ``job_dump`` and ``job_evidence`` endpoints: a job's hang dumps on demand (``ranksight job dump JOB``), and
everything a bug report about a hang needs in one file (``ranksight job evidence JOB -o FILE.tar.gz``)."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import sys
import tarfile
import time
from typing import TYPE_CHECKING, Any

from ranksight.aggregator.api.endpoint import Flag, Params, RequestError
from ranksight.core.cliutil import EXIT_FAILED, EXIT_OK, settings_from_args
from ranksight.schemas.api import ApiResponse

if TYPE_CHECKING:
    from ranksight.aggregator.runtime import Aggregator
    from ranksight.core.config import Settings

JOB_FLAG = Flag(positional=True, metavar="JOB", help="the job id (as its ranks' ranksight.client reports it)")
FINDING_COLUMNS = ["kind", "rank", "process_group", "collective", "seq", "waiting_s", "where"]


class JobDumpParams(Params):
    job: str
    cluster: str | None = None
    include_dumps: bool = False


def wait_s(settings: Settings) -> float:
    """How long a client waits: the agents' answer time, and a margin."""
    return settings.aggregator.hang_forensics.request_timeout_s + 5


async def job_dump(agg: Aggregator, p: JobDumpParams) -> ApiResponse:
    """Ask the job's agents for every process's Flight Recorder and Python stacks now, and match them across ranks."""
    cluster = p.cluster or agg.settings.cluster
    state = agg.analysis_state or agg.state
    if not any(st.cluster == cluster and st.job == p.job for st in state.app.ranks.values()):
        raise RequestError(f"no rank of job {p.job!r} in cluster {cluster!r} is known: its processes report through "
                           "ranksight.client (RANK and a scheduler job id in their environment)")  # fmt: skip
    report = await agg.hang_forensics.dump_now(agg, cluster, p.job)
    rows = []
    for finding in report.report.findings:
        for rank in finding.missing_ranks or finding.mismatched_ranks:
            rows.append({**finding.as_dict(), "rank": rank, "where": finding.frames.get(rank, {}).get("where"),
                         "node": report.nodes.get(rank)})  # fmt: skip
    meta: dict[str, Any] = {
        "job": p.job, "cluster": cluster, "ranks_seen": report.report.ranks_seen,
        "ranks_missing_dump": report.report.ranks_missing_dump, "world_size": report.report.world_size,
        "dump_errors": report.errors, "corroboration": {str(r): v for r, v in report.corroboration.items()},
        "nodes": {str(r): n for r, n in sorted(report.nodes.items())},
    }  # fmt: skip
    if p.include_dumps:
        meta["dumps"] = report.raw_dumps
    return ApiResponse.success(rows, meta=meta)


def _notes(args: argparse.Namespace, response: ApiResponse) -> list[str]:
    meta = response.meta
    notes = [f"{len(meta.get('ranks_seen', []))} ranks dumped, no dump from {meta.get('ranks_missing_dump')}"]
    notes += [f"{e.get('node')} pid {e.get('pid')}: {e.get('error')}" for e in meta.get("dump_errors", [])]
    if not response.rows:
        notes.append("consistent: every rank entered the same collectives")
    return notes


def add_output_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o", "--output", metavar="FILE.tar.gz", required=True, help="the evidence file to write"
    )


def write_evidence(args: argparse.Namespace) -> int:
    """``ranksight job evidence``: dumps and stacks, RAS status, Inspector tail, GPU/NIC state and alerts, one file."""
    from ranksight.aggregator.api.client import query

    settings = settings_from_args(args)
    params = {"job": args.job, "cluster": args.cluster, "include_dumps": True}
    try:
        dump = asyncio.run(query(settings, "job_dump", params, timeout=wait_s(settings)))
    except Exception as exc:  # unreachable aggregator: one line
        print(f"ranksight: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if not dump.ok:
        print(f"ranksight: {dump.error}", file=sys.stderr)
        return EXIT_FAILED
    nodes = sorted(set(dump.meta.get("nodes", {}).values()))
    pids = sorted(
        {d["ranksight"]["pid"] for d in dump.meta.get("dumps", []) if d.get("ranksight", {}).get("pid")}
    )
    asks: dict[str, tuple[str, dict[str, Any]]] = {
        "alerts.json": ("alerts", {"cluster": args.cluster}),
        "ras_jobs.json": ("jobs", {"cluster": args.cluster}),
        "ras_comms.json": ("comms", {"cluster": args.cluster}),
        "gpus.json": ("gpus", {"cluster": args.cluster}),
        "nics.json": ("nics", {"cluster": args.cluster}),
        "inspector_tail.json": ("sql", {"sql": _inspector_tail_sql(pids)}),
        "markers.json": ("markers", {"job": args.job, "cluster": args.cluster}),
    }
    files: dict[str, Any] = {"hang_report.json": {"findings": dump.rows, **{k: v for k, v in dump.meta.items()
                                                                            if k != "dumps"}}}  # fmt: skip
    for d in dump.meta.get("dumps", []):
        meta = d.get("ranksight", {})
        files[f"dumps/rank{meta.get('rank')}-pid{meta.get('pid')}.json"] = d
    for name, (endpoint, endpoint_params) in asks.items():
        try:
            answer = asyncio.run(
                query(settings, endpoint, {k: v for k, v in endpoint_params.items() if v is not None})
            )
            rows = answer.rows if answer.ok else {"error": answer.error}
        except Exception as exc:  # one source missing is noted, the bundle is still written
            rows = {"error": str(exc)}
        if isinstance(rows, list) and endpoint in ("gpus", "nics"):
            rows = [r for r in rows if r.get("node") in nodes]
        if isinstance(rows, list) and endpoint == "alerts":
            rows = [
                r
                for r in rows
                if r.get("job") in (args.job, None) and (r.get("node") in nodes or r.get("job"))
            ]
        files[name] = rows
    _write_tar(args.output, files)
    print(f"wrote {args.output}: {len(files)} files, {len(dump.rows)} findings", file=sys.stderr)
    return EXIT_OK


def _inspector_tail_sql(pids: list[int]) -> str:
    # the last Inspector records of the job's processes (pids are numbers from checked dumps)
    where = f"WHERE pid IN ({', '.join(str(int(p)) for p in pids)})" if pids else "WHERE false"
    return f"SELECT * FROM inspector {where} ORDER BY dump_ts_us DESC LIMIT 1000"


def _write_tar(path: str, files: dict[str, Any]) -> None:
    now = time.time()
    with tarfile.open(path, "w:gz") as tar:
        for name, content in files.items():
            data = json.dumps(content, indent=1, default=str).encode()
            info = tarfile.TarInfo(f"evidence/{name}")
            info.size, info.mtime, info.mode = len(data), now, 0o644
            tar.addfile(info, io.BytesIO(data))
