"""``flight_recorder_hang`` over a job's hang report (fixtures from real gloo jobs): one alert per rank named, with
what the operator needs in its summary and evidence; it resolves once every rank of the job heartbeats again."""

from __future__ import annotations

from pathlib import Path

from ranksight.aggregator.analysis.forensics import FlightRecorderHangRule
from ranksight.aggregator.state import LiveState
from ranksight.aggregator.state.app import RankKey, RankState
from ranksight.aggregator.state.forensics import JobReport
from ranksight.core.flightrec import analyze, read_directory

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
