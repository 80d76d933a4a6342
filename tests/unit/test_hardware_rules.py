"""GPU/NIC live state and alert lifecycle, driven by envelopes and an injected clock (no I/O)."""

from __future__ import annotations

from msgspec.structs import replace

from ranksight.aggregator.alerts import AlertEngine
from ranksight.aggregator.analysis.rules import default_rules
from ranksight.aggregator.state import LiveState
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import GpuRecord, NicRecord
from ranksight.schemas.wire import event_type

NS = 1_000_000_000


def _env(kind: str, records: list, seq: int, node: str = "n1", ttl: float = 15.0) -> Envelope:
    return Envelope(
        type=event_type(kind), cluster="c", node=node, agent="a", seq=seq, ts=0, ttl=ttl, records=records
    )


def _run(state: LiveState, engine: AlertEngine, now_s: float) -> set[tuple[str, str, str | None, str]]:
    state.tick(int(now_s * NS))
    engine.evaluate(default_rules(), state, int(now_s * NS))
    return {(a.rule, a.state, a.node, a.summary) for a in engine.active.values()}


def _rules(state: LiveState, engine: AlertEngine, now_s: float) -> set[str]:
    return {rule for rule, *_ in _run(state, engine, now_s)}


def test_gpu_alerts_fire_and_resolve() -> None:
    state, engine = LiveState(), AlertEngine()
    healthy = [GpuRecord(index=0, throttled=False), GpuRecord(index=1, throttled=False)]
    state.observe(_env("gpu", healthy, 1), 0)
    assert _rules(state, engine, 1) == set()
    hot = GpuRecord(index=0, temperature_junction_c=108, ecc_uncorrectable=2, throttled=True,
                    throttle_reasons=["hw_thermal_slowdown"])  # fmt: skip
    for i, t in enumerate(range(5, 50, 5)):  # GPU 1 fell off the bus: only GPU 0 keeps reporting
        state.observe(_env("gpu", [hot], 2 + i), t * NS)
    fired = _rules(state, engine, 46)
    assert fired == {"gpu_overheating", "gpu_ecc_uncorrectable", "gpu_throttled", "gpu_missing"}
    missing = next(a for a in engine.active.values() if a.rule == "gpu_missing")
    assert "GPU 1" in missing.summary
    state.observe(_env("gpu", healthy, 20), 50 * NS)
    assert _rules(state, engine, 51) == set()


def test_gpu_throttled_needs_to_be_sustained() -> None:
    state, engine = LiveState(), AlertEngine()
    state.observe(_env("gpu", [GpuRecord(index=0, throttled=True)], 1), 0)
    state.observe(_env("gpu", [GpuRecord(index=0, throttled=True)], 2), 10 * NS)
    assert _rules(state, engine, 11) == set()
    state.observe(_env("gpu", [GpuRecord(index=0, throttled=False)], 3), 20 * NS)
    state.observe(_env("gpu", [GpuRecord(index=0, throttled=True)], 4), 40 * NS)
    assert _rules(state, engine, 41) == set()  # the run restarted at 40 s


def test_nic_alerts() -> None:
    state, engine = LiveState(), AlertEngine()
    up = NicRecord(name="mlx5_0/1", kind="rdma", state="ACTIVE")
    state.observe(_env("nic", [up, NicRecord(name="eth0", kind="netdev", state="up")], 1), 0)
    assert _rules(state, engine, 1) == set()
    seq = 2
    for t in range(2, 40, 2):
        flapping = NicRecord(name="eth0", kind="netdev", state="up", link_flaps=1 if t < 10 else 0)
        busy = replace(up, **{"congestion_per_s": 5000.0, "errors_per_s": 4.0})
        state.observe(_env("nic", [busy, flapping], seq), t * NS)
        seq += 1
    assert _rules(state, engine, 39) == {"nic_flapping", "nic_congestion", "nic_errors_rising"}
    state.observe(_env("nic", [replace(up, **{"state": "DOWN"})], seq), 40 * NS)
    rules = _run(state, engine, 41)
    assert ("nic_link_down", "firing", "n1", "n1 NIC mlx5_0/1 link is DOWN") in rules
    assert "nic_congestion" not in {r for r, *_ in rules}
    # eth0 stops being reported while the node keeps reporting mlx5_0/1: it vanished; mlx5_0/1 counts no more errors,
    # and once its errors leave the rate window (60 s) nic_errors_rising resolves
    for t in range(42, 102, 2):
        seq += 1
        state.observe(_env("nic", [replace(up, **{"errors_per_s": 0.0})], seq), t * NS)
        if t == 68:  # evaluated in time order: the tracker keeps only the samples the rate window still needs
            assert "nic_errors_rising" in _rules(state, engine, 69)
    assert {s for *_, s in _run(state, engine, 101)} == {"n1 NIC eth0 disappeared"}  # mlx5_0/1 is up again


def test_silent_node_devices_are_stale_not_missing() -> None:
    state, engine = LiveState(), AlertEngine()
    state.observe(_env("gpu", [GpuRecord(index=0)], 1), 0)
    assert _rules(state, engine, 100) == set()


def _alert(engine: AlertEngine, rule: str) -> tuple[str | None, dict]:
    alert = next(a for a in engine.active.values() if a.rule == rule)
    return alert.entity, alert.evidence


def test_gpu_alerts_name_the_gpu_and_nic_alerts_the_port() -> None:
    """Each alert names its own device (entity and evidence), GPU or NIC."""
    state, engine = LiveState(), AlertEngine()
    uuid = "GPU-5b8c2d7e-1f3a-4c59-9a0b-6d2e8f1c3a47"
    sick = GpuRecord(index=3, uuid=uuid, ecc_uncorrectable=2, throttled=True, temperature_edge_c=97.0,
                     throttle_reasons=["hw_slowdown"])  # fmt: skip
    port = NicRecord(name="mlx5_0/1", kind="rdma", state="DOWN")
    for i, t in enumerate(range(0, 45, 5)):
        state.observe(
            _env("gpu", [sick, GpuRecord(index=4, uuid="GPU-other")] if t == 0 else [sick], 1 + i), t * NS
        )
        state.observe(_env("nic", [port], 100 + i), t * NS)
    assert _rules(state, engine, 41) == {"gpu_ecc_uncorrectable", "gpu_throttled", "gpu_overheating", "gpu_missing",
                                         "nic_link_down"}  # fmt: skip
    for rule in ("gpu_ecc_uncorrectable", "gpu_throttled", "gpu_overheating"):
        entity, evidence = _alert(engine, rule)
        assert entity == "gpu 3", rule
        assert (evidence["gpu"], evidence["gpu_uuid"]) == (3, uuid), rule
        assert "nic" not in evidence, rule
    assert _alert(engine, "gpu_ecc_uncorrectable")[1]["ecc_uncorrectable"] == 2
    assert _alert(engine, "gpu_throttled")[1]["reasons"] == ["hw_slowdown"]
    assert _alert(engine, "gpu_overheating")[1]["temperature_edge_c"] == 97.0
    entity, evidence = _alert(engine, "gpu_missing")
    assert (entity, evidence["gpu"], evidence["gpu_uuid"]) == ("gpu 4", 4, "GPU-other")
    entity, evidence = _alert(engine, "nic_link_down")
    assert (entity, evidence["nic"], evidence["state"]) == ("nic mlx5_0/1", "mlx5_0/1", "DOWN")
    assert "gpu" not in evidence and "gpu_uuid" not in evidence
