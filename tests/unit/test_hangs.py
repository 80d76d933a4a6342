"""Hang localization from Inspector silence: the finder on simulated jobs (a hung process, healthy ends, a whole-job
pause, both capture models) and the ``collective_hang`` rule through the live tracker and alert engine."""

from __future__ import annotations

import dataclasses

from msgspec.structs import replace

from ranksight.aggregator.alerts import AlertEngine
from ranksight.aggregator.analysis.rules import default_rules
from ranksight.aggregator.models.hangs import HangFinder
from ranksight.aggregator.models.straggler.settings import StragglerSettings
from ranksight.aggregator.state import NS, LiveState
from ranksight.aggregator.state.jobs import CommState, JobState
from ranksight.formats.inspector import parse_op
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import (
    CollectorHealth,
    HeartbeatRecord,
    InspectorRecord,
    InspectorSummaryRecord,
)
from ranksight.schemas.wire import event_type
from ranksight.simulate.inspector import Fault, JobSpec, comms_of, simulate_timed, summarize
from ranksight.simulate.scenarios import hang, healthy, noisy_healthy, truth
from tests.previous_summaries import whole_windows

HUNG = JobSpec(
    nodes=4, gpus_per_node=4, layout="moe", steps=100, faults=[Fault("hang", node=2, gpu=1, start_step=40)]
)


def records(spec: JobSpec) -> list[InspectorRecord]:
    timed = simulate_timed(spec)
    return sorted(
        (parse_op(line) for lines in timed.values() for _, line in lines), key=lambda r: r.dump_ts_us
    )


def replay(finder: HangFinder, recs: list[InspectorRecord], every_s: float = 1.0) -> set[tuple[str, int]]:
    """Feed records at their dump time (as receipt time), asking the finder every ``every_s`` and for 30 s of silence
    after the last; returns every process it named."""
    named: set[tuple[str, int]] = set()
    every = int(every_s * NS)
    next_ask = recs[0].dump_ts_us * 1000 + every
    for rec in recs:
        while rec.dump_ts_us * 1000 >= next_ask:
            named |= {(r.hostname, r.pid) for h in finder.hangs(next_ask) for r in h.lagging}
            next_ask += every
        finder.add(rec, rec.dump_ts_us * 1000, rec.hostname)
    for _ in range(int(30 / every_s)):
        named |= {(r.hostname, r.pid) for h in finder.hangs(next_ask) for r in h.lagging}
        next_ask += every
    return named


def replay_summaries(
    finder: HangFinder, published: list[tuple[int, InspectorSummaryRecord]]
) -> tuple[set[tuple[str, int]], int]:
    """Feed the agents' summaries when they are published (those of one instant in reverse order: the hung process's
    last ones arrive after its peers'), asking the finder every second; every process it named, and the receipt time
    of the last summary (ns)."""
    by_time: dict[int, list[InspectorSummaryRecord]] = {}
    for at_us, summary in published:
        by_time.setdefault(at_us, []).append(summary)
    named: set[tuple[str, int]] = set()
    ask = min(by_time) * 1000
    for at_us, batch in sorted(by_time.items()):
        while ask < at_us * 1000:
            named |= {(r.hostname, r.pid) for h in finder.hangs(ask) for r in h.lagging}
            ask += NS
        for summary in reversed(batch):
            finder.add_summary(summary, at_us * 1000, summary.hostname)
    last_ns = max(by_time) * 1000
    for _ in range(30):
        named |= {(r.hostname, r.pid) for h in finder.hangs(ask) for r in h.lagging}
        ask += NS
    return named, last_ns


def test_from_summary_parts_a_hang_is_named_about_as_soon_as_from_raw_records() -> None:
    recs = records(HUNG)
    published = summarize(recs, publish_s=1.0)
    named, last_ns = replay_summaries(HangFinder(3.0), published)
    assert named == {("node002", HUNG.pid(2, 1))}
    assert replay_summaries(HangFinder(3.0), summarize(records(healthy("ring", 1))))[0] == set()
    assert last_ns - recs[-1].dump_ts_us * 1000 <= NS  # the last records go out within a part's period
    finder = HangFinder(3.0)
    replay_summaries(finder, published)
    # raw records: quiet_s after the last one; parts: at most two periods later (the wait for the part, the next one)
    hangs = finder.hangs(recs[-1].dump_ts_us * 1000 + 5 * NS)
    assert {(r.hostname, r.pid) for h in hangs for r in h.lagging} == {("node002", HUNG.pid(2, 1))}
    assert min(h.stalled_s for h in hangs) >= 4.0  # quiet_s plus a period: the next part may come until then


