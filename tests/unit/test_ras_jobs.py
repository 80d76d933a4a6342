"""JobTracker + RAS rules, pure: persistence of MISMATCH, hangs, missing ranks, job cycles, normal end, replay."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import msgspec
from msgspec.structs import replace

from ranksight.agent.collectors.ras.jobid import derived_job_id, listener_pid, scheduler_job_id
from ranksight.agent.collectors.ras.parse_json import parse_status_json
from ranksight.aggregator.alerts import AlertEngine
from ranksight.aggregator.analysis.rules import default_rules
from ranksight.aggregator.state import LiveState
from ranksight.schemas.records import RasEventRecord, RasRecord
from ranksight.schemas.records.ras import RasStatus
from tests.conftest import FIXTURES
from tests.ras_support import envelope, fake_proc

NS = 1_000_000_000
RAS = FIXTURES / "ras"


def status(name: str) -> RasStatus:
    return parse_status_json((RAS / name).read_bytes())


def record(st: RasStatus, job: str = "slurm-1") -> RasRecord:
    return RasRecord(job_id=job, endpoint="localhost:28028", **msgspec.structs.asdict(st))


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

    def feed(
        self, kind: str, rec: object, polled_ago_s: float = 0.0, node: str = "node-a"
    ) -> list[tuple[str, str]]:
        self.now += 10 * NS
        self.seq += 1
        env = envelope(kind, [rec], node=node, seq=self.seq, ts=self.now - int(polled_ago_s * NS))  # type: ignore[list-item]
        self.state.observe(env, self.now)
        self.state.tick(self.now)
        transitions = self.engine.evaluate(self.rules, self.state, self.now)
        return [(a.rule, a.state) for a in transitions]


def test_mismatch_fires_only_when_it_persists_and_resolves() -> None:
    h = Harness()
    first = record(status("nccl_2.28.9_json_status_mismatch_4node_a10g.json"))

    def poll(n: int, errors: list[str]) -> RasRecord:  # op counts advance: a moving job, not a hang
        comm = replace(first.communicators[0], **{"op_counts": {"AllReduce": 101 + n}, "errors": errors})
        return replace(first, **{"communicators": [comm]})

    assert ("job_started", "firing") in h.feed("ras", poll(0, ["MISMATCH"]))
    assert h.feed("ras", poll(1, ["MISMATCH"])) == []
    assert h.feed("ras", poll(2, ["MISMATCH"])) == [("comm_mismatch", "firing")]
    assert h.feed("ras", poll(3, ["MISMATCH"])) == []  # fires once
    assert h.feed("ras", poll(4, [])) == [("comm_mismatch", "resolved")]


def _multi(counts: list[int | None], *, init: bool = False) -> RasRecord:
    """The 3-communicator job with these AllReduce totals (None: a poll without JSON detail)."""
    base = record(status("nccl_2.28.9_json_status_3comms_one_mismatch.json"))
    comms = [replace(c, **{"op_counts": {} if n is None else {"AllReduce": n}, "errors": [], "lagging_ranks": [],
                                  "rank_status": {"INIT" if init else "RUNNING": 2}})
             for c, n in zip(base.communicators, counts, strict=True)]  # fmt: skip
    return replace(base, **{"communicators": comms, "mismatches": [], "health": "ok"})


def test_no_hang_at_job_start_while_communicators_initialize_or_have_not_run() -> None:
    h = Harness()
    fired = [t for _ in range(60) for t in h.feed("ras", _multi([0, 0, 0], init=True))]  # 10 minutes of init
    fired += [t for _ in range(60) for t in h.feed("ras", _multi([0, 0, 0]))]  # running, no collective yet
    assert "comm_hang" not in {rule for rule, _ in fired}


def test_one_comm_idle_while_another_advances_is_not_a_hang() -> None:
    h = Harness()
    fired = [t for n in range(60) for t in h.feed("ras", _multi([5, 100 + n, 7]))]
    assert "comm_hang" not in {rule for rule, _ in fired}


def test_hang_is_one_alert_per_job_after_hang_after_s_of_frozen_counts() -> None:
    h = Harness()  # a poll every 10 s; hang_after_s defaults to 120
    for n in range(5):
        assert "comm_hang" not in dict(h.feed("ras", _multi([n, 10 + n, 0])))
    frozen = [h.feed("ras", _multi([4, 14, 0] if i % 3 == 0 else [None, None, None])) for i in range(13)]
    assert frozen[:11] == [[]] * 11 and frozen[11] == [("comm_hang", "firing")] and frozen[12] == []
    [alert] = [a for a in h.engine.active.values() if a.rule == "comm_hang"]
    assert alert.job == "slurm-1" and alert.comm is None
    assert sorted(alert.evidence["comms"].values()) == [4, 14]  # the communicators that had run, listed once
    assert h.feed("ras", _multi([5, 14, 0])) == [("comm_hang", "resolved")]


def test_no_hang_while_a_process_is_missing() -> None:
    h = Harness()
    missing = record(status("nccl_2.29.1_json_status_docs_sample_missing_rank.json"))
    comm = replace(missing.communicators[0], **{"op_counts": {"AllReduce": 9}})
    fired = [t for _ in range(30) for t in h.feed("ras", replace(missing, **{"communicators": [comm]}))]
    assert {rule for rule, _ in fired} == {"job_started", "rank_missing"}


def _node(h: Harness, node: str) -> None:
    from ranksight.schemas.records import HeartbeatRecord

    beat = HeartbeatRecord(hostname=node, version="test", started_ns=0, pid=1)
    h.state.observe(envelope("heartbeat", [beat], node=node, seq=1000), h.now)


def test_one_rank_missing_per_process_naming_its_node_and_the_lines() -> None:
    from ranksight.agent.collectors.ras.parse_text import parse_status_text

    h = Harness()
    _node(h, "10.0.0.3")
    text = parse_status_text((RAS / "upstream-server/ref_2.30.7_text_full.txt").read_bytes())
    fired = h.feed("ras", record(text))
    assert sorted(fired) == [("comm_error", "firing")] * 2 + [("job_started", "firing"), ("process_dead", "firing"),
                             ("rank_missing", "firing"), ("rank_missing", "firing")]  # fmt: skip
    missing = sorted(
        (a for a in h.engine.active.values() if a.rule == "rank_missing"), key=lambda a: a.summary
    )
    assert [(a.node, a.job, a.evidence["host"], a.evidence["pid"], a.evidence["gpus"], a.evidence["comms"])
            for a in missing] == [("10.0.0.3", "slurm-1", "10.0.0.3", 3001, [0], {"0x1111aaaa2222bbbb": [4]}),
                                  ("10.0.0.3", "slurm-1", "10.0.0.3", 3002, [1], {"0x1111aaaa2222bbbb": [5]})]  # fmt: skip
    assert missing[0].evidence["lines"] == [
        "INCOMPLETE", "  Missing communicator data from 1 job process", "  Process 3001 on node 10.0.0.3 managing GPU 0",
        "  Rank 4 -- GPU 0 managed by process 3001 on node 10.0.0.3"]  # fmt: skip
    [dead] = [a for a in h.engine.active.values() if a.rule == "process_dead"]
    assert (
        dead.node == "10.0.0.3" and "  Process 3002 on node 10.0.0.3 managing GPU 1" in dead.evidence["lines"]
    )
    assert h.feed("ras", record(text)) == []  # the same facts: nothing new


def test_unknown_ranks_make_one_alert_per_job_not_per_placeholder() -> None:
    h = Harness()
    edge = parse_status_json((RAS / "upstream-server/ref_2.30.7_json_edge.txt").read_bytes())
    fired = h.feed("ras", record(edge))
    assert sorted(fired) == [
        ("job_started", "firing"),
        ("rank_missing", "firing"),
        ("rank_missing", "firing"),
    ]
    [unnamed] = [
        a for a in h.engine.active.values() if a.rule == "rank_missing" and "does not name" in a.summary
    ]
    assert unnamed.evidence["comms"] == {"0x7777777777777777": list(range(8, 20))}


def test_peer_dead_alerts_at_once_and_is_confirmed_or_withdrawn_by_statuses() -> None:
    h = Harness()
    healthy = record(status("nccl_2.28.9_json_status_healthy_2rank.json"))
    h.feed("ras", healthy)
    dead = RasEventRecord(job_id="slurm-1", endpoint="e", event="PEER_DEAD", host="172.16.64.245", pid=1524345,
                          gpus=[1], time="2025-12-19 13:07:07")  # fmt: skip
    assert h.feed("ras_event", dead) == [("rank_missing", "firing")]
    [alert] = [a for a in h.engine.active.values() if a.rule == "rank_missing"]
    assert alert.evidence["state"] == "peer_dead"
    assert alert.evidence["lines"] == [
        "[2025-12-19 13:07:07] PEER_DEAD: Process 1524345 on node 172.16.64.245"
    ]
    missing = record(status("nccl_2.29.1_json_status_docs_sample_missing_rank.json"))
    assert h.feed("ras", missing) == []  # the status confirms: the same alert goes on
    assert h.feed("ras", healthy) == [("rank_missing", "resolved")]
    h.feed("ras_event", replace(dead, **{"host": None, "pid": None, "gpus": [], "addr": "10.9.9.9<1234>"}))
    assert h.feed("ras", healthy) == []  # one status that does not list it: still pending
    assert h.feed("ras", healthy) == [("rank_missing", "resolved")]  # a second one: withdrawn


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


def test_a_poll_taken_before_the_close_and_arriving_after_it_is_not_a_new_cycle() -> None:
    """The 32-node demo: one node's last poll (taken before its endpoint closed) was processed after another node's
    ENDPOINT_CLOSED. As a new cycle of the job it listed only the flagged communicators, so the ended job's straggler,
    no longer matched to any job, fired again without one."""
    h = Harness()
    h.feed("ras", record(status("nccl_2.28.9_json_status_healthy_2rank.json")))
    h.feed("ras_event", RasEventRecord(job_id="slurm-1", endpoint="e", event="ENDPOINT_CLOSED"))
    late = h.feed("ras", record(status("nccl_2.28.9_json_status_healthy_2rank.json")), polled_ago_s=11)
    job = h.state.jobs.jobs[("test", "slurm-1")]
    assert job.state == "ended" and late == []
    h.feed("ras", record(status("nccl_2.28.9_json_status_healthy_2rank.json")))  # polled after: a new cycle
    assert h.state.jobs.jobs[("test", "slurm-1")].state == "running"


def test_the_poller_s_status_after_another_node_s_close_is_the_ended_cycle_s() -> None:
    """Issue 47: one agent polls the job (the lease holder); another node's endpoint closes first and ends the job.
    The poller's next status, taken after that close by the wall clock but before its own endpoint closed, belongs to
    the ended cycle: a new cycle there fired ``job_started`` again and left the ended job's straggler without a job."""
    h = Harness()
    healthy = record(status("nccl_2.28.9_json_status_healthy_2rank.json"))
    h.feed("ras", healthy, node="poller")
    h.feed("ras_event", RasEventRecord(job_id="slurm-1", endpoint="e", event="ENDPOINT_CLOSED"), node="early")
    assert h.feed("ras", healthy, node="poller") == []  # stamped after the early close, before its own
    assert h.state.jobs.jobs[("test", "slurm-1")].state == "ended"
    h.feed(
        "ras_event", RasEventRecord(job_id="slurm-1", endpoint="e", event="ENDPOINT_CLOSED"), node="poller"
    )
    assert h.feed("ras", healthy, node="poller", polled_ago_s=15) == []  # queued before its own close
    assert ("job_started", "firing") in h.feed("ras", healthy, node="poller")  # after its close: a new cycle
    h.feed(
        "ras_event", RasEventRecord(job_id="slurm-1", endpoint="e", event="ENDPOINT_CLOSED"), node="poller"
    )
    assert ("job_started", "firing") in h.feed("ras", healthy, node="elsewhere")  # a node new to the job


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


