"""``gpu_underperforming`` on many synthetic clusters, plus history, model grouping, busy discard, TTL and replay."""

from __future__ import annotations

import random
from itertools import count

import msgspec

from ranksight.aggregator.alerts import AlertEngine
from ranksight.aggregator.analysis.gpu_probe import GpuUnderperformingRule, gpu_evidence
from ranksight.aggregator.state import NS, LiveState
from ranksight.aggregator.state.gpu_probes import METRICS
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import GpuProbeRecord, InspectorSummaryRecord, RasRecord
from ranksight.schemas.wire import event_type

PEAKS = {  # model -> (bf16 TFLOPS, fp16 TFLOPS, bytes/s): plausible magnitudes; only ratios matter to the rule
    "AMD Instinct MI300X": (650.0, 660.0, 4.2e12),
    "AMD Instinct MI250X": (190.0, 190.0, 1.6e12),
    "NVIDIA H100 80GB HBM3": (700.0, 710.0, 3.0e12),
}
_seq = count(1)


def probe_env(cluster: str, node: str, records: list[GpuProbeRecord], ttl: float = 3600) -> Envelope:
    return Envelope(type=event_type("gpu_probe"), cluster=cluster, node=node, agent="a" + node,
                                    seq=next(_seq), ts=0, ttl=ttl, records=records)  # fmt: skip


def result(index: int, model: str, scale: dict[str, float] | None = None) -> GpuProbeRecord:
    bf16, fp16, bw = PEAKS[model]
    s = scale or {}
    return GpuProbeRecord(index=index, status="ok", name=model, tflops_bf16=bf16 * s.get("tflops_bf16", 1),
                          tflops_fp16=fp16 * s.get("tflops_fp16", 1),
                          mem_bandwidth_bps=bw * s.get("mem_bandwidth_bps", 1))  # fmt: skip


def flagged(state: LiveState, now_ns: int, rule: GpuUnderperformingRule | None = None) -> dict[tuple, list]:
    conds = (rule or GpuUnderperformingRule()).evaluate(state, now_ns)
    return {(c.cluster, c.node, c.key): c.evidence["findings"] for c in conds}


def test_outlier_rule_on_many_synthetic_clusters() -> None:
    rng = random.Random(20261122)
    rule = GpuUnderperformingRule()
    detected = missed = false_alarms = 0
    for n in range(300):
        state, cluster, now = LiveState(), f"c{n}", 10 * NS
        nodes, per_node = rng.randint(1, 16), rng.choice([1, 2, 4, 8])
        models = rng.sample(sorted(PEAKS), rng.choice([1, 1, 2]))
        node_model = {f"n{i:02d}": rng.choice(models) for i in range(nodes)}
        injected = None
        if rng.random() < 0.5:
            injected = (f"n{rng.randrange(nodes):02d}", rng.randrange(per_node), rng.choice(METRICS),
                        rng.uniform(0.2, 0.5))  # fmt: skip
        for node, model in node_model.items():
            records = []
            for gpu in range(per_node):
                scale = {m: rng.gauss(1.0, 0.015) for m in METRICS}  # 1.5% measurement noise
                if injected and injected[:2] == (node, gpu):
                    scale[injected[2]] *= 1 - injected[3]
                records.append(result(gpu, model, scale))
            state.observe(probe_env(cluster, node, records), now)
        state.tick(now)
        got = flagged(state, now, rule)
        expect: set[tuple] = set()
        if injected:
            peers = per_node * sum(1 for m in node_model.values() if m == node_model[injected[0]])
            if peers >= rule.min_peers:
                expect = {(cluster, injected[0], f"gpu{injected[1]}")}
                hit = got.get(next(iter(expect)))
                detected += bool(hit)
                missed += not hit
                assert hit is None or hit[0]["metric"] == injected[2]
        false_alarms += len(set(got) - expect)
    assert false_alarms == 0
    assert missed == 0 and detected > 100


def test_models_are_compared_only_with_their_own_kind() -> None:
    state = LiveState()
    state.observe(probe_env("c", "fast", [result(i, "AMD Instinct MI300X") for i in range(8)]), 1)
    state.observe(probe_env("c", "old", [result(i, "AMD Instinct MI250X") for i in range(4)]), 1)
    state.tick(2)
    assert flagged(state, 2) == {}


def test_too_few_peers_and_no_history_raise_nothing() -> None:
    state = LiveState()
    slow = {"tflops_bf16": 0.5}
    state.observe(probe_env("c", "n", [result(0, "AMD Instinct MI300X"), result(1, "AMD Instinct MI300X"),
                                       result(2, "AMD Instinct MI300X", slow)]), 1)  # fmt: skip
    state.tick(2)
    assert flagged(state, 2) == {}


