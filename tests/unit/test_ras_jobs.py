"""JobTracker + RAS rules, pure: persistence of MISMATCH, hangs, missing ranks, job cycles, normal end, replay."""

from __future__ import annotations

from pathlib import Path

from agent.collectors.ras.jobid import derived_job_id, listener_pid, scheduler_job_id
from agent.collectors.ras.parse_json import parse_status_json
from aggregator.alerts import AlertEngine
from aggregator.analysis import default_rules
from aggregator.state import LiveState
from schemas.records.ras import RasEventRecord, RasRecord, RasStatus
from tests.conftest import FIXTURES
from tests.ras_support import envelope, fake_proc

NS = 1_000_000_000
RAS = FIXTURES / "ras"


def status(name: str) -> RasStatus:
    return parse_status_json((RAS / name).read_bytes())


def record(st: RasStatus, job: str = "slurm-1") -> RasRecord:
    return RasRecord(job_id=job, endpoint="localhost:28028", **dict(st))


class Harness:
    def __init__(self) -> None:
        self.state, self.engine, self.rules, self.now, self.seq = (
            LiveState(),
            AlertEngine(),
            default_rules(),
            0,
            0,
        )
        self.fired: list[str] = []

    def feed(self, kind: str, rec: object) -> list[tuple[str, str]]:
        self.now += 10 * NS
        self.seq += 1
        self.state.observe(envelope(kind, [rec], seq=self.seq), self.now)  # type: ignore[list-item]
        self.state.tick(self.now)
        transitions = self.engine.evaluate(self.rules, self.state, self.now)
        return [(a.rule, a.state) for a in transitions]


def test_mismatch_fires_only_when_it_persists_and_resolves() -> None:
    h = Harness()
    first = record(status("nccl_2.28.9_json_status_mismatch_4node_a10g.json"))

    def poll(n: int, errors: list[str]) -> RasRecord:  # op counts advance: a moving job, not a hang
        comm = first.communicators[0].model_copy(
            update={"op_counts": {"AllReduce": 101 + n}, "errors": errors}
        )
        return first.model_copy(update={"communicators": [comm]})

    assert ("job_started", "firing") in h.feed("ras", poll(0, ["MISMATCH"]))
    assert h.feed("ras", poll(1, ["MISMATCH"])) == []
    assert h.feed("ras", poll(2, ["MISMATCH"])) == [("comm_mismatch", "firing")]
    assert h.feed("ras", poll(3, ["MISMATCH"])) == []  # fires once
    assert h.feed("ras", poll(4, [])) == [("comm_mismatch", "resolved")]


def test_hang_when_op_counts_stop_advancing_with_all_ranks_running() -> None:
    h = Harness()
    base = record(status("nccl_2.28.9_json_status_healthy_2rank.json"))

    def at(count: int) -> RasRecord:
        comm = base.communicators[0].model_copy(update={"op_counts": {"AllReduce": count}})
        return base.model_copy(update={"communicators": [comm]})

    for count in (1, 2, 3):  # advancing: no hang
        assert "comm_hang" not in dict(h.feed("ras", at(count)))
    transitions = [h.feed("ras", at(3)) for _ in range(3)]
    assert transitions[-1] == [("comm_hang", "firing")] and transitions[0] == transitions[1] == []
    assert h.feed("ras", at(4)) == [("comm_hang", "resolved")]


def test_missing_rank_then_normal_end_raises_no_failure() -> None:
    h = Harness()
    missing = record(status("nccl_2.29.1_json_status_docs_sample_missing_rank.json"))
    assert sorted(h.feed("ras", missing)) == [("job_started", "firing"), ("rank_missing", "firing")]
    finalize = record(status("nccl_2.28.9_json_status_healthy_2rank.json"))
    assert h.feed("ras", finalize) == [("rank_missing", "resolved")]
    closed = RasEventRecord(job_id="slurm-1", endpoint="localhost:28028", event="ENDPOINT_CLOSED")
    assert sorted(h.feed("ras_event", closed)) == [("job_ended", "firing"), ("job_started", "resolved")]
    ended = next(a for a in h.engine.active.values() if a.rule == "job_ended")
    assert ended.severity == "info" and ended.evidence["normal"] is True


def test_peer_dead_then_close_is_not_a_normal_end_and_new_cycle_is_separate() -> None:
    h = Harness()
    h.feed("ras", record(status("nccl_2.28.9_json_status_healthy_2rank.json")))
    h.feed("ras_event", RasEventRecord(job_id="slurm-1", endpoint="e", event="PEER_DEAD", host="h", pid=1))
    h.feed("ras_event", RasEventRecord(job_id="slurm-1", endpoint="e", event="ENDPOINT_CLOSED"))
    job = h.state.jobs.jobs[("test", "slurm-1")]
    assert (job.state, job.normal_end) == ("ended", False)
    h.feed("ras", record(status("nccl_2.28.9_json_status_healthy_2rank.json")))  # same id, new cycle
    job = h.state.jobs.jobs[("test", "slurm-1")]
    assert (job.state, job.polls, job.failure_events) == ("running", 1, 0)


def test_replayed_history_refires_nothing() -> None:
    h = Harness()
    missing = record(status("nccl_2.29.1_json_status_docs_sample_missing_rank.json"))
    h.feed("ras", missing)
    replay = LiveState()
    replay.observe(envelope("ras", [missing], seq=1), h.now)
    replay.tick(h.now)
    assert AlertEngine(h.engine.active.values()).evaluate(h.rules, replay, h.now) == []


def test_job_identity_from_proc(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path / "proc", 28028, {"PATH": "/bin", "SLURM_JOB_ID": "777"})
    pid = listener_pid(proc, 28028)
    assert pid == 4242 and scheduler_job_id(proc, pid) == "slurm-777"
    assert listener_pid(proc, 28029) is None
    assert derived_job_id(["0x2", "0x1"]) == derived_job_id(["0x1", "0x2", "0x1"]) != derived_job_id(["0x3"])


def test_hang_names_the_ranks_that_never_entered_the_collective_within_two_polls(tmp_path: Path) -> None:
    """RAS op counts of a simulated job where GPU 1 of node002 never enters the next operation: its peers' counts
    are one ahead. A single such snapshot is a job in motion; the same lag twice with nothing advancing is a hang,
    named after two polls (10 s at a 5 s poll period), not three."""
    from ranksight.simulate.cluster import LiveJob, ras_status_json
    from ranksight.simulate.inspector import JobSpec

    job = LiveJob(JobSpec(nodes=4, gpus_per_node=4, steps=20), tmp_path)
    job.release(job.end_us)
    hung = record(parse_status_json(ras_status_json(job, set(), behind=frozenset({(2, 1)}))))
    lagging = {(r.rank, r.host, r.collective) for c in hung.communicators for r in c.lagging_ranks}
    assert lagging and {host for _, host, _ in lagging} == {"node002"}
    h = Harness()
    assert "comm_hang" not in dict(h.feed("ras", hung))  # one snapshot: ranks are often a step apart
    fired = [a for a in h.engine.active.values() if a.rule == "comm_hang"]
    assert fired == []
    h.feed("ras", hung)
    alerts = [a for a in h.engine.active.values() if a.rule == "comm_hang"]
    assert alerts and all(a.evidence["nodes"] == ["node002"] for a in alerts)
    assert all("never entered it" in a.summary and "node002" in a.summary for a in alerts)
    assert {a.comm for a in alerts} == {c.hash for c in hung.communicators if c.lagging_ranks}
