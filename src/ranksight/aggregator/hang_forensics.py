"""Hang forensics, live: when a hang alert fires for a job, ask its agents for every process's dump and match them.

On a firing alert of ``aggregator.hang_forensics.rules`` that names a job, the aggregator finds the job's nodes (the
agents its ranks' ``ranksight.client`` signals came through), asks each agent's ``hang_dump`` command at once (bounded
by ``max_concurrent_requests``, ``request_timeout_s``, ``max_nodes_per_job``; one dump per job per ``cooldown_s``),
checks every process's dump with the same parser as ``ranksight analyze hang`` (an agent's answer is input like any
other), matches them across ranks (:func:`ranksight.core.flightrec.analyze`) and keeps the report in live state, where
``flight_recorder_hang`` raises it. Each named rank is corroborated or contradicted by what live state already holds:
RAS (its process dead or missing, its GPUs), Inspector (its last ``coll_sn`` against its communicator's) and its own
heartbeats. A failure is part of the report (``dump_errors``), never a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import nats.errors

from ranksight.aggregator.analysis.forensics import blamed, merged_evidence
from ranksight.aggregator.component_settings import HangForensicsSettings
from ranksight.aggregator.models.hangs import comm_hash
from ranksight.aggregator.state import LiveState
from ranksight.aggregator.state.app import RankState
from ranksight.aggregator.state.forensics import JobReport
from ranksight.aggregator.timefmt import iso
from ranksight.core.flightrec import DumpError, RankDump, analyze, parse_dump
from ranksight.schemas.alerts import Alert

if TYPE_CHECKING:
    from ranksight.aggregator.runtime import Aggregator

log = logging.getLogger(__name__)
COMMAND = "hang_dump"
HANG_ALERTS = (
    "comm_hang",
    "collective_hang",
)  # the RAS / Inspector alerts a report goes into (one hang, one alert)


@dataclass
class ForensicsStats:
    jobs: int = 0
    dumps: int = 0
    errors: int = 0
    skipped_cooldown: int = 0


class HangForensics:
    def __init__(self, settings: HangForensicsSettings) -> None:
        self.settings = settings
        self.stats = ForensicsStats()
        self._tasks: dict[tuple[str, str], asyncio.Task[JobReport | None]] = {}
        self._last: dict[tuple[str, str], float] = {}  # (cluster, job) -> monotonic time of its last dump
        self._slots = asyncio.Semaphore(settings.max_concurrent_requests)
        self._merges: set[asyncio.Task[None]] = set()

    def submit(self, agg: Aggregator, transitions: list[Alert]) -> None:
        """Start a dump of each job a firing hang alert names (not twice at once, not again within the cooldown)."""
        cfg = self.settings
        if not cfg.enabled or agg.nc is None:
            return
        state = agg.analysis_state or agg.state
        for alert in transitions:
            if alert.state != "firing" or alert.rule not in cfg.rules:
                continue
            for job in jobs_of(state, alert):
                self.start(agg, alert.cluster, job)
        hangs = [a for a in transitions if a.state == "firing" and a.rule in HANG_ALERTS]
        for report in state.forensics.reports.values() if hangs else ():
            # a RAS / Inspector hang alert that fires after the report: the report goes into it
            task = asyncio.create_task(
                self.merge(agg, report, hangs), name=f"hang-forensics-merge-{report.job}"
            )
            self._merges.add(task)
            task.add_done_callback(self._merges.discard)

    def start(self, agg: Aggregator, cluster: str, job: str) -> asyncio.Task[JobReport | None] | None:
        key = (cluster, job)
        if key in self._tasks:
            return self._tasks[key]
        last = self._last.get(key)
        if last is not None and time.monotonic() - last < self.settings.cooldown_s:
            self.stats.skipped_cooldown += 1
            return None
        self._last[key] = time.monotonic()
        task = asyncio.create_task(self._run(agg, cluster, job), name=f"hang-forensics-{job}")
        self._tasks[key] = task
        task.add_done_callback(lambda _: self._tasks.pop(key, None))
        return task

    async def dump_now(self, agg: Aggregator, cluster: str, job: str) -> JobReport:
        """An operator's dump (``ranksight job dump``): no cooldown; the report is kept like an alert's."""
        report = await self.collect(agg, cluster, job)
        self._last[(cluster, job)] = time.monotonic()
        (agg.analysis_state or agg.state).forensics.put(report)
        await self.merge(agg, report, list(agg.engine.active.values()))
        return report

    async def stop(self) -> None:
        tasks = [*self._tasks.values(), *self._merges]
        for task in tasks:
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self, agg: Aggregator, cluster: str, job: str) -> JobReport | None:
        try:
            report = await self.collect(agg, cluster, job)
            state = agg.analysis_state or agg.state
            state.forensics.put(report)
            await self.merge(agg, report, list(agg.engine.active.values()))
        except Exception:  # a bug must not take the aggregator down: say so in the log
            log.exception("hang forensics of job %s failed", job)
            return None
        return report

    async def merge(self, agg: Aggregator, report: JobReport, alerts: list[Alert]) -> None:
        """Put ``report`` into the evidence of the firing ``comm_hang`` / ``collective_hang`` alert of the same hang,
        if one is among ``alerts``: that alert becomes the hang's one alert (``flight_recorder_hang`` stays quiet)."""
        if report.merged_into is not None or not report.report.findings:
            return
        alert = next((a for a in sorted(alerts, key=lambda a: a.rule != "comm_hang")
                      if a.rule in HANG_ALERTS and a.state == "firing" and same_hang(a, report)), None)  # fmt: skip
        if alert is None:
            return
        report.merged_into = {"rule": alert.rule, "fingerprint": alert.fingerprint}
        evidence = {"flight_recorder": merged_evidence(report)}
        active = agg.engine.active.get(alert.fingerprint)
        if active is not None and active.started_at == alert.started_at:
            active.evidence = {**active.evidence, **evidence}
        await agg.store.call(agg.store.add_alert_evidence, alert.fingerprint, alert.started_at, evidence)

    async def collect(self, agg: Aggregator, cluster: str, job: str) -> JobReport:
        """Ask the job's agents, match their dumps; the report (not yet kept in live state)."""
        state = agg.analysis_state or agg.state
        ranks = [st for st in state.app.ranks.values() if st.cluster == cluster and st.job == job]
        nodes = sorted(job_nodes(state, cluster, job))
        keep = self.settings.max_nodes_per_job
        errors: list[dict[str, Any]] = [{"node": n, "error": f"not asked: beyond max_nodes_per_job ({keep})"}
                                        for n in nodes[keep:]]  # fmt: skip
        answers = await asyncio.gather(*(self._ask(agg, cluster, node, job) for node in nodes[:keep]))
        chosen: dict[
            int, tuple[RankDump, str, dict[str, Any]]
        ] = {}  # rank -> (dump, node, as the agent sent it)
        for node, (processes, error) in zip(nodes[:keep], answers, strict=True):
            if error:
                errors.append({"node": node, "error": error})
            for proc in processes:
                dump, why = _dump_of(node, proc)
                if dump is None:
                    errors.append(
                        {"node": node, "pid": proc.get("pid"), "rank": proc.get("rank"), "error": why}
                    )
                    continue
                kept = chosen.get(dump.rank)
                if kept is None or _speaks_better(dump, kept[0]):
                    chosen[dump.rank] = (dump, node, proc["dump"])
                if kept is not None and (kept[0].pid != dump.pid or kept[1] != node):  # not one process twice
                    errors.append({"node": node, "rank": dump.rank, "error": f"rank {dump.rank} answered twice; "
                                   f"pid {chosen[dump.rank][0].pid} speaks for it"})  # fmt: skip
        dumps = [dump for dump, _, _ in chosen.values()]
        raw_dumps = [raw for _, _, raw in chosen.values()]
        by_rank = {rank: node for rank, (_, node, _) in chosen.items()}
        world = max((st.world_size or 0 for st in ranks), default=0) or None
        report = analyze(dumps, world_size=world, min_wait_s=self.settings.min_wait_s)
        for st in ranks:  # a rank without a dump still has the node its signals came from
            if st.rank is not None:
                by_rank.setdefault(st.rank, st.node)
        s = self.stats
        s.jobs, s.dumps, s.errors = s.jobs + 1, s.dumps + len(dumps), s.errors + len(errors)
        named = {rank for _, rank in blamed(report.findings)[: self.settings.max_named_ranks]}
        procs = processes_of(dumps, ranks)
        ras_comms = {f.process_group: joined for f in report.findings
                     if (joined := join_ras_comm(state, cluster, job, f.group_ranks, procs)) is not None}  # fmt: skip
        return JobReport(cluster, job, time.time_ns(), report, by_rank, errors,
                         {r: corroborate(state, cluster, job, r, dumps) for r in sorted(named)}, raw_dumps,
                         ras_comms, procs, max_named=self.settings.max_named_ranks)  # fmt: skip

    async def _ask(
        self, agg: Aggregator, cluster: str, node: str, job: str
    ) -> tuple[list[dict[str, Any]], str | None]:
        assert agg.nc is not None
        subject = agg.subjects.agent(cluster, node, COMMAND)
        cfg = self.settings
        async with self._slots:
            try:
                msg = await agg.nc.request(
                    subject, json.dumps({"job": job}).encode(), timeout=cfg.request_timeout_s
                )
            except nats.errors.NoRespondersError:
                return [], "no agent answers (down, or its app collector is off)"
            except nats.errors.TimeoutError:
                return [], f"no answer within {cfg.request_timeout_s:g} s"
        refused = (msg.headers or {}).get("Nats-Service-Error")
        if refused:
            return [], f"the agent refused: {refused}"
        try:
            answer = json.loads(msg.data)
            processes = answer["processes"]
            if not isinstance(processes, list):
                raise ValueError("processes is not a list")
        except (ValueError, KeyError, TypeError) as exc:
            return [], f"bad answer: {str(exc)[:200]}"
        return [p for p in processes if isinstance(p, dict)], None


