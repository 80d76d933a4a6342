"""The online tracker + ``straggler`` rule + alert engine with an injected clock: fire once, stay, then resolve when
the job's records age out; GPU samples corroborate."""

from __future__ import annotations

import msgspec
from msgspec.structs import replace

from ranksight.agent.collectors.ras.parse_json import parse_status_json
from ranksight.aggregator.alerts import AlertEngine
from ranksight.aggregator.analysis.rules import default_rules
from ranksight.aggregator.models.straggler.settings import StragglerSettings
from ranksight.aggregator.state import NS, LiveState
from ranksight.formats.inspector import parse_op
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import GpuRecord, InspectorRecord, RasEventRecord, RasRecord
from ranksight.schemas.wire import event_type
from ranksight.simulate.inspector import Fault, JobSpec, run_job, simulate, summarize
from tests.conftest import FIXTURES

# these tests tick a clock counted from the epoch while the simulated jobs were dumped in 2025: the bound on dump
# times past the clock (clock_ahead_s) is set out of its way
EPOCH_CLOCK_S = 2e9
SPEC = JobSpec(nodes=4, gpus_per_node=4, steps=200, faults=[Fault("gpu", node=1, gpu=2, factor=2.0)])


def envelope(kind: str, node: str, seq: int, records: list) -> Envelope:  # type: ignore[type-arg]
    return Envelope(type=event_type(kind), cluster="c", node=node, agent="a" + node, seq=seq,
                                    ts=0, ttl=30.0, records=records)  # fmt: skip


def test_fires_once_corroborates_and_resolves_after_records_age_out() -> None:
    state = LiveState()
    state.stragglers.configure(
        StragglerSettings(clock_ahead_s=EPOCH_CLOCK_S, window_s=2.0, evaluate_every_s=1.0, retain_windows=10)
    )
    engine, rules = AlertEngine(), default_rules()
    t0 = 1_000 * NS
    for seq, ((host, _pid), lines) in enumerate(simulate(SPEC).items(), start=1):
        state.observe(envelope("inspector", host, seq, [parse_op(x) for x in lines]), t0)
    throttled = GpuRecord(index=2, throttled=True, throttle_reasons=["thermal"], sclk_hz=1.0e9)
    normal = [GpuRecord(index=i, sclk_hz=2.0e9) for i in range(3)]
    state.observe(envelope("gpu", "node001", 1, [throttled]), t0)
    state.observe(envelope("gpu", "node000", 1, normal), t0)

    state.tick(t0)
    fired = engine.evaluate(rules, state, t0)
    [alert] = [a for a in fired if a.rule == "straggler"]
    assert (alert.state, alert.node, alert.evidence["pid"]) == ("firing", "node001", SPEC.pid(1, 2))
    assert any("throttled (thermal)" in note for note in alert.evidence["corroboration"])
    assert any("clock 1000 MHz" in note for note in alert.evidence["corroboration"])

    state.tick(t0 + 2 * NS)  # re-evaluated: still true, nothing new
    assert [a for a in engine.evaluate(rules, state, t0 + 2 * NS) if a.rule == "straggler"] == []

    later = t0 + 25 * NS  # past retain_windows x window_s with no new records: the job is gone
    state.tick(later)
    [resolved] = [a for a in engine.evaluate(rules, state, later) if a.rule == "straggler"]
    assert resolved.state == "resolved" and resolved.fingerprint == alert.fingerprint


def test_background_evaluation_is_picked_up_by_a_later_tick() -> None:
    state = LiveState()
    state.stragglers.configure(
        StragglerSettings(clock_ahead_s=EPOCH_CLOCK_S, window_s=2.0, evaluate_every_s=1.0), background=True
    )
    state.tick(1 * NS)  # the first evaluation (the replay at start) is inline, so no rule sees a gap
    assert state.stragglers.clusters == {} and state.stragglers._running is None
    for seq, ((host, _pid), lines) in enumerate(simulate(SPEC).items(), start=1):
        state.observe(envelope("inspector", host, seq, [parse_op(x) for x in lines]), 5 * NS)
    state.tick(5 * NS)
    assert state.stragglers.clusters == {}  # started on the worker thread, not waited for
    running = state.stragglers._running
    assert running is not None
    running.result(timeout=30)
    state.tick(5 * NS + 1)
    [finding] = state.stragglers.clusters["c"].findings
    assert finding.pid == SPEC.pid(1, 2)