def test_the_last_listener_is_looked_at_first_and_a_gone_one_is_searched_again(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path / "proc", 28028, {"SLURM_JOB_ID": "777"})
    (proc / "9999" / "fd").mkdir(parents=True)  # a forked child holding the same listening socket
    os.symlink("socket:[987654]", proc / "9999" / "fd" / "3")
    assert listener_pid(proc, 28028, hint=9999) == 9999  # found without reading every process's descriptors
    assert listener_pid(proc, 28028, hint=4242) == 4242
    shutil.rmtree(proc / "9999")  # the process is gone: the search finds the one left
    assert listener_pid(proc, 28028, hint=9999) == 4242


def test_text_polls_between_json_polls_keep_the_unlisted_communicators() -> None:
    from ranksight.agent.collectors.ras.parse_text import parse_status_text

    h = Harness()
    h.feed("ras", _multi([4, 14, 0]))
    text = parse_status_text((RAS / "upstream-server/ref_2.28.9_text_healthy.txt").read_bytes())
    assert text.all_communicators is False and text.communicators == []
    h.feed("ras", record(text))
    job = h.state.jobs.jobs[("test", "slurm-1")]
    assert sorted(c.op_total for c in job.comms.values()) == [0, 4, 14]  # absent from the text is not gone
    assert {c.errors == [] for c in job.comms.values()} == {True}


