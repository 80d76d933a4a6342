"""Online: a simulated job's dump files -> agent -> NATS -> aggregator -> engine on tick -> ``straggler`` alert,
``stragglers`` endpoint and CLI; a hung rank -> ``collective_hang`` on the alert subject; and the offline
``ranksight analyze inspector`` command on the same kind of files. The agents publish summaries only (no raw records):
the online alerts come from them."""

from __future__ import annotations

import asyncio
import gzip
import json
import time
from pathlib import Path

import duckdb
import nats
import nats.aio.msg

from ranksight.aggregator.state import NS
from ranksight.formats.inspector import parse_op
from ranksight.schemas.subjects import Subjects
from ranksight.settings import Settings
from ranksight.simulate.inspector import Fault, JobSpec, write_job
from tests.support import agent, aggregator, run_cli, run_cli_async, settings_env, wait_for

STRAGGLER = JobSpec(nodes=4, gpus_per_node=4, steps=200, faults=[Fault("gpu", node=1, gpu=2, factor=2.0)])


def online_settings(settings: Settings, dump: Path) -> Settings:
    return settings.model_copy(update={
        "agent": settings.agent.model_copy(update={"collectors": settings.agent.collectors.model_copy(update={
            # no raw records: online findings come from the agents' summaries alone
            "inspector": settings.agent.collectors.inspector.model_copy(update={"dump_dir": dump, "interval_s": 0.05,
                                                                               "raw_rate_per_s": 0.0}),
        })}),
        "aggregator": settings.aggregator.model_copy(update={"stragglers": settings.aggregator.stragglers.model_copy(
            update={"window_s": 2.0, "evaluate_every_s": 0.3, "retain_windows": 60})}),
    })  # fmt: skip


async def test_straggler_alert_endpoint_and_cli(settings: Settings, tmp_path: Path) -> None:
    spec = STRAGGLER
    spec.start_us = time.time_ns() // 1000 - 20_000_000  # a job that has been running for 20 s
    write_job(spec, tmp_path / "dump")
    cfg = online_settings(settings, tmp_path / "dump")
    async with aggregator(cfg) as agg, agent(cfg, only=["inspector"]):
        alert = await wait_for(
            lambda: next((a for a in agg.engine.active.values() if a.rule == "straggler"), None), timeout=20
        )
        assert (alert.node, alert.evidence["pid"], alert.evidence["kind"]) == (
            "node001",
            spec.pid(1, 2),
            "compute",
        )
        assert alert.state == "firing" and alert.evidence["slowdown"] > 1.3
        assert len([a for a in agg.engine.active.values() if a.rule == "straggler"]) == 1
        proc = await run_cli_async("stragglers", "--json", env=settings_env(cfg))
        assert proc.returncode == 0, proc.stderr
        [row] = json.loads(proc.stdout)["stragglers"]
        assert (row["hostname"], row["pid"], row["kind"], row["cluster"]) == ("node001", spec.pid(1, 2), "compute",
                                                                              "test")  # fmt: skip
        table = await run_cli_async("stragglers", env=settings_env(cfg))
        assert table.returncode == 0 and table.stdout.split()[:2] == ["CLUSTER", "HOSTNAME"]
        assert "node001" in table.stdout and "compute" in table.stdout
        [view] = agg.store.rows("SELECT hostname, pid, kind, state FROM straggler_findings")
        assert view == {"hostname": "node001", "pid": spec.pid(1, 2), "kind": "compute", "state": "firing"}
        stats = list(agg.store.rows("SELECT hostname, pid, ops FROM inspector_summary_rank_stats WHERE pid = ?",
                                    [spec.pid(1, 2)]))  # fmt: skip
        assert stats and all(r["hostname"] == "node001" for r in stats)
        # summaries alone (raw rows there are the finding's evidence, fetched on request: seq 0)
        assert next(agg.store.rows("SELECT count(*) AS n FROM inspector WHERE seq > 0"))["n"] == 0
    async with aggregator(
        cfg
    ) as agg:  # a restart replays history: the alert stays firing, nothing fires again
        await wait_for(lambda: agg.state.stragglers.clusters.get("test"))
        await asyncio.sleep(1.5)  # several ticks
        assert [a.node for a in agg.engine.active.values() if a.rule == "straggler"] == ["node001"]
    con = duckdb.connect(str(cfg.db_path()), read_only=True)
    assert con.execute("SELECT state FROM alerts WHERE rule = 'straggler'").fetchall() == [("firing",)]
    history = con.execute(
        "SELECT DISTINCT hostname, pid, kind FROM straggler_finding_history WHERE slowdown > 1"
    ).fetchall()
    assert history == [("node001", spec.pid(1, 2), "compute")]  # every evaluation's findings, stored