def _speaks_better(dump: RankDump, kept: RankDump) -> bool:
    """Of two answers for one rank (a data loader worker inherits RANK; a torch file beside its process's own answer),
    the one with more of the Flight Recorder, then with stacks, speaks for the rank."""
    return (len(dump.entries), len(dump.threads)) > (len(kept.entries), len(kept.threads))


def _dump_of(node: str, proc: dict[str, Any]) -> tuple[RankDump | None, str]:
    if proc.get("dump") is None:
        return None, str(proc.get("error") or "no dump")[:500]
    try:
        return parse_dump(json.dumps(proc["dump"]).encode(), f"{node} pid {proc.get('pid')}"), ""
    except (DumpError, TypeError, ValueError) as exc:
        return None, str(exc)[:500]


def corroborate(state: LiveState, cluster: str, job: str, rank: int, dumps: list[RankDump]) -> dict[str, Any]:
    """What RAS, Inspector and the rank's own heartbeats say about a rank a finding names."""
    app = next((st for st in state.app.ranks.values() if st.cluster == cluster and st.job == job and st.rank == rank),
               None)  # fmt: skip
    dump = next((d for d in dumps if d.rank == rank), None)
    host = dump.host if dump is not None else None
    pid = dump.pid if dump is not None else (app.pid if app is not None else None)
    out: dict[str, Any] = {"host": host, "pid": pid, "gpu": None, "ras": "no RAS data for this process",
                           "inspector": "no Inspector data for this process", "verdict": "no corroborating data"}  # fmt: skip
    if app is not None:
        out["heartbeat"] = {"last": iso(app.last_heartbeat_ns), "step": app.step, "node": app.node}
    agreeing: list[str] = []
    for ras_job in state.jobs.live():
        if ras_job.cluster != cluster:
            continue
        for kind, procs in (("dead", ras_job.dead_processes), ("missing", ras_job.missing_processes)):
            for p in procs:
                if p.pid == pid and (host is None or p.host == host):
                    out["ras"] = f"RAS lists the process as {kind} (job {ras_job.job_id})"
                    out["gpu"] = p.gpus or None
                    agreeing.append("ras")
    finder = state.stragglers.hang_finders.get(cluster)
    if finder is not None and host is not None and pid is not None:
        behind = [(c.label, sn, c.top) for c in finder.comm_ops.values() for sn, proc in c.last.values()
                  if proc == (host, pid)]  # fmt: skip
        if behind:
            out["inspector"] = [
                {"comm": label, "last_coll_sn": sn, "comm_top_coll_sn": top} for label, sn, top in behind
            ]
            if any(sn < top for _, sn, top in behind):
                agreeing.append("inspector")
    if agreeing:
        out["verdict"] = "corroborated by " + " and ".join(agreeing)
    elif out["inspector"] != "no Inspector data for this process":
        out["verdict"] = "contradicted: Inspector shows the process level with its peers"
    return out