def test_a_late_poll_does_not_resolve_a_missing_process_nor_raise_a_hang() -> None:
    h = Harness()
    missing = record(status("nccl_2.29.1_json_status_docs_sample_missing_rank.json"))
    h.feed("ras", missing)
    h.now += 300 * NS  # no poll for five minutes (an overloaded poller): the job is stale
    h.state.tick(h.now)
    assert h.state.jobs.jobs[("test", "slurm-1")].state == "stale"
    assert (
        h.engine.evaluate(h.rules, h.state, h.now) == []
    )  # rank_missing stands; no comm_hang from old counts
    assert h.feed("ras", record(status("nccl_2.28.9_json_status_healthy_2rank.json"))) == [
        ("rank_missing", "resolved")
    ]


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
    [alert] = alerts  # one per job, listing the communicators
    assert alert.evidence["nodes"] == ["node002"]
    assert "never entered it" in alert.summary and "node002" in alert.summary
    assert set(alert.evidence["comms"]) == {c.hash for c in hung.communicators if c.lagging_ranks}


def test_text_polls_count_the_same_ranks_behind_and_see_progress_in_their_counts() -> None:
    """A real 2.28.9 job (``fixtures/ras/nccl-2.28.9-h100``): text polls between JSON polls name the ranks behind
    from their MISMATCH lines. The same lag on the next text poll is the hang's second look (no wait for the next JSON
    poll); counts past the last known ones are progress, so a moving job's transient mismatch never adds up."""
    from ranksight.agent.collectors.ras.parse_text import parse_status_text

    def text(moment: str) -> RasRecord:
        return record(parse_status_text((RAS / f"nccl-2.28.9-h100/4rank_{moment}_status.txt").read_bytes()))

    h = Harness()
    h.feed("ras", record(status("nccl-2.28.9-h100/4rank_healthy_status.json")))
    assert "comm_hang" not in dict(h.feed("ras", text("slow")))  # one op apart while a status is gathered
    job = h.state.jobs.jobs[("test", "slurm-1")]
    [comm] = job.comms.values()
    assert comm.lag_polls == 1
    moved_at = h.now + 10 * NS
    assert "comm_hang" not in dict(h.feed("ras", text("hang10")))  # counts moved on since: progress, now
    [comm] = job.comms.values()
    assert (comm.lag_polls, comm.op_changed_ns, comm.stalled_polls) == (1, moved_at, 0)
    assert ("comm_hang", "firing") in h.feed("ras", text("hang24"))  # nothing moved: the second look
    [alert] = [a for a in h.engine.active.values() if a.rule == "comm_hang"]
    assert {(r["rank"], r["pid"]) for r in alert.evidence["lagging_ranks"]} == {(2, 3030)}


