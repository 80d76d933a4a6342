"""The ``job dump`` and ``job evidence`` commands as their callers see them: the finding table, how long a client
waits, and the evidence file ``ranksight job evidence JOB -o FILE.tar.gz`` writes from the aggregator's answers (the
handler is :mod:`ranksight.aggregator.api.forensics`)."""

from __future__ import annotations

import argparse
import io
import json
import sys
import tarfile
import time
from typing import Any

from ranksight.api.contract import Flag
from ranksight.api.settings import ApiView
from ranksight.core.cliutil import EXIT_FAILED, EXIT_OK, settings_from_args
from ranksight.schemas.api import ApiResponse

JOB_FLAG = Flag(positional=True, metavar="JOB", help="the job id (as its ranks' ranksight.client reports it)")
FINDING_COLUMNS = ["kind", "rank", "process_group", "collective", "seq", "waiting_s", "where"]


def wait_s(settings: ApiView) -> float:
    """How long a client waits: the agents' answer time, and a margin."""
    return settings.aggregator.hang_forensics.request_timeout_s + 5


def notes(args: argparse.Namespace, response: ApiResponse) -> list[str]:
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
    import asyncio

    from ranksight.api.client import query

    settings = settings_from_args(args, ApiView)
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
    procs = sorted({(str(meta["host"]), int(meta["pid"])) for d in dump.meta.get("dumps", [])
                    if (meta := d.get("ranksight") or {}).get("host") and isinstance(meta.get("pid"), int)})  # fmt: skip
    asks: dict[str, tuple[str, dict[str, Any]]] = {
        "alerts.json": ("alerts", {"cluster": args.cluster}),
        "ras_jobs.json": ("jobs", {"cluster": args.cluster}),
        "ras_comms.json": ("comms", {"cluster": args.cluster}),
        "gpus.json": ("gpus", {"cluster": args.cluster}),
        "nics.json": ("nics", {"cluster": args.cluster}),
        "inspector_tail.json": ("sql", {"sql": inspector_tail_sql(procs)}),
        "markers.json": ("markers", {"job": args.job, "cluster": args.cluster}),
    }
    files: dict[str, Any] = {"hang_report.json": {"findings": dump.rows, **{k: v for k, v in dump.meta.items()
                                                                            if k != "dumps"}}}  # fmt: skip
    for d in dump.meta.get("dumps", []):
        meta = d.get("ranksight", {})
        files[f"dumps/rank{meta.get('rank')}-pid{meta.get('pid')}.json"] = d
    files["stacks.txt"] = stacks_text(dump.meta.get("dumps", []))
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


def inspector_tail_sql(procs: list[tuple[str, int]]) -> str:
    """The last Inspector records of the job's processes, each by its host and pid (a pid alone recurs across nodes);
    the host names come from the dumps, so they are written as SQL string literals with their quotes doubled."""
    if not procs:
        return "SELECT * FROM inspector WHERE false"
    where = " OR ".join(
        f"(hostname = '{host.replace(chr(39), chr(39) * 2)}' AND pid = {pid})" for host, pid in procs
    )
    return f"SELECT * FROM inspector WHERE {where} ORDER BY dump_ts_us DESC LIMIT 1000"


def stacks_text(dumps: list[dict[str, Any]]) -> str:
    """Every thread's Python stack of every process that answered, read as a traceback (innermost call last)."""
    lines = []
    for d in sorted(dumps, key=lambda d: str(d.get("ranksight", {}).get("rank"))):
        meta = d.get("ranksight") or {}
        lines.append(f"rank {meta.get('rank')}, pid {meta.get('pid')} on {meta.get('host')}")
        threads = meta.get("threads") or []
        if not threads:
            lines.append("  no Python stacks (a dump torch wrote or served itself)")
        for thread in threads:
            lines.append(f"  thread {thread.get('name')}{' (main)' if thread.get('main') else ''}:")
            lines += [f'    File "{f.get("filename")}", line {f.get("line")}, in {f.get("name")}'
                      for f in thread.get("frames") or []]  # fmt: skip
        lines.append("")
    return "\n".join(lines)


def _write_tar(path: str, files: dict[str, Any]) -> None:
    now = time.time()
    with tarfile.open(path, "w:gz") as tar:
        for name, content in files.items():
            data = (
                content if isinstance(content, str) else json.dumps(content, indent=1, default=str)
            ).encode()
            info = tarfile.TarInfo(f"evidence/{name}")
            info.size, info.mtime, info.mode = len(data), now, 0o644
            tar.addfile(info, io.BytesIO(data))