def test_drop_against_its_own_history_fires_then_resolves() -> None:
    state, engine, rule = LiveState(), AlertEngine(), GpuUnderperformingRule()
    t = 0
    for scale in (1.0, 1.01, 0.99, 1.0):
        t += 3000 * NS
        state.observe(
            probe_env("c", "solo", [result(0, "NVIDIA H100 80GB HBM3", {"mem_bandwidth_bps": scale})]), t
        )
    state.tick(t)
    assert engine.evaluate([rule], state, t) == []
    t += 3000 * NS
    state.observe(probe_env("c", "solo", [result(0, "NVIDIA H100 80GB HBM3", {"mem_bandwidth_bps": 0.7})]), t)
    state.tick(t)
    [alert] = engine.evaluate([rule], state, t)
    assert (alert.state, alert.node, alert.rule) == ("firing", "solo", "gpu_underperforming")
    [finding] = alert.evidence["findings"]
    assert (finding["basis"], finding["metric"], finding["samples"]) == ("history", "mem_bandwidth_bps", 4)
    assert finding["drop"] == 0.3
    assert "30% below its history" in alert.summary
    t += 3000 * NS
    state.observe(probe_env("c", "solo", [result(0, "NVIDIA H100 80GB HBM3")]), t)
    state.tick(t)
    [resolved] = engine.evaluate([rule], state, t)
    assert resolved.state == "resolved" and resolved.fingerprint == alert.fingerprint


def _slow_cluster_events(recv_ns: int, ttl: float = 3600) -> list[tuple[Envelope, int]]:
    """Four MI300X nodes; n2's GPU runs FP16 matmuls 40 % slow."""
    return [
        (probe_env("c", f"n{i}", [result(0, "AMD Instinct MI300X", {"tflops_fp16": 0.6} if i == 2 else None)], ttl),
         recv_ns)
        for i in range(4)
    ]  # fmt: skip


def _slow_cluster(state: LiveState, recv_ns: int, ttl: float = 3600) -> None:
    for env, recv in _slow_cluster_events(recv_ns, ttl):
        state.observe(env, recv)


def test_expired_results_resolve_the_alert() -> None:
    state, engine, rule = LiveState(), AlertEngine(), GpuUnderperformingRule()
    _slow_cluster(state, 1 * NS, ttl=60)
    state.tick(2 * NS)
    [alert] = engine.evaluate([rule], state, 2 * NS)
    assert (alert.node, alert.evidence["findings"][0]["basis"]) == ("n2", "peers")
    state.tick(62 * NS)
    assert state.gpu_probes.live == {}  # type: ignore[union-attr]
    [resolved] = engine.evaluate([rule], state, 62 * NS)
    assert resolved.state == "resolved"


def test_results_taken_while_a_job_ran_are_discarded() -> None:
    state = LiveState()
    ras = Envelope(type=event_type("ras"), cluster="c", node="n2", agent="r", seq=1, ts=0, ttl=30,
                                   records=[RasRecord(endpoint="localhost:28028", format="json", health="ok")])  # fmt: skip
    state.observe(ras, 1 * NS)
    _slow_cluster(state, 10 * NS)  # n2's result arrives while its RAS fact is fresh
    state.tick(11 * NS)
    tracker = state.gpu_probes
    assert tracker is not None and tracker.discarded_busy == 1
    assert sorted(k[1] for k in tracker.live) == ["n0", "n1", "n3"]
    _slow_cluster(state, 40 * NS)  # the RAS fact expired at 31 s: the node is idle again
    state.tick(41 * NS)
    assert ("c", "n2", "gpu0") in flagged(state, 41 * NS)


def test_gpu_evidence_for_the_straggler_engine() -> None:
    state = LiveState()
    _slow_cluster(state, 1 * NS)
    state.tick(2 * NS)
    [evidence] = gpu_evidence(state, "c", "n2")
    assert evidence["gpu"] == 0 and evidence["findings"][0]["metric"] == "tflops_fp16"
    assert gpu_evidence(state, "c", "n1") == []


def test_replayed_history_refires_nothing() -> None:
    events = _slow_cluster_events(1 * NS)
    state, engine, rule = LiveState(), AlertEngine(), GpuUnderperformingRule()
    for env, recv in events:
        state.observe(env, recv)
    state.tick(2 * NS)
    [alert] = engine.evaluate([rule], state, 2 * NS)
    rebuilt = LiveState()  # a restarted aggregator: the same events replayed, the firing alerts reloaded
    for env, recv in events:
        rebuilt.observe(env, recv)
    rebuilt.tick(3 * NS)
    assert AlertEngine(engine.active.values()).evaluate([rule], rebuilt, 3 * NS) == []
    assert [c.fingerprint for c in rule.evaluate(rebuilt, 3 * NS)] == [alert.fingerprint]


def test_a_node_sending_only_inspector_summaries_runs_a_job() -> None:
    """An agent with raw records rate-limited to none still tells that a job runs: its summaries count as job data."""
    state = LiveState()
    summary = {"window_start_us": 0, "window_us": 5_000_000, "slice_us": 500_000, "comm_id": "c0", "rank": 0,
               "n_ranks": 8, "hostname": "n2", "pid": 1, "op_kind": "coll", "op": "AllReduce", "size_bucket": 1024,
               "count": 1, "bytes": 1024, "sn_first": 1, "sn_last": 1, "last_dump_ts_us": 1}  # fmt: skip
    env = Envelope(type=event_type("inspector_summary"), cluster="c", node="n2", agent="r", seq=1,
                                   ts=0, ttl=30, records=[msgspec.convert(summary, InspectorSummaryRecord)])  # fmt: skip
    state.observe(env, 1 * NS)
    _slow_cluster(state, 10 * NS)
    state.tick(11 * NS)
    tracker = state.gpu_probes
    assert tracker is not None and tracker.discarded_busy == 1
    assert sorted(k[1] for k in tracker.live) == ["n0", "n1", "n3"]