def test_a_job_with_text_statuses_only_gets_its_hang_named_from_the_ranks_behind() -> None:
    """RCCL 2.28.3 and NCCL before 2.28.7 have no JSON status, so no op counts: the same ranks behind at the same
    counts in two text polls is the hang (the real 2.28.9 job's texts, read as such a release's), and a moving job's
    transient mismatch is not."""
    from ranksight.agent.collectors.ras.parse_text import parse_status_text

    def text(moment: str) -> RasRecord:
        return record(parse_status_text((RAS / f"nccl-2.28.9-h100/4rank_{moment}_status.txt").read_bytes()))

    h = Harness()
    for moment in ("healthy", "slow", "hang10"):  # the slow job's mismatch, then counts moved on: no hang yet
        assert "comm_hang" not in dict(h.feed("ras", text(moment))), moment
    assert ("comm_hang", "firing") in h.feed("ras", text("hang24"))
    [alert] = [a for a in h.engine.active.values() if a.rule == "comm_hang"]
    assert {(r["rank"], r["pid"]) for r in alert.evidence["lagging_ranks"]} == {(2, 3030)}
    assert alert.evidence["comms"] == {"0xcfff7cc6f2419b84": None}
    assert "the same ranks behind" in alert.evidence["lines"][0]
    assert ("comm_hang", "resolved") in h.feed("ras", text("dead4"))  # the killed rank: rank_missing speaks


