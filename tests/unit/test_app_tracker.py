"""Per-rank liveness and section timeouts with a fake clock: facts in, alerts fire and resolve (pure, no I/O)."""

from __future__ import annotations

from typing import Any

from ranksight.aggregator.alerts import AlertEngine
from ranksight.aggregator.analysis.rules import default_rules
from ranksight.aggregator.state import NS, LiveState
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import AppRecord
from ranksight.schemas.wire import event_type

T0 = 1_700_000_000 * NS


class Job:
    """Feeds app records for one rank into live state at chosen receipt times, and evaluates the real rules."""

    def __init__(self) -> None:
        self.state = LiveState()
        self.engine = AlertEngine()
        self.rules = default_rules()
        self.seq = 0

    def send(self, at_s: float, event: str, rank: int | None = 0, pid: int = 100, **fields: Any) -> None:
        self.seq += 1
        rec = AppRecord(event=event, rank=rank, job_id="j1", pid=pid, n=self.seq, client_ts=T0, **fields)  # type: ignore[arg-type]
        env = Envelope(type=event_type("app"), cluster="c", node="node-a", agent="ag1", seq=self.seq, ts=T0,
                       ttl=15, records=[rec])  # fmt: skip
        self.state.observe(env, T0 + int(at_s * NS))

    def at(self, t_s: float) -> list[tuple[str, str, str]]:
        now = T0 + int(t_s * NS)
        self.state.tick(now)
        return [(a.rule, a.state, a.summary) for a in self.engine.evaluate(self.rules, self.state, now)]


def test_heartbeat_overdue_fires_and_resolves_on_recovery() -> None:
    job = Job()
    job.send(0, "heartbeat", step=1, timeout_s=10)
    assert job.at(9) == []
    fired = job.at(12)
    assert fired == [("rank_heartbeat_overdue", "firing", "rank 0 of job j1 on node-a: no heartbeat for 12s "
                      "(timeout 10s)")]  # fmt: skip
    assert job.at(20) == []  # still firing: no new transition
    job.send(21, "heartbeat", step=2, timeout_s=10)
    assert [(r, s) for r, s, _ in job.at(22)] == [("rank_heartbeat_overdue", "resolved")]


def test_initial_timeout_applies_until_the_first_heartbeat() -> None:
    job = Job()
    job.send(0, "start", timeout_s=10, initial_timeout_s=100)
    assert job.at(50) == []  # model loading: inside the initial timeout
    fired = job.at(101)
    assert fired and "no first heartbeat for 101s (timeout 100s)" in fired[0][2]
    job.send(102, "heartbeat", timeout_s=10)
    assert [s for _, s, _ in job.at(103)] == ["resolved"]
    assert [s for _, s, _ in job.at(113)] == ["firing"]  # now the subsequent timeout


def test_ranks_without_start_or_heartbeat_are_not_expected_to_beat() -> None:
    job = Job()
    job.send(0, "marker", text="epoch 1")
    assert job.at(10_000) == []


def test_section_overdue_names_the_section_and_how_long_it_is_open() -> None:
    job = Job()
    job.send(0, "heartbeat", timeout_s=1000)
    job.send(1, "section_open", section="checkpoint_save", section_id=7, timeout_s=60)
    assert job.at(60) == []
    ((rule, state, summary),) = job.at(91)
    assert (rule, state) == ("rank_section_overdue", "firing")
    assert summary == "rank 0 of job j1 on node-a: section 'checkpoint_save' open for 90s (timeout 60s)"
    job.send(95, "section_close", section="checkpoint_save", section_id=7, duration_s=94.0)
    assert [(r, s) for r, s, _ in job.at(96)] == [("rank_section_overdue", "resolved")]


def test_a_lost_section_close_is_reconciled_by_the_next_heartbeat() -> None:
    job = Job()
    job.send(0, "section_open", section="forward", section_id=1, timeout_s=5)
    assert [s for _, s, _ in job.at(6)] == ["firing"]
    job.send(7, "heartbeat", timeout_s=100, open_sections=[])
    assert [s for _, s, _ in job.at(8)] == ["resolved"]


def test_a_job_that_ends_normally_raises_nothing() -> None:
    job = Job()
    for rank in range(4):
        job.send(0, "start", rank=rank, pid=100 + rank, timeout_s=10, initial_timeout_s=10)
        job.send(
            1, "section_open", rank=rank, pid=100 + rank, section="checkpoint_save", section_id=1, timeout_s=5
        )
        job.send(2, "heartbeat", rank=rank, pid=100 + rank, timeout_s=10, open_sections=[1])
        job.send(3, "end", rank=rank, pid=100 + rank)
    assert job.at(1000) == []
    assert job.state.app.ranks == {}


def test_a_restarted_process_replaces_the_old_cycle() -> None:
    job = Job()
    job.send(0, "heartbeat", pid=100, timeout_s=10)
    assert [s for _, s, _ in job.at(11)] == ["firing"]
    job.send(12, "heartbeat", pid=200, timeout_s=10)  # same rank, new pid: the old process is not judged
    assert [s for _, s, _ in job.at(13)] == ["resolved"]
    job.send(14, "end", pid=100)  # a late end of the old process does not forget the new one
    assert len(job.state.app.ranks) == 1


def test_step_time_is_kept_per_rank() -> None:
    job = Job()
    job.send(0, "heartbeat", rank=3, step=10, step_time_s=0.25, timeout_s=10)
    (st,) = job.state.app.ranks.values()
    assert (st.rank, st.step, st.step_time_s) == (3, 10, 0.25)


def test_ranks_without_a_rank_number_are_told_apart_by_pid() -> None:
    job = Job()
    job.send(0, "heartbeat", rank=None, pid=1, timeout_s=10)
    job.send(0, "heartbeat", rank=None, pid=2, timeout_s=10)
    fired = job.at(11)
    assert sorted(s for _, _, s in fired) == [
        "pid 1 of job j1 on node-a: no heartbeat for 11s (timeout 10s)",
        "pid 2 of job j1 on node-a: no heartbeat for 11s (timeout 10s)",
    ]
