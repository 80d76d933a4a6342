"""``flight_recorder_hang`` over a job's hang report (fixtures from real gloo jobs): one alert per rank named, with
what the operator needs in its summary and evidence; it resolves once every rank of the job heartbeats again."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace

from ranksight.aggregator.analysis.forensics import FlightRecorderHangRule, merged_evidence
from ranksight.aggregator.component_settings import HangForensicsSettings
from ranksight.aggregator.hang_forensics import HangForensics, job_nodes, jobs_of, join_ras_comm
from ranksight.aggregator.models.hangs import HangFinder, _CommOp
from ranksight.aggregator.runtime import Aggregator
from ranksight.aggregator.state import LiveState
from ranksight.aggregator.state.app import RankKey, RankState
from ranksight.aggregator.state.forensics import JobReport
from ranksight.aggregator.state.jobs import CommState, JobState
from ranksight.core.flightrec import analyze, read_directory
from ranksight.schemas.alerts import Alert
from ranksight.settings import load_settings

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "flight_recorder"
NOW = 1_800_000_000_000_000_000


def state_with(scenario: str) -> LiveState:
    state = LiveState()
    read = read_directory(FIXTURES / scenario, 1 << 20, 100)
    report = analyze(read.dumps)
    for rank in range(3):
        st = RankState(cluster="c", node=f"n{rank}", agent="a", job="J", rank=rank, local_rank=0, world_size=3,
                       pid=100 + rank, first_seen_ns=NOW - 10**10, last_seen_ns=NOW - 10**10,
                       last_heartbeat_ns=NOW - 10**10)  # fmt: skip
        state.app.ranks[RankKey("c", "J", rank, None, None)] = st
    state.forensics.put(JobReport("c", "J", NOW, report, {r: f"n{r}" for r in range(3)}))
    return state


def test_one_alert_per_named_rank_with_its_frame() -> None:
    (cond,) = FlightRecorderHangRule().evaluate(state_with("python_stuck"), NOW)
    assert (cond.rule, cond.severity, cond.job, cond.rank, cond.node) == ("flight_recorder_hang", "critical", "J", 2,
                                                                          "n2")  # fmt: skip
    assert cond.summary.startswith("job J: rank 2 (")
    assert "never entered gloo:all_reduce seq 4 of group 0:default_pg" in cond.summary
    assert "; at next_batch at " in cond.summary and "peers waited 3s" in cond.summary
    ev = cond.evidence
    assert (
        ev["where"].startswith("next_batch at ") and isinstance(ev["pid"], int) and ev["missing_ranks"] == [2]
    )


def test_mismatch_and_killed_rank_summaries() -> None:
    (cond,) = FlightRecorderHangRule().evaluate(state_with("mismatch"), NOW)
    assert cond.rank == 1 and "called another op than gloo:all_reduce at seq 4" in cond.summary
    assert cond.evidence["verdicts"]["1"]["verdict"] == "COLLECTIVE_TYPE_MISMATCH"
    (cond,) = FlightRecorderHangRule().evaluate(state_with("killed"), NOW)
    assert cond.rank == 2 and "rank 2 gave no dump (dead or unreachable)" in cond.summary


def test_a_subgroup_hang_alerts_once_for_its_cause_never_for_the_rank_it_holds_up() -> None:
    # rank 1 never entered the subgroup's broadcast (seq 4) nor, after it, the default group's all_reduce (seq 5);
    # rank 0 is missing from that all_reduce only because it waits in the broadcast
    (cond,) = FlightRecorderHangRule().evaluate(state_with("subgroup"), NOW)
    assert (cond.rank, cond.evidence["process_group"], cond.evidence["seq"]) == (1, "1", 4)
    assert "never entered gloo:broadcast seq 4 of group 1" in cond.summary
    assert "at wait_for_results at " in cond.summary


def test_a_hang_of_a_huge_world_stays_a_few_small_alerts() -> None:
    """A world size of 100,000 (a job's claim, or a job beyond the nodes the aggregator asks): the ranks without a dump
    are counted, not each alerted with a copy of every list."""
    state = state_with("killed")
    read = read_directory(FIXTURES / "killed", 1 << 20, 100)
    report = JobReport("c", "J", NOW, analyze(read.dumps, world_size=100_000), {}, max_named=10)
    state.forensics.put(report)
    conditions = list(FlightRecorderHangRule().evaluate(state, NOW))
    assert [c.rank for c in conditions] == [2, 3, 4, 5, 6, 7, 8, 9, 10, 11]
    ev = conditions[0].evidence
    assert ev["missing_ranks"] == list(range(2, 12)) and ev["totals"]["missing_ranks"] == 99_998
    assert ev["ranks_missing_dump"] == list(range(2, 12)) and ev["ranks_not_named"] == 99_998 - 10
    assert max(len(json.dumps(c.evidence)) for c in conditions) < 4096
    merged = merged_evidence(report)
    assert len(merged["ranks"]) == 10 and len(json.dumps(merged)) < 16384


def test_reports_are_kept_as_long_as_the_setting_says(tmp_path: Path) -> None:
    agg = Aggregator(load_settings(None, state_dir=tmp_path, aggregator={"http": {"port": 0},
                                                                       "hang_forensics": {"retain_s": 5}}))  # fmt: skip
    agg.state.forensics.put(JobReport("c", "J", NOW, analyze([]), {}))
    agg.state.tick(NOW + 4 * 10**9)
    assert agg.state.forensics.reports
    agg.state.tick(NOW + 6 * 10**9)
    assert not agg.state.forensics.reports


def test_resolves_when_the_job_moves_on() -> None:
    state = state_with("stopped")
    assert list(FlightRecorderHangRule().evaluate(state, NOW))
    for st in state.app.ranks.values():
        st.last_heartbeat_ns = NOW + 1
    assert not list(FlightRecorderHangRule().evaluate(state, NOW + 2))


def test_a_healthy_report_raises_nothing_and_old_reports_age_out() -> None:
    assert not list(FlightRecorderHangRule().evaluate(state_with("healthy"), NOW))
    state = state_with("stopped")
    state.tick(NOW + 3600 * 10**9)  # past retain_s
    assert state.forensics.reports == {}


class FakeStore:
    def __init__(self) -> None:
        self.updates: list[tuple[str, str, dict[str, object]]] = []

    def add_alert_evidence(self, fingerprint: str, started_at: str, evidence: dict[str, object]) -> None:
        self.updates.append((fingerprint, started_at, evidence))

    async def call(self, fn, *args):  # type: ignore[no-untyped-def]
        fn(*args)


def hang_alert(rule: str, job: str, cluster: str = "c", **evidence: object) -> Alert:
    return Alert(rule=rule, severity="critical", fingerprint=f"fp-{rule}-{job}", state="firing", cluster=cluster,
                 job=job, summary=f"job {job}: no collective advanced", evidence=dict(evidence),
                 started_at="2027-01-15T08:00:00Z", updated_at="2027-01-15T08:00:00Z")  # fmt: skip


def fake_aggregator(state: LiveState, alerts: list[Alert]) -> SimpleNamespace:
    return SimpleNamespace(analysis_state=state, state=state, store=FakeStore(),
                           engine=SimpleNamespace(active={a.fingerprint: a for a in alerts}))  # fmt: skip


async def test_a_ras_hang_alert_of_the_same_hang_carries_the_report_one_alert_not_two() -> None:
    state = state_with("python_stuck")
    report = state.forensics.reports[("c", "J")]
    report.processes = {2: ("node7", 4121)}
    other = hang_alert("comm_hang", "RAS-1", cluster="elsewhere")
    ras = hang_alert("comm_hang", "RAS-2", lagging_ranks=[{"host": "node7", "pid": 4121, "rank": 2}])
    agg = fake_aggregator(state, [other, ras])
    await HangForensics(HangForensicsSettings()).merge(agg, report, [other, ras])  # type: ignore[arg-type]
    assert report.merged_into == {"rule": "comm_hang", "fingerprint": ras.fingerprint}
    fr = agg.engine.active[ras.fingerprint].evidence["flight_recorder"]
    (named,) = fr["ranks"]
    assert (named["rank"], named["kind"], named["collective"], named["seq"]) == (2, "collective_hang",
                                                                                 "gloo:all_reduce", 4)  # fmt: skip
    assert named["where"].startswith("next_batch at ") and named["process_group"] == "0:default_pg"
    assert "corroboration" in named and named["summary"].startswith("job J: rank 2")
    assert "flight_recorder" not in other.evidence
    ((fingerprint, _, stored),) = agg.store.updates
    assert fingerprint == ras.fingerprint and stored == {"flight_recorder": fr}
    assert not list(FlightRecorderHangRule().evaluate(state, NOW))  # the RAS alert is the hang's one alert


async def test_without_a_ras_or_inspector_hang_the_report_alerts_on_its_own() -> None:
    state = state_with("python_stuck")
    report = state.forensics.reports[("c", "J")]
    unrelated = hang_alert("collective_hang", "K", lagging_ranks=[{"hostname": "other", "pid": 1}])
    overdue = hang_alert("rank_heartbeat_overdue", "J")  # the job's, but not a RAS / Inspector hang alert
    alerts = [unrelated, overdue]
    agg = fake_aggregator(state, alerts)
    await HangForensics(HangForensicsSettings()).merge(agg, report, alerts)  # type: ignore[arg-type]
    assert report.merged_into is None
    (cond,) = FlightRecorderHangRule().evaluate(state, NOW)
    assert cond.rule == "flight_recorder_hang" and cond.evidence["ras_comm"] is None


def test_a_process_group_joins_its_communicator_by_its_processes_else_by_size() -> None:
    state = LiveState()
    procs = {0: ("h0", 10), 1: ("h1", 11), 2: ("h2", 12)}
    finder = state.stragglers.hang_finders["c"] = HangFinder(quiet_s=5)
    finder.comm_ops[("0xabc", "AllReduce")] = _CommOp("0xabc", 3, {r: (5, p) for r, p in procs.items()})
    finder.comm_ops[("0xdef", "Broadcast")] = _CommOp("0xdef", 2, {0: (5, procs[0]), 1: (5, procs[1])})
    assert join_ras_comm(state, "c", "J", [0, 1, 2], procs) == {"hash": "0xabc", "joined_by": "processes",
                                                                 "candidates": ["0xabc"]}  # fmt: skip
    assert join_ras_comm(state, "c", "J", [0, 1], procs)["hash"] == "0xdef"  # type: ignore[index]
    state = LiveState()  # RAS only: the job's communicators of the group's size
    job = state.jobs.jobs[("c", "J")] = JobState(
        cluster="c", job_id="J", endpoint="e", node="n", first_seen_ns=0
    )
    for comm_id, size in (("0x1", 3), ("0x2", 2), ("0x3", 2)):
        job.comms[comm_id] = CommState(comm_id, size, "RUNNING", [], [], {}, None, 0)
    assert join_ras_comm(state, "c", "J", [0, 1, 2], procs) == {"hash": "0x1", "joined_by": "size",
                                                                 "candidates": ["0x1"]}  # fmt: skip
    assert join_ras_comm(state, "c", "J", [0, 1], procs) == {"hash": None, "joined_by": "size",
                                                              "candidates": ["0x2", "0x3"]}  # fmt: skip
    assert join_ras_comm(state, "c", "other-job", [0, 1, 2], procs) is None


def test_nodes_of_a_job_without_the_client_come_from_ras_and_inspector() -> None:
    state = LiveState()
    assert job_nodes(state, "c", "J") == set()
    job = state.jobs.jobs[("c", "J")] = JobState(
        cluster="c", job_id="J", endpoint="e", node="n0", first_seen_ns=0
    )
    job.comms["0x00abc"] = CommState("0x00abc", 2, "RUNNING", [], [], {}, None, 0)
    finder = state.stragglers.hang_finders["c"] = HangFinder(quiet_s=5)
    finder.comm_ops[("0xabc", "AllReduce")] = _CommOp("0xabc", 2, {0: (5, ("h1", 11)), 1: (5, ("h2", 12))})
    finder.comm_ops[("0xfff", "AllReduce")] = _CommOp("0xfff", 1, {0: (5, ("h9", 19))})  # another job's
    finder.proc_seen = {("h1", 11): (0, "n1"), ("h2", 12): (0, "n2"), ("h9", 19): (0, "n9")}
    assert job_nodes(state, "c", "J") == {"n0", "n1", "n2"}
    state.app.ranks[RankKey("c", "J", 0, None, None)] = RankState(
        cluster="c", node="n5", agent="a", job="J", rank=0, local_rank=0, world_size=2, pid=1, first_seen_ns=0,
        last_seen_ns=0)  # fmt: skip
    assert job_nodes(state, "c", "J") == {"n0", "n1", "n2", "n5"}


def test_a_collective_hang_alert_naming_no_job_dumps_the_jobs_of_its_processes() -> None:
    state = state_with("stopped")  # ranks on n0..n2, pids 100..102, job J
    silent = hang_alert("collective_hang", "", lagging_ranks=[{"hostname": "n2", "pid": 102}])
    assert jobs_of(state, silent.model_copy(update={"job": None})) == {"J"}
    assert jobs_of(state, hang_alert("comm_hang", "RAS-7")) == {"RAS-7"}
    elsewhere = hang_alert("collective_hang", "", lagging_ranks=[{"hostname": "n2", "pid": 999}])
    assert jobs_of(state, elsewhere.model_copy(update={"job": None})) == set()


async def test_a_ras_hang_alert_firing_after_the_report_takes_it_in() -> None:
    state = state_with("stopped")
    report = state.forensics.reports[("c", "J")]
    assert list(FlightRecorderHangRule().evaluate(state, NOW))  # alone, the report alerts
    ras = hang_alert("comm_hang", "J")
    agg = fake_aggregator(state, [ras])
    agg.nc = object()
    forensics = HangForensics(HangForensicsSettings(rules=[]))  # no new dump: only the merge
    forensics.submit(agg, [ras])  # type: ignore[arg-type]
    await asyncio.gather(*forensics._merges)
    assert report.merged_into == {"rule": "comm_hang", "fingerprint": ras.fingerprint}
    assert ras.evidence["flight_recorder"]["ranks"][0]["rank"] == 2
    assert not list(FlightRecorderHangRule().evaluate(state, NOW))