def test_from_an_older_agent_s_whole_windows_a_hang_is_named_and_a_healthy_run_or_end_never() -> None:
    named, _ = replay_summaries(HangFinder(3.0), whole_windows(records(HUNG)))
    assert named == {("node002", HUNG.pid(2, 1))}
    # between two windows' summaries nothing advances for 5 s, more than quiet_s: no hang for it
    assert replay_summaries(HangFinder(3.0), whole_windows(records(healthy("ring", 1))))[0] == set()
    finder = HangFinder(3.0)
    _, last_ns = replay_summaries(finder, whole_windows(records(HUNG)))
    assert (
        finder.hangs(last_ns + 7 * NS) == []
    )  # quiet for less than quiet_s plus one window: the next may come
    hangs = finder.hangs(last_ns + 8 * NS)
    assert {(r.hostname, r.pid) for h in hangs for r in h.lagging} == {("node002", HUNG.pid(2, 1))}


def test_ring_hang_names_the_hung_process_with_its_communicators_after_quiet_s() -> None:
    recs = records(HUNG)
    finder = HangFinder(quiet_s=3.0)
    for rec in recs:
        finder.add(rec, rec.dump_ts_us * 1000, rec.hostname)
    last_ns = recs[-1].dump_ts_us * 1000
    assert finder.hangs(last_ns + 2 * NS) == []  # not yet quiet for 3 s: records may still be on their way
    hangs = finder.hangs(last_ns + 4 * NS)
    assert {(r.hostname, r.pid) for h in hangs for r in h.lagging} == {("node002", HUNG.pid(2, 1))}
    comms = {h.comm for h in hangs}
    assert comms <= {"tp-n2", "ep-b1-g1", "edp-s0-g1", "dp-g1"} and comms  # only communicators it belongs to
    for h in hangs:
        assert all(r.coll_sn < h.peers_sn for r in h.lagging) and h.stalled_s >= 3.0
        assert h.collective in ("AllReduce", "AllGather", "ReduceScatter")


def test_scenario_hangs_are_named_in_ring() -> None:
    for seed in (1, 2, 3, 4, 5):
        ring = hang("ring", seed)
        [hung] = truth(ring)
        named = replay(HangFinder(3.0), records(ring))
        # seed 4: the process's last dump tick came after its last completed collective, so its last coll_sn equals
        # its peers' and nothing tells it apart (RAS does): nothing is named, never a wrong rank
        assert named == (set() if seed == 4 else {(hung.hostname, hung.pid)})


def sampled(spec: JobSpec, dump_ms: float) -> JobSpec:
    return dataclasses.replace(spec, capture="sampled", dump_interval_ms=dump_ms)


def test_sampled_hangs_are_named_from_the_peers_that_caught_up_never_a_wrong_rank() -> None:
    """The sampled plugin writes a communicator's slot only when an op completed since the last tick: the ranks that
    live on write their last op once more, the hung one lost what it completed after its last tick."""
    named_right = 0
    for dump_ms in (1000.0, 2000.0):
        for seed in range(1, 9):
            spec = sampled(hang("sampled", seed), dump_ms)
            [hung] = truth(spec)
            named = replay(HangFinder(3.0), records(spec))
            assert named <= {(hung.hostname, hung.pid)}
            named_right += bool(named)
    # unnamed: the last tick came after all but the last of its ops, as a process exiting at a job's end loses
    assert named_right >= 14


def test_a_sampled_hang_names_the_communicators_and_what_the_rank_last_reported() -> None:
    spec = sampled(HUNG, 1000.0)
    recs = records(spec)
    finder = HangFinder(3.0)
    for rec in recs:
        finder.add(rec, rec.dump_ts_us * 1000, rec.hostname)
    last_ns = recs[-1].dump_ts_us * 1000
    assert finder.hangs(last_ns + 2 * NS) == []  # not quiet yet
    hangs = finder.hangs(last_ns + 4 * NS)
    assert {(r.hostname, r.pid) for h in hangs for r in h.lagging} == {("node002", HUNG.pid(2, 1))}
    assert {h.comm_id for h in hangs} <= {c.comm_id for c in comms_of(HUNG) if (2, 1) in c.members}
    for h in hangs:
        [rank] = h.lagging
        assert rank.collective == h.collective and rank.coll_sn <= h.peers_sn - 2