Proc = tuple[str, int]  # (host, pid)


def job_nodes(state: LiveState, cluster: str, job: str) -> set[str]:
    """The nodes a job runs on: where its ranks' ``ranksight.client`` signals come from and, for a job that does not use
    the client (torch's own sources only), the RAS job of that id (its polling agent, the nodes Inspector saw its
    communicators' processes on)."""
    nodes = {st.node for st in state.app.ranks.values() if st.cluster == cluster and st.job == job}
    finder = state.stragglers.hang_finders.get(cluster)
    for ras_job in state.jobs.live():
        if ras_job.cluster != cluster or ras_job.job_id != job:
            continue
        nodes.add(ras_job.node)
        if finder is not None:
            hashes = {comm_hash(h) for h in ras_job.comms}
            procs = {proc for (comm_id, _), c in finder.comm_ops.items() if comm_hash(comm_id) in hashes
                     for _, proc in c.last.values()}  # fmt: skip
            nodes |= {seen[1] for proc in procs if (seen := finder.proc_seen.get(proc)) is not None}
    return nodes


def processes_of(dumps: list[RankDump], ranks: list[RankState]) -> dict[int, Proc]:
    """Rank -> (host, pid) of the job's processes: from their dumps, else from their client's signals."""
    procs: dict[int, Proc] = {}
    for d in dumps:
        if d.host is not None and d.pid is not None:
            procs[d.rank] = (d.host, d.pid)
    for st in ranks:
        if st.rank is not None and st.rank not in procs:
            procs[st.rank] = (st.node, st.pid)
    return procs