def test_a_failing_analysis_keeps_previous_findings_and_never_raises(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    state = LiveState()
    state.stragglers.configure(
        StragglerSettings(clock_ahead_s=EPOCH_CLOCK_S, window_s=2.0, evaluate_every_s=1.0, retain_windows=10)
    )
    for seq, ((host, _pid), lines) in enumerate(simulate(SPEC).items(), start=1):
        state.observe(envelope("inspector", host, seq, [parse_op(x) for x in lines]), 5 * NS)
    state.tick(5 * NS)
    before = state.stragglers.clusters["c"]
    assert before.findings

    def broken(self):  # type: ignore[no-untyped-def]
        raise ZeroDivisionError("unforeseen")

    monkeypatch.setattr("ranksight.aggregator.models.straggler.engine.StragglerEngine.evaluate", broken)
    state.tick(7 * NS)
    assert state.stragglers.clusters["c"] is before


def test_straggler_cites_an_underperforming_gpu_from_active_probes() -> None:
    from tests.unit.test_gpu_probe_rule import probe_env, result

    state = LiveState()
    state.stragglers.configure(
        StragglerSettings(clock_ahead_s=EPOCH_CLOCK_S, window_s=2.0, evaluate_every_s=1.0, retain_windows=10)
    )
    t0 = 1_000 * NS
    for n in range(
        SPEC.nodes
    ):  # measured between jobs: node001's GPU 2 is 40 % below its peers of the same model
        probes = [result(g, "AMD Instinct MI300X", {"tflops_bf16": 0.6} if (n, g) == (1, 2) else None)
                  for g in range(SPEC.gpus_per_node)]  # fmt: skip
        state.observe(probe_env("c", f"node{n:03d}", probes), t0 - 600 * NS)
    for seq, ((host, _pid), lines) in enumerate(simulate(SPEC).items(), start=1):
        state.observe(envelope("inspector", host, seq, [parse_op(x) for x in lines]), t0)
    state.tick(t0)
    [alert] = [a for a in AlertEngine().evaluate(default_rules(), state, t0) if a.rule == "straggler"]
    assert alert.node == "node001"
    assert any(
        "GPU 2 active probe: tflops_bf16 40% below its peers" in n for n in alert.evidence["corroboration"]
    )


def test_processes_that_catch_up_late_are_judged_with_the_slices_they_belong_to() -> None:
    """An agent reading a backlog delivers one node's records after the others' were judged: those slices are
    judged again, so its straggler is still found."""
    state = LiveState()
    state.stragglers.configure(StragglerSettings(clock_ahead_s=EPOCH_CLOCK_S, evaluate_every_s=1.0))
    lines = simulate(SPEC)
    late = [(host, pid) for host, pid in lines if host == "node001"]
    for seq, ((host, _pid), timed) in enumerate(lines.items(), start=1):
        if host != "node001":
            state.observe(envelope("inspector", host, seq, [parse_op(x) for x in timed]), 5 * NS)
    state.tick(5 * NS)
    assert state.stragglers.clusters["c"].findings == []
    for seq, proc in enumerate(late, start=100):
        state.observe(envelope("inspector", proc[0], seq, [parse_op(x) for x in lines[proc]]), 6 * NS)
    state.tick(7 * NS)
    assert [(f.hostname, f.pid) for f in state.stragglers.clusters["c"].findings] == [
        ("node001", SPEC.pid(1, 2))
    ]


def test_summaries_feed_the_engine_and_a_summarizing_node_s_raw_samples_do_not() -> None:
    """Node by node: summaries (an agent of this version) or raw records (an older agent), never both counted."""
    timed = run_job(SPEC)[0]
    raw: dict[str, list[InspectorRecord]] = {}
    for (host, _), lines in timed.items():
        raw.setdefault(host, []).extend(parse_op(x) for _, x in lines)
    state = LiveState()
    state.stragglers.configure(
        StragglerSettings(clock_ahead_s=EPOCH_CLOCK_S, window_s=2.0, evaluate_every_s=1.0, retain_windows=10)
    )
    t0, seq = 1_000 * NS, 0
    for host, recs in raw.items():
        seq += 1
        if host == "node000":  # an older agent: every record raw
            state.observe(envelope("inspector", host, seq, recs), t0)
            continue
        summaries = [x for _, x in summarize(sorted(recs, key=lambda r: r.dump_ts_us))]
        state.observe(envelope("inspector_summary", host, seq, summaries), t0)
        state.observe(envelope("inspector", host, seq + 100, recs[:50]), t0)  # its rate-limited raw share
    state.tick(t0)
    result = state.stragglers.clusters["c"]
    total = sum(len(recs) for recs in raw.values())
    # each record once: the raw samples of summarizing nodes are not added
    assert state.stragglers.records == total
    assert [(f.hostname, f.pid) for f in result.findings] == [("node001", SPEC.pid(1, 2))]
    assert state.stragglers.hang_finders["c"].proc_window_end_us  # the hang finder has the summaries too


def test_a_straggler_carries_its_communicators_job_and_resolves_when_that_job_ends() -> None:
    state = LiveState()
    state.stragglers.configure(
        StragglerSettings(clock_ahead_s=EPOCH_CLOCK_S, window_s=2.0, evaluate_every_s=1.0, retain_windows=10)
    )
    engine, rules = AlertEngine(), default_rules()
    t0 = 1_000 * NS
    processes = simulate(SPEC)
    culprit = [parse_op(x) for x in processes[("node001", SPEC.pid(1, 2))]]
    for seq, ((host, _pid), lines) in enumerate(processes.items(), start=1):
        state.observe(envelope("inspector", host, seq, [parse_op(x) for x in lines]), t0)
    # RAS watches the job: one of its communicators is the culprit's (RAS prints the hash zero-padded)
    status = parse_status_json((FIXTURES / "ras" / "nccl_2.28.9_json_status_healthy_2rank.json").read_bytes())
    comm = replace(status.communicators[0], **{"hash": f"0x{int(culprit[0].comm_id, 16):016x}"})
    ras = RasRecord(
        job_id="slurm-7",
        endpoint="localhost:28028",
        **{**msgspec.structs.asdict(status), "communicators": [comm]},
    )
    state.observe(envelope("ras", "node000", 100, [ras]), t0)

    state.tick(t0)
    [alert] = [a for a in engine.evaluate(rules, state, t0) if a.rule == "straggler"]
    assert (alert.state, alert.node, alert.job) == ("firing", "node001", "slurm-7")
    # the communicator as RAS knows it, by its hash
    assert [c["comm_id"] for c in alert.evidence["ras_comms"]] == [culprit[0].comm_id]  # type: ignore[index, union-attr]
    assert alert.evidence["ras_comms"][0]["ras_hash"] == comm.hash  # type: ignore[index, call-overload]

    closed = RasEventRecord(job_id="slurm-7", endpoint="localhost:28028", event="ENDPOINT_CLOSED")
    state.observe(envelope("ras_event", "node000", 101, [closed]), t0 + NS)
    state.tick(t0 + 2 * NS)  # the finding itself is still there (its records have not aged out)
    assert state.stragglers.clusters["c"].findings
    [resolved] = [a for a in engine.evaluate(rules, state, t0 + 2 * NS) if a.rule == "straggler"]
    assert resolved.state == "resolved" and resolved.fingerprint == alert.fingerprint
    assert resolved.evidence["resolved_because"] == "job ended"


def test_records_naming_a_host_another_node_reports_are_not_analyzed() -> None:
    """A peer that publishes Inspector summaries in another host's name, marking that host's processes as having
    records arrive late (which leaves them unjudged), must not hide its straggler, nor pass as the node to ask its raw
    records from: the first node whose records name a host holds it while they keep coming; the peer's are counted."""
    state = LiveState()
    state.stragglers.configure(
        StragglerSettings(clock_ahead_s=EPOCH_CLOCK_S, window_s=2.0, evaluate_every_s=1.0, retain_windows=10)
    )
    t0 = 1_000 * NS
    lines = simulate(SPEC)
    for seq, ((host, _pid), text) in enumerate(lines.items(), start=1):
        state.observe(envelope("inspector", host, seq, [parse_op(x) for x in text]), t0)
    slow = sorted((parse_op(x) for (host, _), text in lines.items() if host == "node001" for x in text),
                  key=lambda r: r.dump_ts_us)  # fmt: skip
    forged = [replace(s, **{"late": 50}) for _, s in summarize(slow)]
    state.observe(envelope("inspector_summary", "evil", 1, forged), t0)
    state.tick(t0)
    [finding] = state.stragglers.clusters["c"].findings
    assert (finding.hostname, finding.pid) == ("node001", SPEC.pid(1, 2))
    assert state.stragglers.foreign == len(forged)
    seen = state.stragglers.hang_finders["c"].proc_seen
    assert {node for (host, _), (_, node) in seen.items() if host == "node001"} == {"node001"}


def test_a_host_silent_on_its_node_is_taken_over_by_the_next_node_naming_it() -> None:
    """A job's process that starts again on another node (a pod moved) keeps its host name: once the first node's
    records of it have stopped for retain_windows x window_s, the next node's are its own."""
    state = LiveState()
    state.stragglers.configure(
        StragglerSettings(clock_ahead_s=EPOCH_CLOCK_S, window_s=2.0, retain_windows=10)
    )
    lines = next(text for (host, _), text in simulate(SPEC).items() if host == "node001")
    records = [parse_op(x) for x in lines[:50]]
    tracker = state.stragglers
    tracker.observe(envelope("inspector", "node001", 1, records), 1_000 * NS)
    tracker.observe(envelope("inspector", "node009", 1, records), 1_010 * NS)  # within 20 s: not its own
    assert tracker.foreign == 50
    tracker.observe(envelope("inspector", "node009", 2, records), 1_021 * NS)  # node001 silent about it 21 s
    tracker.observe(envelope("inspector", "node001", 2, records), 1_022 * NS)  # now node009's
    assert tracker.foreign == 100 and tracker.host_nodes[("c", "node001")] == ("node009", 1_021 * NS)


def test_ranks_beyond_max_ranks_are_counted_not_analyzed_until_others_are_forgotten() -> None:
    """A peer naming a new communicator in every record would grow what the engine and the hang finder keep without
    end: past ``max_ranks`` followed at once, records of new ranks are counted, those of the ranks followed go on."""
    state = LiveState()
    settings = StragglerSettings(clock_ahead_s=EPOCH_CLOCK_S, window_s=2.0, retain_windows=10, max_ranks=100,
                                 hang_retain_s=60.0)  # fmt: skip
    state.stragglers.configure(settings)
    tracker = state.stragglers
    records = [parse_op(x) for x in next(iter(simulate(SPEC).values()))[:40]]
    ranks = {(r.comm_id, r.op, r.hostname, r.pid) for r in records}
    tracker.observe(envelope("inspector", "node000", 1, records), 1_000 * NS)
    queued = tracker.queued
    assert queued == len(records) and tracker.untracked == 0
    flood = [replace(records[0], **{"comm_id": f"forged{i:04d}"}) for i in range(300)]
    tracker.observe(envelope("inspector", "node000", 2, flood), 1_001 * NS)
    room = 100 - len(ranks)
    assert tracker.queued == queued + room and tracker.untracked == 300 - room
    comms = {comm for comm, _ in tracker.hang_finders["c"].comm_ops}
    assert len(comms - {r.comm_id for r in records}) == room  # the hang finder got only the ranks followed
    tracker.observe(envelope("inspector", "node000", 3, records), 1_002 * NS)  # the ranks followed go on
    assert tracker.queued == queued * 2 + room and tracker.untracked == 300 - room
    tracker.tick(1_020 * NS)  # the flood's ranks are kept while the hang finder may hold them (hang_retain_s)
    tracker.observe(envelope("inspector", "node000", 4, flood[-1:]), 1_021 * NS)
    assert tracker.untracked == 301 - room
    tracker.tick(1_063 * NS)  # 61 s after the last records of the ranks followed: every one forgotten
    assert tracker.followed_ranks == {}
    tracker.observe(envelope("inspector", "node000", 5, flood[-1:]), 1_064 * NS)
    assert tracker.untracked == 301 - room and tracker.followed_ranks["c"]


def test_a_finding_s_coverage_cites_the_drop_counters_of_its_processes() -> None:
    from ranksight.schemas.records import InspectorDumpStatsRecord

    state = LiveState()
    state.stragglers.configure(
        StragglerSettings(clock_ahead_s=EPOCH_CLOCK_S, window_s=2.0, evaluate_every_s=1.0, retain_windows=10)
    )
    t0 = 1_000 * NS
    records = {proc: [parse_op(x) for x in lines] for proc, lines in simulate(SPEC).items()}
    for seq, ((host, _pid), recs) in enumerate(records.items(), start=1):
        state.observe(envelope("inspector", host, seq, recs), t0)
    straggler = ("node001", SPEC.pid(1, 2))
    comm = records[straggler][0]

    def marker(pid: int, ts_us: int, dropped: int) -> InspectorDumpStatsRecord:
        return InspectorDumpStatsRecord(comm_id=comm.comm_id, rank=comm.rank, n_ranks=comm.n_ranks,
                                        hostname="node001", pid=pid, dump_ts_us=ts_us, format_version="v4.1",
                                        coll_records=30, coll_dropped_total=dropped, coll_dropped_since_last_dump=dropped,
                                        p2p_records=0, p2p_dropped_total=0, p2p_dropped_since_last_dump=0)  # fmt: skip

    # the straggler's own markers (two dumps, 10 drops in the second), and a neighbour's that its finding must not cite
    mine = [marker(straggler[1], comm.dump_ts_us, 0), marker(straggler[1], comm.dump_ts_us + 1, 10)]
    state.observe(
        envelope("inspector_dump_stats", "node001", 99, [*mine, marker(SPEC.pid(1, 0), 1, 500)]), t0
    )
    state.tick(t0)
    [alert] = [a for a in AlertEngine().evaluate(default_rules(), state, t0) if a.rule == "straggler"]
    assert alert.evidence["pid"] == straggler[1]
    coverage = alert.evidence["coverage"]
    assert coverage["ring_drops"] == {"processes": 1, "communicators": 1, "dumps": 2, "records": 60, "dropped": 10,
                                      "dropped_share": round(10 / 70, 4), "dropped_total": 10}  # fmt: skip
    assert any("10 operations the plugin's rings dropped" in x for x in coverage["left_out"])
    assert "capture_model" in coverage  # the engine's own coverage stays


def test_a_finding_s_coverage_cites_the_gpu_counters_its_process_exported() -> None:
    """A process that exports verbose OTLP writes no dump markers: its GPU's counters (recorded, dropped), which the
    agent tied to the posting process, are its coverage (``gpu_drops``); another process's are not cited."""
    from ranksight.schemas.records import InspectorMetricsRecord

    state = LiveState()
    state.stragglers.configure(
        StragglerSettings(clock_ahead_s=EPOCH_CLOCK_S, window_s=2.0, evaluate_every_s=1.0, retain_windows=10)
    )
    t0 = 1_000 * NS
    records = {proc: [parse_op(x) for x in lines] for proc, lines in simulate(SPEC).items()}
    for seq, ((host, _pid), recs) in enumerate(records.items(), start=1):
        state.observe(envelope("inspector", host, seq, recs), t0)
    straggler = ("node001", SPEC.pid(1, 2))

    def device(gpu: str, pid: int | None, total: int, dropped: int) -> InspectorMetricsRecord:
        return InspectorMetricsRecord(source="otlp", shape="device", hostname="node001", gpu=gpu, pid=pid,
                                      coll_total=total, coll_dropped_total=dropped, p2p_total=0,
                                      p2p_dropped_total=0)  # fmt: skip

    counters = [
        device("GPU2", straggler[1], 400, 40),
        device("GPU0", SPEC.pid(1, 0), 900, 300),
        device("GPU1", None, 9, 9),
    ]
    state.observe(envelope("inspector_metrics", "node001", 99, counters), t0)
    state.tick(t0)
    [alert] = [a for a in AlertEngine().evaluate(default_rules(), state, t0) if a.rule == "straggler"]
    assert alert.evidence["pid"] == straggler[1]
    coverage = alert.evidence["coverage"]
    assert coverage["gpu_drops"] == {"gpus": ["GPU2"], "operations": 400, "dropped": 40, "dropped_share": 0.1}
    assert "ring_drops" not in coverage
    assert any(
        "40 operations the plugin's rings of its GPU dropped (10.0%" in x for x in coverage["left_out"]
    )
    assert "capture_model" in coverage