async def test_ingest_waits_for_a_busy_engine_instead_of_queueing_without_bound(
    settings: Settings, tmp_path: Path
) -> None:
    """With the engine's queue at its mark after every batch, ingest pauses until a tick hands the queue to the
    engine: every record still reaches it (nothing dropped) and the straggler is found as without the pauses."""
    spec = STRAGGLER
    spec.start_us = time.time_ns() // 1000 - 20_000_000
    write_job(spec, tmp_path / "dump")
    cfg = online_settings(settings, tmp_path / "dump")
    stragglers = cfg.aggregator.stragglers.model_copy(update={"ingest_waits_at_records": 1})
    cfg = cfg.model_copy(update={"aggregator": cfg.aggregator.model_copy(update={"stragglers": stragglers})})
    async with aggregator(cfg) as agg, agent(cfg, only=["inspector"]):
        alert = await wait_for(
            lambda: next((a for a in agg.engine.active.values() if a.rule == "straggler"), None), timeout=20
        )
        assert (alert.node, alert.evidence["pid"]) == ("node001", spec.pid(1, 2))
        meta = agg.status_meta()
        assert meta["ingest"]["analysis_wait_s"] > 0
        assert meta["stragglers"]["dropped"] == 0 and agg.state.stragglers.records > 0


def test_analyze_inspector_cli_json(tmp_path: Path) -> None:
    files = write_job(JobSpec(nodes=4, gpus_per_node=4, capture="sampled",
                              faults=[Fault("nic", node=2, factor=3.0)]), tmp_path / "d")  # fmt: skip
    gz = files[0].with_suffix(".log.gz")  # compressed files are read too
    gz.write_bytes(gzip.compress(files[0].read_bytes() + b"oops\n"))
    files[0].unlink()
    proc = run_cli("analyze", "inspector", str(tmp_path / "d"), "--json", "--window-s", "2")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert set(out) == {
        "records",
        "operations",
        "capture_model",
        "stragglers",
        "bad_lines",
        "files",
        "files_not_read",
    }
    assert out["capture_model"] == "sampled" and out["bad_lines"] == 1 and out["records"] > 1000
    assert out["stragglers"] == [{**out["stragglers"][0], "hostname": "node002", "pid": None,
                                  "kind": "communication", "rank": None}]  # fmt: skip
    assert set(out["stragglers"][0]) >= {"hostname", "pid", "kind", "comm", "rank", "slowdown", "confidence",
                                         "evidence", "cost", "duty_cycle", "slow_comms"}  # fmt: skip
    assert out["stragglers"][0]["slow_comms"][0]["factor"] > 2