def test_a_repeated_sample_is_no_progress() -> None:
    """Should a plugin write the waiting ranks' slots at every tick, their last op again and again, the communicator
    is still quiet and the hung process still the one behind."""
    spec = sampled(HUNG, 1000.0)
    recs = records(spec)
    latest = {(r.hostname, r.pid, r.comm_id): r for r in recs}
    last_us = recs[-1].dump_ts_us
    again = sorted(
        (replace(r, dump_ts_us=last_us + k * 1_000_000)
         for k in range(1, 20) for r in latest.values() if r.hostname != "node002" or r.pid != HUNG.pid(2, 1)),
        key=lambda r: r.dump_ts_us,
    )  # fmt: skip
    assert replay(HangFinder(3.0), recs + again) == {("node002", HUNG.pid(2, 1))}


def test_no_sampled_hang_at_job_ends_short_or_long_steps() -> None:
    """At a job's end each process loses what it completed after its last tick: most are behind somewhere (short
    steps), or a few are behind by one op (steps about a dump interval), as a hung process would be."""
    for seed in (1, 2, 3):
        for dump_ms in (1000.0, 2000.0):
            assert replay(HangFinder(3.0), records(sampled(noisy_healthy("sampled", seed), dump_ms))) == set()
            long_steps = JobSpec(
                nodes=4, gpus_per_node=4, layout="moe", steps=40, compute_ms=800.0, seed=seed
            )
            assert replay(HangFinder(3.0), records(sampled(long_steps, dump_ms))) == set()


def test_a_sampled_hang_is_named_from_summary_parts_and_whole_windows() -> None:
    recs = records(sampled(HUNG, 1000.0))
    hung = {("node002", HUNG.pid(2, 1))}
    assert replay_summaries(HangFinder(3.0), summarize(recs, publish_s=1.0))[0] == hung
    assert replay_summaries(HangFinder(3.0), whole_windows(recs))[0] == hung
    healthy_end = records(sampled(healthy("sampled", 1), 1000.0))
    assert replay_summaries(HangFinder(3.0), summarize(healthy_end, publish_s=1.0))[0] == set()


def test_no_hang_at_a_healthy_job_end_in_either_capture_model() -> None:
    for capture in ("ring", "sampled"):
        for seed in (1, 2):
            assert replay(HangFinder(3.0), records(healthy(capture, seed))) == set()  # type: ignore[arg-type]


def test_a_whole_job_pausing_with_equal_last_coll_sn_is_not_a_hang() -> None:
    recs = records(JobSpec(nodes=2, gpus_per_node=4, steps=120))
    finder = HangFinder(quiet_s=3.0)
    before = [r for r in recs if r.sn <= 60]  # every rank finished step 60, then the job checkpoints
    for rec in before:
        finder.add(rec, rec.dump_ts_us * 1000, rec.hostname)
    pause_end = before[-1].dump_ts_us * 1000 + 60 * NS
    assert finder.hangs(pause_end) == []
    for rec in (r for r in recs if r.sn > 60):
        finder.add(rec, pause_end + (rec.dump_ts_us - before[-1].dump_ts_us) * 1000, rec.hostname)
    assert finder.hangs(pause_end + 120 * NS) == []