def join_ras_comm(state: LiveState, cluster: str, job: str, group_ranks: list[int], procs: dict[int, Proc]
                  ) -> dict[str, Any] | None:  # fmt: skip
    """The NCCL communicator of a process group, as far as it can be joined. Torch's Flight Recorder names no
    communicator hash (its ``nccl_comm_state`` is NCCLX's, keyed by a lossy text of the unique id, from which NCCL's
    hash cannot be recomputed), so the join is by the group's processes: Inspector's communicator whose ranks are
    exactly the group's processes (``joined_by`` "processes"), else the RAS job's communicators of the group's size
    (``size``: one is the group's; several are ``candidates``)."""
    if not group_ranks:
        return None
    members = {procs[r] for r in group_ranks if r in procs}
    finder = state.stragglers.hang_finders.get(cluster)
    if finder is not None and len(members) == len(group_ranks):
        exact = sorted({comm_id for (comm_id, _), c in finder.comm_ops.items()
                        if c.n_ranks == len(group_ranks) and {proc for _, proc in c.last.values()} == members})  # fmt: skip
        if len(exact) == 1:
            return {"hash": exact[0], "joined_by": "processes", "candidates": exact}
    ras_jobs = [j for j in state.jobs.live() if j.cluster == cluster and (j.job_id == job or any(
        (p.host, p.pid) in members for p in (*j.missing_processes, *j.dead_processes)))]  # fmt: skip
    sized = sorted({c.hash for j in ras_jobs for c in j.comms.values() if c.size == len(group_ranks)},
                   key=lambda h: str(comm_hash(h)))  # fmt: skip
    if not sized:
        return None
    return {"hash": sized[0] if len(sized) == 1 else None, "joined_by": "size", "candidates": sized}


def alert_processes(alert: Alert) -> set[tuple[Any, Any]]:
    """The (host, pid) of the processes a hang alert names (its lagging ranks, RAS's and Inspector's)."""
    return {(r.get("hostname") or r.get("host"), r.get("pid")) for r in _rows(alert)}


def _rows(alert: Alert) -> list[dict[str, Any]]:
    """The rows of ranks a hang alert's evidence lists (``lagging_ranks``, ``inspector_lagging``)."""
    ev = alert.evidence
    return [
        r
        for r in (*(ev.get("lagging_ranks") or []), *(ev.get("inspector_lagging") or []))
        if isinstance(r, dict)
    ]


def jobs_of(state: LiveState, alert: Alert) -> set[str]:
    """The jobs to dump for an alert: its job, else (``collective_hang`` names none) the jobs of the client processes
    it names (their node taken as their host)."""
    if alert.job:
        return {alert.job}
    procs = alert_processes(alert)
    return {st.job for st in state.app.ranks.values()
            if st.cluster == alert.cluster and st.job and (st.node, st.pid) in procs}  # fmt: skip


def same_hang(alert: Alert, report: JobReport) -> bool:
    """Whether a RAS / Inspector hang alert and a Flight Recorder report are one hang: same cluster, and the same job,
    or a process in common, or a communicator joined to one of the report's process groups."""
    if alert.cluster != report.cluster:
        return False
    if alert.job == report.job:
        return True
    if alert_processes(alert) & set(report.processes.values()):
        return True
    ev = alert.evidence
    rows = _rows(alert)
    hashes = {comm_hash(str(h)) for h in [*(ev.get("comms") or {}), ev.get("comm_id")] if h}
    hashes |= {comm_hash(str(r.get("comm_id"))) for r in rows if r.get("comm_id")}
    joined = {comm_hash(h) for j in report.ras_comms.values() for h in ([j["hash"]] if j.get("hash") else [])}
    return bool(hashes & joined)