def test_analyze_inspector_cli_healthy_table_and_bad_dir(tmp_path: Path) -> None:
    write_job(JobSpec(nodes=4, gpus_per_node=4, noise=0.1, warmup_steps=20), tmp_path / "d")
    proc = run_cli("analyze", "inspector", str(tmp_path / "d"), "--window-s", "2")
    assert proc.returncode == 0 and "no stragglers found" in proc.stdout
    proc = run_cli("analyze", "inspector", str(tmp_path / "d"), "--json", "--window-s", "2")
    assert json.loads(proc.stdout)["stragglers"] == []
    missing = run_cli("analyze", "inspector", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "not a directory" in missing.stderr


def test_stragglers_cli_without_aggregator_exits_1(nats_server) -> None:  # type: ignore[no-untyped-def]
    proc = run_cli("stragglers", "--nats", nats_server.url, timeout=30)
    assert proc.returncode == 1 and "no aggregator answers" in proc.stderr


def test_offline_analysis_and_online_alerts_agree_on_the_same_records(tmp_path: Path) -> None:
    """The dump files given to ``ranksight analyze inspector`` and the same records replayed at their timestamps
    through the live tracker and the ``straggler`` rule name the same culprits: a compute straggler and a NIC."""
    from ranksight.aggregator.alerts import AlertEngine
    from ranksight.aggregator.analysis.rules import default_rules
    from ranksight.aggregator.models.straggler.settings import StragglerSettings
    from ranksight.aggregator.state import LiveState
    from ranksight.simulate.inspector import simulate_timed
    from tests.unit.test_stragglers_live import envelope

    spec = JobSpec(nodes=4, gpus_per_node=4, layout="moe", steps=300, noise=0.025, spike_prob=0.002, seed=3,
                   faults=[Fault("gpu", node=2, gpu=1, factor=1.3, start_step=60),
                           Fault("nic", node=0, factor=2.5, start_step=60)])  # fmt: skip
    write_job(spec, tmp_path / "d")
    proc = run_cli("analyze", "inspector", str(tmp_path / "d"), "--json")
    assert proc.returncode == 0, proc.stderr
    offline = {(f["hostname"], f["pid"], f["kind"]) for f in json.loads(proc.stdout)["stragglers"]}
    assert offline == {("node002", spec.pid(2, 1), "compute"), ("node000", None, "communication")}

    state, engine, rules = LiveState(), AlertEngine(), default_rules()
    state.stragglers.configure(StragglerSettings())
    lines = sorted(
        (ts, host, line) for (host, _pid), timed in simulate_timed(spec).items() for ts, line in timed
    )
    fired, seq, clock = set(), 0, lines[0][0]
    for ts, host, line in lines:
        if ts >= clock + 500_000:  # the aggregator ticks while the records arrive
            clock = ts
            state.tick(ts * 1000)
            fired |= {(a.node, a.evidence["pid"], a.evidence["kind"]) for a in engine.evaluate(rules, state, ts * 1000)
                      if a.rule == "straggler" and a.state == "firing"}  # fmt: skip
        seq += 1
        state.observe(envelope("inspector", host, seq, [parse_op(line)]), ts * 1000)
    assert fired == offline  # the replay's clock is the records' own dump time (µs -> ns)


async def test_a_hung_rank_is_named_on_the_alert_subject_within_10_s_of_the_hang_becoming_visible(
    settings: Settings, tmp_path: Path
) -> None:
    spec = JobSpec(
        nodes=4,
        gpus_per_node=4,
        layout="moe",
        steps=100,
        faults=[Fault("hang", node=3, gpu=2, start_step=30)],
    )
    spec.start_us = (
        time.time_ns() // 1000 - 10_000_000
    )  # hung a few seconds ago; its files hold all there will be
    write_job(spec, tmp_path / "dump")
    cfg = online_settings(settings, tmp_path / "dump")
    cfg.aggregator.stragglers.hang_quiet_s = 3.0
    alerts: list[tuple[int, dict[str, object]]] = []

    async def on_alert(msg: nats.aio.msg.Msg) -> None:
        alerts.append((time.time_ns(), json.loads(msg.data)))

    nc = await nats.connect(cfg.nats.url)
    try:
        await nc.subscribe(Subjects(cfg.subject_prefix).alerts_filter("test"), cb=on_alert)
        async with aggregator(cfg) as agg, agent(cfg, only=["inspector"]):
            await wait_for(lambda: [a for _, a in alerts if a["rule"] == "collective_hang"], timeout=30)
            # visible once the last of the job's records is in: the tracker's receipt time of the last record
            visible_ns = agg.state.stragglers.last_recv_ns["test"]
            [(at_ns, alert)] = [(t, a) for t, a in alerts if a["rule"] == "collective_hang"]
            assert at_ns - visible_ns < 10 * NS
            assert alert["state"] == "firing" and alert["node"] == "node003"
            evidence = alert["evidence"]
            assert isinstance(evidence, dict)
            assert {(r["hostname"], r["pid"]) for r in evidence["lagging_ranks"]} == {
                ("node003", spec.pid(3, 2))
            }
            assert evidence["comm"] and evidence["collective"] and evidence["nodes"] == ["node003"]
            await asyncio.sleep(1.0)  # several more ticks: still one alert for the one hang
            assert len([a for _, a in alerts if a["rule"] == "collective_hang"]) == 1
            assert not [a for a in agg.engine.active.values() if a.rule == "straggler"]
    finally:
        await nc.close()


def test_at_1_s_dumps_the_agents_summaries_alert_on_what_analyze_inspector_finds(tmp_path: Path) -> None:
    """At the 1 s dump interval operators use, each process ticking at its own phase: the agents' summaries (their own
    summarizer, parts every second) replayed through the live tracker and the ``straggler`` rule fire on the same
    culprits, kinds and steady/intermittent patterns as ``ranksight analyze inspector`` on the dump files."""
    import msgspec

    from ranksight.agent.collectors.inspector.settings import InspectorSettings
    from ranksight.aggregator.alerts import AlertEngine
    from ranksight.aggregator.analysis.rules import default_rules
    from ranksight.aggregator.models.straggler.settings import StragglerSettings
    from ranksight.aggregator.state import LiveState
    from ranksight.simulate.inspector import simulate_timed, summarize
    from tests.unit.test_stragglers_live import envelope

    spec = JobSpec(nodes=4, gpus_per_node=4, layout="moe", steps=900, noise=0.025, spike_prob=0.002, seed=5,
                   dump_interval_ms=1000.0,
                   faults=[Fault("gpu", node=2, gpu=1, factor=1.5, start_step=60),
                           Fault("nic", node=0, factor=2.5, start_step=60)])  # fmt: skip
    write_job(spec, tmp_path / "d")
    proc = run_cli("analyze", "inspector", str(tmp_path / "d"), "--json")
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)["stragglers"]
    offline = {(f["hostname"], f["pid"], f["kind"]) for f in found}
    assert offline == {("node002", spec.pid(2, 1), "compute"), ("node000", None, "communication")}
    [compute] = [f for f in found if f["kind"] == "compute"]
    assert compute["pattern"] in ("steady", "undetermined") and compute["coverage"]["dump_interval_s"] == 1.0

    state, engine, rules = LiveState(), AlertEngine(), default_rules()
    state.stragglers.configure(StragglerSettings())
    agent_settings = InspectorSettings.model_validate({})
    records = sorted((parse_op(line) for timed in simulate_timed(spec).values() for _, line in timed),
                     key=lambda r: r.dump_ts_us)  # fmt: skip
    parts = summarize(records, agent_settings.summary_window_s, agent_settings.summary_slice_s,
                      agent_settings.summary_publish_s)  # fmt: skip
    fired, latest, clock = set(), {}, parts[0][0]
    for seq, (at, part) in enumerate(parts):
        if at >= clock + 1_000_000:  # the aggregator ticks while the parts arrive
            clock = at
            state.tick(at * 1000)
            fired |= {(a.node, a.evidence["pid"], a.evidence["kind"]) for a in engine.evaluate(rules, state, at * 1000)
                      if a.rule == "straggler" and a.state == "firing"}  # fmt: skip
            latest.update({f.key: f for f in state.stragglers.clusters["c"].findings})
        state.observe(envelope("inspector_summary", part.hostname, seq, [part]), at * 1000)
    assert fired == offline
    live = latest[("node002", spec.pid(2, 1), "compute")]  # judged on a full horizon, as offline
    assert live.pattern in ("steady", "undetermined") and live.coverage["dump_interval_s"] == 1.0
    assert abs(live.slowdown - compute["slowdown"]) < 0.1
    msgspec.json.encode(live.as_dict())
