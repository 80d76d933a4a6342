"""RAS rules over :class:`aggregator.state.jobs.JobTracker`: missing and dead processes, communicator errors, persistent
mismatches, hangs, and the job lifecycle (started / ended). Jobs that have not ended are judged on their last facts,
also while stale (a late poll under load is not news, and resolving then re-firing would flap); a hang needs fresh
polls. A normal end resolves every failure alert of the job and raises none.

Every RAS alert names the job, the node when one node is at fault (a RAS host that is an agent's node name or
hostname), and carries the exact status lines behind it (``evidence.lines``):

- ``rank_missing``: one per process of the job that is not answering (the status's INCOMPLETE or DEAD processes, or a
  MONITOR ``PEER_DEAD`` at once, withdrawn when ``peer_dead_confirm_polls`` statuses after it do not list the process),
  with its host, pid, GPUs and the communicators and ranks it holds; ranks the server cannot name make one alert per job.
- ``process_dead``: a process the status lists as DEAD (unreachable over the RAS network).
- ``comm_hang``: one per job, when no op count of any communicator advanced for ``hang_after_s`` while the job is
  alive (polled, every process answering, no communicator initializing or finalizing) and it had run collectives;
  communicators that never ran one (initializing, idle) are not hung. It is the job's one hang alert: when Inspector
  silence finds a hang in the job's cluster (:mod:`aggregator.models.hangs`) it fires at once, with those ranks as
  ``evidence.inspector_lagging``, and ``collective_hang`` stays quiet for a cluster RAS watches. An endpoint with text
  statuses only (no op counts) gets it only when the same ranks stay behind at the same counts for ``LAG_POLLS`` polls.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from ranksight.aggregator.alerts import Condition, Rule, RuleDoc
from ranksight.aggregator.component_settings import RasAlertSettings
from ranksight.aggregator.models.hangs import comm_hash, lagging_evidence
from ranksight.aggregator.state import NS, LiveState
from ranksight.aggregator.state.jobs import JobState, process_key
from ranksight.aggregator.timefmt import iso
from ranksight.schemas.records.ras import RasProcess
from ranksight.schemas.structs import to_builtins

MISMATCH_PERSIST_POLLS = 3  # MISMATCH is routinely transient (ranks between two collectives)
LAG_POLLS = (
    2  # polls in a row with the same ranks behind and nothing advancing: a hang with its culprits named
)


def cycle(job: JobState) -> str:
    """The job cycle in an alert's identity, in whole seconds: the store keeps microseconds, so a replayed start
    time must give the same fingerprint as the live one."""
    return str(job.first_seen_ns // NS)


def node_of(state: LiveState, cluster: str, host: str | None) -> str | None:
    """The agent node a RAS host names: its node name, or its hostname (short or full)."""
    if host is None:
        return None
    for node in state.nodes.nodes.values():
        names = {node.node, node.hostname, (node.hostname or "").split(".")[0]}
        if node.cluster == cluster and host in names:
            return node.node
    return None


def widest_rank(job: JobState, proc: RasProcess) -> int | None:
    """The process's rank in the widest communicator it holds one rank of (the world's, when it is listed)."""
    held = [(job.comms[h].size or 0 if h in job.comms else 0, ranks[0]) for h, ranks in proc.comms.items()
            if len(ranks) == 1]  # fmt: skip
    return max(held)[1] if held else None


def _only(rank_lists: Iterable[list[int]]) -> int | None:
    """The rank when the lists name exactly one, else None."""
    ranks = {r for ranks in rank_lists for r in ranks}
    return ranks.pop() if len(ranks) == 1 else None


def _gpus(gpus: list[int]) -> str:
    return f"GPU{'s' if len(gpus) > 1 else ''} {','.join(map(str, gpus))}" if gpus else "no known GPU"


class RankMissingRule:
    name = "rank_missing"
    for_s, clear_s = 0.0, 30.0
    doc = RuleDoc("warning", "RAS: a rank of a live job does not answer", "see RAS")

    def __init__(self, settings: RasAlertSettings | None = None) -> None:
        self.settings = settings or RasAlertSettings()

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        for job in state.jobs.current():
            named: set[int] = set()
            for how, proc in [*(("missing", p) for p in job.missing_processes),
                              *(("dead", p) for p in job.dead_processes)]:  # fmt: skip
                named.update(r for ranks in proc.comms.values() for r in ranks)
                yield self._condition(state, job, proc, how, proc.evidence)
            for key, pending in job.peers_dead.items():
                if pending.statuses_since >= self.settings.peer_dead_confirm_polls:
                    continue  # statuses since the event do not list it
                ev = pending.event
                proc = RasProcess(host=ev.host or ev.addr or "?", pid=ev.pid, gpus=list(ev.gpus))
                line = (
                    f"[{ev.time}] {ev.event}: {ev.addr or f'Process {ev.pid} on node {ev.host}'} {ev.details}"
                )
                yield self._condition(state, job, proc, "peer_dead", [line.rstrip()], key=key)
            unnamed = {c.hash: sorted(set(c.unknown_ranks) | (set(c.missing_ranks) - named))
                       for c in job.comms.values() if c.unknown_ranks or set(c.missing_ranks) - named}  # fmt: skip
            if unnamed:
                lines = [line for c in job.comms.values() if c.hash in unnamed for line in c.evidence][:24]
                yield Condition(self.name, "warning", job.cluster,
                                f"job {job.job_id}: {sum(map(len, unnamed.values()))} ranks not answering whose "
                                f"process the status does not name", job=job.job_id, key="unnamed",
                                about_rank=_only(unnamed.values()),
                                evidence={"comms": unnamed, "lines": lines, "endpoint": job.endpoint})  # fmt: skip

    def _condition(self, state: LiveState, job: JobState, proc: RasProcess, how: str, lines: list[str],
                   key: str | None = None) -> Condition:  # fmt: skip
        ranks = ", ".join(f"rank {','.join(map(str, r))} of {h}" for h, r in proc.comms.items())
        return Condition(
            self.name, "warning", job.cluster,
            f"job {job.job_id}: process {proc.pid} on {proc.host} ({_gpus(proc.gpus)}) is not answering "
            f"({'reported dead by MONITOR' if how == 'peer_dead' else how})" + (f": {ranks}" if ranks else ""),
            node=node_of(state, job.cluster, proc.host), job=job.job_id, key=key or process_key(proc.host, proc.pid),
            about_rank=widest_rank(job, proc),
            evidence={"host": proc.host, "pid": proc.pid, "gpus": proc.gpus, "state": how, "comms": proc.comms,
                      "lines": lines, "endpoint": job.endpoint},
        )  # fmt: skip


class ProcessDeadRule:
    name = "process_dead"
    for_s, clear_s = 0.0, 30.0
    doc = RuleDoc("critical", "RAS: a process of the job is dead")

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        for job in state.jobs.current():
            for proc in job.dead_processes:
                yield Condition(self.name, "critical", job.cluster,
                                f"job {job.job_id}: process {proc.pid} on {proc.host} ({_gpus(proc.gpus)}) is dead",
                                node=node_of(state, job.cluster, proc.host), job=job.job_id,
                                key=process_key(proc.host, proc.pid), about_rank=widest_rank(job, proc),
                                evidence={"host": proc.host, "pid": proc.pid, "gpus": proc.gpus, "comms": proc.comms,
                                          "lines": proc.evidence})  # fmt: skip


class CommErrorRule:
    name = "comm_error"
    for_s, clear_s = 0.0, 30.0
    doc = RuleDoc("critical", "a communicator reports ERROR or ABORT")

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        for job in state.jobs.current():
            for comm in job.comms.values():
                if "ERROR" in comm.errors or comm.status == "ABORT":
                    yield Condition(self.name, "critical", job.cluster,
                                    f"job {job.job_id}: communicator {comm.hash} reports "
                                    f"{'ABORT' if comm.status == 'ABORT' else 'ERROR'}", job=job.job_id,
                                    comm=comm.hash, evidence={"status": comm.status, "errors": comm.errors,
                                                              "lines": comm.evidence})  # fmt: skip


class CommMismatchRule:
    name = "comm_mismatch"
    for_s, clear_s = 0.0, 60.0
    doc = RuleDoc("warning", "ranks disagree for 3 polls in a row")

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        for job in state.jobs.current():
            for comm in job.comms.values():
                if comm.mismatch_polls >= MISMATCH_PERSIST_POLLS:
                    yield Condition(self.name, "warning", job.cluster,
                                    f"job {job.job_id}: communicator {comm.hash} ranks disagree for "
                                    f"{comm.mismatch_polls} polls", job=job.job_id, comm=comm.hash,
                                    evidence={"polls": comm.mismatch_polls, "lines": comm.evidence})  # fmt: skip


class CommHangRule:
    """A communicator that stopped advancing with every rank RUNNING; when some ranks' op counts stay behind their
    peers' (they never entered the collective the others wait in), it names them and their nodes, after
    ``LAG_POLLS`` polls instead of ``HANG_POLLS``."""

    name = "comm_hang"
    for_s, clear_s = 0.0, 60.0
    doc = RuleDoc("critical", "op counts frozen while all ranks RUN, or at once on an Inspector-silence hang")

    def __init__(self, settings: RasAlertSettings | None = None) -> None:
        self.settings = settings or RasAlertSettings()

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        hang_ns = int(self.settings.hang_after_s * NS)
        for job in state.jobs.live():
            every = list(job.comms.values())
            comms = [c for c in every if c.op_total is not None]
            if (
                not every
                or job.missing_processes
                or job.dead_processes
                or job.peers_dead
                or any(set(c.rank_status) - {"RUNNING"} or c.missing_ranks or c.unknown_ranks for c in every)
            ):
                continue  # not alive, or a named cause: rank_missing / process_dead / comm_error speak for it
            stuck = [
                c for c in every if c.lag_polls >= LAG_POLLS
            ]  # some ranks never entered what peers wait in
            if not comms and not stuck:
                continue  # text statuses only (no JSON: RCCL 2.28.3, NCCL before 2.28.7): no op counts to judge
            ran = [c for c in comms if c.op_total]
            # the same hang seen by Inspector silence, in this job's communicators: at once
            hashes = {comm_hash(h) for h in job.comms}
            silent = [h for h in state.hangs(job.cluster, now_ns) if comm_hash(h.comm_id) in hashes]
            if (
                not stuck
                and not silent
                and (not ran or any(now_ns - c.op_changed_ns < hang_ns for c in comms))
            ):
                continue
            hung = stuck or ran or comms
            frozen_s = min(now_ns - c.op_changed_ns for c in hung) // NS
            lines = [
                f"communicator {c.hash}: {c.op_total} operations, none since {iso(c.op_changed_ns)}"
                if c.op_total is not None
                else f"communicator {c.hash}: the same ranks behind, their counts unmoved since {iso(c.op_changed_ns)}"
                for c in hung
            ]
            summary = (f"job {job.job_id}: no collective advanced for {frozen_s} s on {len(hung)} "
                       f"communicator{'s' if len(hung) > 1 else ''} while every process answers")  # fmt: skip
            evidence: dict[str, object] = {"comms": {c.hash: c.op_total for c in hung}, "frozen_s": frozen_s}
            lagging = [r for c in stuck for r in c.lagging]
            nodes = sorted({r.host for r in lagging})
            if lagging:
                first = lagging[0]
                ranks = ", ".join(f"rank {r.rank} ({r.host} pid {r.pid})" for r in lagging[:4])
                summary += (f"; stuck in {first.collective} #{first.peers_count}: {ranks}"
                            f"{' ...' if len(lagging) > 4 else ''} never entered it "
                            f"(count {first.count}, peers {first.peers_count})")  # fmt: skip
                evidence |= {"collective": first.collective, "lagging_ranks": [to_builtins(r) for r in lagging],
                             "nodes": nodes}  # fmt: skip
            if silent:
                evidence["inspector_lagging"] = lagging_evidence(silent)
            node = node_of(state, job.cluster, nodes[0]) if len(nodes) == 1 else None
            yield Condition(self.name, "critical", job.cluster, summary, node=node, job=job.job_id,
                            evidence=evidence | {"lines": lines[:24]})  # fmt: skip


class JobStartedRule:
    name = "job_started"
    for_s, clear_s = 0.0, 30.0
    doc = RuleDoc("info", "a job RAS watches started")

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        for job in state.jobs.jobs.values():
            if job.state != "ended":
                # the endpoint and node are those of the poll that found it: the lease holder's, which moves
                yield Condition(self.name, "info", job.cluster, f"job {job.job_id} started", job=job.job_id,
                                key=cycle(job), entity=f"job {job.job_id}",
                                evidence={"first_seen": iso(job.first_seen_ns), "version": job.version,
                                          "endpoint": job.endpoint, "node": job.node})  # fmt: skip


class JobEndedRule:
    name = "job_ended"
    for_s, clear_s = 0.0, 30.0
    doc = RuleDoc("info (after a failure: warning)", "a job RAS watched ended")

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        for job in state.jobs.jobs.values():
            if job.state == "ended":
                how = "normally" if job.normal_end else "after a failure"
                yield Condition(self.name, "info" if job.normal_end else "warning", job.cluster,
                                f"job {job.job_id} ended {how}", job=job.job_id, key=cycle(job),
                                entity=f"job {job.job_id}",
                                evidence={"ended": iso(job.ended_ns), "normal": job.normal_end,
                                          "last_health": job.health})  # fmt: skip


def ras_rules(settings: RasAlertSettings | None = None) -> list[Rule]:
    return [RankMissingRule(settings), ProcessDeadRule(), CommErrorRule(), CommMismatchRule(), CommHangRule(settings),
            JobStartedRule(), JobEndedRule()]  # fmt: skip
