"""RAS rules over :class:`aggregator.jobs.JobTracker`: missing ranks, dead processes, communicator errors,
persistent mismatches, hangs, and the job lifecycle (started / ended). Only live (polled, not ended) jobs are judged,
so a normal end resolves every failure alert of the job and raises none."""

from __future__ import annotations

from collections.abc import Iterator

from aggregator.alerts import Condition, Rule
from aggregator.jobs import JobState
from aggregator.state import NS, LiveState
from aggregator.timefmt import iso
from schemas.structs import to_builtins

MISMATCH_PERSIST_POLLS = 3  # MISMATCH is routinely transient (ranks between two collectives)
HANG_POLLS = 3  # polls in a row with all ranks RUNNING and no op count advancing
LAG_POLLS = (
    2  # polls in a row with the same ranks behind and nothing advancing: a hang with its culprits named
)


def cycle(job: JobState) -> str:
    """The job cycle in an alert's identity, in whole seconds: the store keeps microseconds, so a replayed start
    time must give the same fingerprint as the live one."""
    return str(job.first_seen_ns // NS)


class RankMissingRule:
    name = "rank_missing"

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        for job in state.jobs.live():
            for comm in job.comms.values():
                for rank in comm.missing_ranks:
                    yield Condition(self.name, "warning", job.cluster, f"job {job.job_id}: rank {rank} of "
                                    f"communicator {comm.hash} is not answering", job=job.job_id, comm=comm.hash,
                                    rank=rank, evidence={"endpoint": job.endpoint})  # fmt: skip


class ProcessDeadRule:
    name = "process_dead"

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        for job in state.jobs.live():
            for proc in job.dead_processes:
                yield Condition(self.name, "critical", job.cluster,
                                f"job {job.job_id}: process {proc.pid} on {proc.host} is dead", job=job.job_id,
                                key=f"{proc.host}:{proc.pid}", evidence=to_builtins(proc))  # fmt: skip


class CommErrorRule:
    name = "comm_error"

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        for job in state.jobs.live():
            for comm in job.comms.values():
                if "ERROR" in comm.errors or comm.status == "ABORT":
                    yield Condition(self.name, "critical", job.cluster,
                                    f"job {job.job_id}: communicator {comm.hash} reports "
                                    f"{'ABORT' if comm.status == 'ABORT' else 'ERROR'}", job=job.job_id,
                                    comm=comm.hash, evidence={"status": comm.status, "errors": comm.errors})  # fmt: skip


class CommMismatchRule:
    name = "comm_mismatch"

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        for job in state.jobs.live():
            for comm in job.comms.values():
                if comm.mismatch_polls >= MISMATCH_PERSIST_POLLS:
                    yield Condition(self.name, "warning", job.cluster,
                                    f"job {job.job_id}: communicator {comm.hash} ranks disagree for "
                                    f"{comm.mismatch_polls} polls", job=job.job_id, comm=comm.hash,
                                    evidence={"polls": comm.mismatch_polls})  # fmt: skip


class CommHangRule:
    """A communicator that stopped advancing with every rank RUNNING; when some ranks' op counts stay behind their
    peers' (they never entered the collective the others wait in), it names them and their nodes, after
    ``LAG_POLLS`` polls instead of ``HANG_POLLS``."""

    name = "comm_hang"

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        for job in state.jobs.live():
            for comm in job.comms.values():
                localized = comm.lag_polls >= LAG_POLLS and comm.rank_status.keys() <= {"RUNNING"}
                if comm.stalled_polls < HANG_POLLS and not localized:
                    continue
                evidence: dict[str, object] = {"op_total": comm.op_total, "polls": comm.stalled_polls}
                summary = (f"job {job.job_id}: communicator {comm.hash} made no progress for "
                           f"{max(comm.stalled_polls, comm.lag_polls)} polls with all ranks RUNNING")  # fmt: skip
                if comm.lagging:
                    first = comm.lagging[0]
                    ranks = ", ".join(f"rank {r.rank} ({r.host} pid {r.pid})" for r in comm.lagging[:4])
                    summary += (f"; stuck in {first.collective} #{first.peers_count}: {ranks}"
                                f"{' ...' if len(comm.lagging) > 4 else ''} never entered it "
                                f"(count {first.count}, peers {first.peers_count})")  # fmt: skip
                    evidence |= {"collective": first.collective, "lagging_ranks": [to_builtins(r) for r in comm.lagging],
                                 "nodes": sorted({r.host for r in comm.lagging})}  # fmt: skip
                yield Condition(self.name, "critical", job.cluster, summary, job=job.job_id, comm=comm.hash,
                                evidence=evidence)  # fmt: skip


class JobStartedRule:
    name = "job_started"

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        for job in state.jobs.jobs.values():
            if job.state != "ended":
                yield Condition(self.name, "info", job.cluster, f"job {job.job_id} started on {job.endpoint}",
                                job=job.job_id, key=cycle(job),
                                evidence={"first_seen": iso(job.first_seen_ns), "version": job.version})  # fmt: skip


class JobEndedRule:
    name = "job_ended"

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        for job in state.jobs.jobs.values():
            if job.state == "ended":
                how = "normally" if job.normal_end else "after a failure"
                yield Condition(self.name, "info" if job.normal_end else "warning", job.cluster,
                                f"job {job.job_id} ended {how}", job=job.job_id, key=cycle(job),
                                evidence={"ended": iso(job.ended_ns), "normal": job.normal_end,
                                          "last_health": job.health})  # fmt: skip


def ras_rules() -> list[Rule]:
    return [RankMissingRule(), ProcessDeadRule(), CommErrorRule(), CommMismatchRule(), CommHangRule(),
            JobStartedRule(), JobEndedRule()]  # fmt: skip