def test_a_hung_collective_resolves_when_the_lagging_process_reports_again() -> None:
    recs = records(HUNG)
    finder = HangFinder(quiet_s=3.0)
    for rec in recs:
        finder.add(rec, rec.dump_ts_us * 1000, rec.hostname)
    now = recs[-1].dump_ts_us * 1000 + 5 * NS
    [lagging] = {(r.hostname, r.pid) for h in finder.hangs(now) for r in h.lagging}
    alive = next(r for r in recs if (r.hostname, r.pid) == lagging)
    finder.add(alive, now, alive.hostname)  # an old record delivered again says nothing new
    assert finder.hangs(now + NS)
    # the process writes again (it was only slow to dump): it is not silent
    finder.add(replace(alive, **{"dump_ts_us": now // 1000}), now, alive.hostname)
    assert finder.hangs(now + NS) == []


def envelope(node: str, seq: int, recs: list[InspectorRecord]) -> Envelope:
    return Envelope(type=event_type("inspector"), cluster="c", node=node, agent="a" + node, seq=seq,
                                    ts=0, ttl=30.0, records=recs)  # fmt: skip


def feed(state: LiveState, recs: list[InspectorRecord], t0: int) -> int:
    """Deliver the records at their dump-time offsets from ``t0``; returns the receipt time of the last."""
    first = recs[0].dump_ts_us
    for seq, rec in enumerate(recs, start=1):
        state.observe(envelope(rec.hostname, seq, [rec]), t0 + (rec.dump_ts_us - first) * 1000)
    return t0 + (recs[-1].dump_ts_us - first) * 1000


def test_collective_hang_rule_fires_one_alert_naming_ranks_and_node_then_resolves_after_retention() -> None:
    state = LiveState()
    state.stragglers.configure(StragglerSettings(hang_quiet_s=3.0, hang_retain_s=60.0, evaluate_every_s=1.0))
    engine, rules = AlertEngine(), default_rules()
    last = feed(state, records(HUNG), 1_000 * NS)
    fired = []
    for s in range(0, 8):  # the aggregator ticks; the hang is visible once the last records are in
        state.tick(last + s * NS)
        fired += [a for a in engine.evaluate(rules, state, last + s * NS) if a.rule == "collective_hang"]
    [alert] = fired
    assert alert.state == "firing" and alert.severity == "critical" and alert.node == "node002"
    assert {(r["hostname"], r["pid"]) for r in alert.evidence["lagging_ranks"]} == {
        ("node002", HUNG.pid(2, 1))
    }
    assert alert.evidence["nodes"] == ["node002"] and alert.evidence["comm"] and alert.evidence["collective"]
    assert "node002 pid" in alert.summary and "went silent behind its peers" in alert.summary
    later = last + 70 * NS  # silent past hang_retain_s: taken as a job that ended or was killed
    state.tick(later)
    [resolved] = [a for a in engine.evaluate(rules, state, later) if a.rule == "collective_hang"]
    assert resolved.state == "resolved" and resolved.fingerprint == alert.fingerprint


def ras_job(state: LiveState, job_id: str, hashes: list[str], op_changed_ns: int, now: int) -> JobState:
    """A RAS-watched job of cluster c whose communicators (op counts) are ``hashes``."""
    job = JobState(cluster="c", job_id=job_id, endpoint="node000:28028", node="node000",
                   first_seen_ns=op_changed_ns - 60 * NS, last_poll_ns=now, expires_ns=now + 60 * NS, polls=5,
                   ranks=16)  # fmt: skip
    for h in hashes:
        job.comms[h] = CommState(hash=h, size=16, status="RUNNING", errors=[], missing_ranks=[],
                                 rank_status={"RUNNING": 16}, op_total=1234, op_changed_ns=op_changed_ns)  # fmt: skip
    state.jobs.jobs[("c", job_id)] = job
    return job


def hung_state() -> tuple[LiveState, int, list[str]]:
    """Cluster c with HUNG's stall visible to the hang finder; the stalled communicators' hashes, as RAS prints them
    (without the leading zeros Inspector may keep)."""
    state = LiveState()
    state.stragglers.configure(StragglerSettings(hang_quiet_s=3.0))
    last = feed(state, records(HUNG), 1_000 * NS)
    now = last + 5 * NS
    state.tick(now)
    hashes = sorted({hex(int(h.comm_id, 16)) for h in state.stragglers.hangs("c", now)})
    assert hashes
    return state, now, hashes


def hang_rules(state: LiveState, now: int) -> list[tuple[str, str | None]]:
    alerts = AlertEngine().evaluate(default_rules(), state, now)
    return [(a.rule, a.job) for a in alerts if a.rule in ("comm_hang", "collective_hang")]


def test_a_cluster_ras_watches_gets_comm_hang_only_with_the_inspector_ranks_in_it() -> None:
    state, now, hashes = hung_state()
    ras_job(state, "j1", hashes, op_changed_ns=now - 5 * NS, now=now)
    # the op counts last moved 5 s ago, far under hang_after_s: the Inspector signal fires the job's one alert now
    alerts = AlertEngine().evaluate(default_rules(), state, now)
    assert [a.rule for a in alerts if a.rule in ("comm_hang", "collective_hang")] == ["comm_hang"]
    [hang_alert] = [a for a in alerts if a.rule == "comm_hang"]
    assert {r["hostname"] for r in hang_alert.evidence["inspector_lagging"]} == {"node002"}


def test_a_stall_in_another_jobs_communicators_is_not_this_jobs_hang() -> None:
    """The 32-node demo: a stall seen in the previous run's communicators fired comm_hang for the next run."""
    state, now, _ = hung_state()
    ras_job(state, "next-run", ["0x1", "0x2"], op_changed_ns=now - 1 * NS, now=now)
    assert hang_rules(state, now) == [("collective_hang", None)]  # the stall is in comms no RAS job holds


def test_a_stall_in_an_ended_jobs_communicators_is_its_end_not_a_hang() -> None:
    state, now, hashes = hung_state()
    ras_job(state, "j1", hashes, op_changed_ns=now - 5 * NS, now=now).state = "ended"
    assert hang_rules(state, now) == []


def test_a_host_reading_its_dumps_behind_is_not_a_hung_one() -> None:
    """The 32-node demo on a starved machine: one node's agent read its dump files 20 s behind the others. Its ranks'
    last coll_sn trailed their peers' in dump time while their records kept arriving; a silent rank is one that sends
    nothing, not one whose news is old."""
    spec = JobSpec(nodes=4, gpus_per_node=4, layout="moe", steps=60)
    delay_ns = {spec.hostname(1): 20 * NS}
    arrivals = sorted(
        (
            (rec.dump_ts_us * 1000 + delay_ns.get(rec.hostname, 0), i, rec)
            for i, rec in enumerate(records(spec))
        ),
        key=lambda a: a[:2],
    )
    finder, named = HangFinder(3.0), set()
    ask = arrivals[0][0]
    for recv_ns, _, rec in arrivals:
        while ask < recv_ns:
            named |= {(r.hostname, r.pid) for h in finder.hangs(ask) for r in h.lagging}
            ask += NS
        finder.add(rec, recv_ns, rec.hostname)
    assert named == set()
    hung = HangFinder(3.0)  # the same lag does not hide a real hang
    assert replay(hung, records(HUNG)) == {(HUNG.hostname(2), HUNG.pid(2, 1))}


def heartbeat(node: str, inspector_read_ns: int) -> Envelope:
    beat = HeartbeatRecord(
        hostname=node, version="t", pid=1, started_ns=0,
        collectors=[CollectorHealth(name="inspector", state="ok", last_success_ns=inspector_read_ns)],
    )  # fmt: skip
    return Envelope(type=event_type("heartbeat"), cluster="c", node=node, agent="a" + node, seq=1,
                                    ts=0, ttl=30.0, records=[beat])  # fmt: skip


def test_a_rank_is_judged_silent_only_once_its_agent_has_read_past_the_stall() -> None:
    """The 32-node demo's last false hang: its one process stood still for 14 s, agents included, and on waking the
    aggregator saw nothing advance. An agent's heartbeat says up to when it has read its dump files; until that is past
    the stall plus hang_quiet_s, its ranks' silence may be the agent's own."""
    recs = records(HUNG)
    state = LiveState()
    state.stragglers.configure(StragglerSettings(hang_quiet_s=3.0, evaluate_every_s=1.0))
    last = feed(state, recs, 1_000 * NS)
    stall_dump_ns = max(r.dump_ts_us for r in recs if r.op_kind == "coll") * 1000
    hung_node = HUNG.hostname(2)
    now = last + 10 * NS

    def hang_alerts() -> list[str]:
        state.tick(now)
        return [
            a.rule for a in AlertEngine().evaluate(default_rules(), state, now) if a.rule == "collective_hang"
        ]

    state.observe(heartbeat(hung_node, stall_dump_ns - 2 * NS), now)  # its agent stood still before the stall
    assert hang_alerts() == []
    state.observe(
        heartbeat(hung_node, stall_dump_ns + 4 * NS), now + 1
    )  # it read on, past the stall: nothing came
    assert hang_alerts() == ["collective_hang"]