def test_a_missing_process_alert_learns_its_rank_from_the_next_status() -> None:
    """Issue 47: the demo's rank_missing alert (fired on MONITOR's PEER_DEAD, which names no rank) showed rank ``-``
    although the next status lists the process with its rank; the alert keeps its fingerprint and gains the rank."""
    h = Harness()
    h.feed("ras", record(status("nccl_2.28.9_json_status_healthy_2rank.json")))
    dead = RasEventRecord(
        job_id="slurm-1", endpoint="e", event="PEER_DEAD", host="172.16.64.245", pid=1524345
    )
    h.feed("ras_event", dead)
    [alert] = [a for a in h.engine.active.values() if a.rule == "rank_missing"]
    assert alert.rank is None
    h.feed("ras", record(status("nccl_2.29.1_json_status_docs_sample_missing_rank.json")))
    [again] = [a for a in h.engine.active.values() if a.rule == "rank_missing" and a.entity != "unnamed"]
    assert again.fingerprint == alert.fingerprint and again.rank == 1


async def test_lifecycle_events_name_the_job_and_an_ended_job_s_communicators_are_ended() -> None:
    """Issue 47: ``incidents`` showed a raw epoch as ``job_started``'s entity and its summary an endpoint other than
    ``jobs`` showed; the communicators of an ended job stayed RUNNING."""
    import types

    from ranksight.aggregator.api.ras_queries import JobParams, comms

    h = Harness()
    h.feed("ras", record(status("nccl_2.28.9_json_status_healthy_2rank.json")))
    [started] = [a for a in h.engine.active.values() if a.rule == "job_started"]
    assert (started.entity, started.summary, started.job) == ("job slurm-1", "job slurm-1 started", "slurm-1")
    agg = types.SimpleNamespace(state=h.state)
    assert {r["status"] for r in (await comms(agg, JobParams())).rows} == {"RUNNING"}  # type: ignore[arg-type]
    h.feed("ras_event", RasEventRecord(job_id="slurm-1", endpoint="e", event="ENDPOINT_CLOSED"))
    rows = (await comms(agg, JobParams())).rows  # type: ignore[arg-type]
    assert {(r["status"], r["last_status"], r["job_state"]) for r in rows} == {("ENDED", "RUNNING", "ended")}
