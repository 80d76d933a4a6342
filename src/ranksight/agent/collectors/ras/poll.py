"""One status poll with the full truth, for the collector and ``ranksight ras status``.

Each format hides something: the JSON writer emits communicators only (a process that left no communicator data, dead
or missing, is invisible: ``upstream-server/ref_2.30.7_json_nocomms.txt``), while the text lists only communicators
with a problem, elides missing-rank lists above 10 ranks and carries no op counts. So the text ``STATUS`` (cheap to
parse, with the job-level INCOMPLETE/DEAD sections) is the poll, and a JSON ``STATUS`` adds communicator detail (op
counts for hang detection, every rank's owner) where the server has JSON and detail is asked for. Every status is a
RAS collective across the job, so the caller asks for detail on only some polls.
"""

from __future__ import annotations

import copy
import os
from typing import TYPE_CHECKING

from ranksight.agent.collectors.ras.client import DEFAULT_PORT, RasClient
from ranksight.agent.collectors.ras.facts import add_evidence, add_process
from ranksight.agent.collectors.ras.parse_json import parse_status_json
from ranksight.agent.collectors.ras.parse_text import parse_status_text
from ranksight.schemas.records.ras import RasStatus

if TYPE_CHECKING:
    from ranksight.agent.collectors.ras.settings import RasSettings


def client_for(settings: RasSettings, addr: str | None = None) -> RasClient:
    """The client the settings describe; the address: ``addr``, the setting, ``$NCCL_RAS_ADDR``, localhost:28028."""
    addr = addr or settings.addr or os.environ.get("NCCL_RAS_ADDR") or f"localhost:{DEFAULT_PORT}"
    return RasClient(addr, timeout_s=settings.timeout_s, collective_timeout_s=settings.collective_timeout_s,
                     max_reply_bytes=settings.max_reply_bytes)  # fmt: skip


def merge_detail(text: RasStatus, detail: RasStatus) -> RasStatus:
    """The text status (job-level truth, health, evidence lines) completed with a JSON status's communicator detail."""
    out = copy.deepcopy(text)
    out.all_communicators = True
    comms = {c.hash: c for c in out.communicators}
    for jc in detail.communicators:
        tc = comms.get(jc.hash)
        if tc is None:  # the text lists only communicators with a problem
            out.communicators.append(copy.deepcopy(jc))
            continue
        tc.secondary_hash, tc.ranks_reporting = jc.secondary_hash, jc.ranks_reporting
        tc.rank_status, tc.op_counts, tc.lagging_ranks = (
            dict(jc.rank_status),
            dict(jc.op_counts),
            list(jc.lagging_ranks),
        )
        tc.size = tc.size if tc.size is not None else jc.size
        if not tc.complete:  # the text elided the rank list; JSON has every rank
            tc.missing_ranks, tc.unknown_ranks, tc.complete = (
                list(jc.missing_ranks),
                list(jc.unknown_ranks),
                True,
            )
        for line in jc.evidence:
            add_evidence(tc.evidence, line)
    # JSON names every missing rank's process: add its ranks, and the processes the text did not list
    for source, target in ((detail.missing_processes, out.missing_processes),
                           (detail.dead_processes, out.dead_processes)):  # fmt: skip
        for proc in source:
            into = target
            if any(p.host == proc.host and p.pid == proc.pid for p in out.dead_processes):
                into = out.dead_processes
            elif any(p.host == proc.host and p.pid == proc.pid for p in out.missing_processes):
                into = out.missing_processes
            add_process(into, proc.host, proc.pid, proc.gpus, evidence=proc.evidence)
            for comm, ranks in proc.comms.items():
                for rank in ranks:
                    add_process(into, proc.host, proc.pid, proc.gpus, comm=comm, rank=rank)
    return out


async def poll_status(client: RasClient, *, verbose: bool = False, detail: bool = True) -> RasStatus:
    """A text status, plus a JSON one merged in when ``detail`` and the endpoint has JSON."""
    _, body = await client.status(verbose=verbose)
    status = parse_status_text(body)
    if detail and client.features.json is not False:
        fmt, body = await client.status(verbose=verbose, prefer_json=True)
        if fmt == "json":
            status = merge_detail(status, parse_status_json(body))
    return status
