"""One device state: the hardware rules and the straggler evidence read the same GPU/NIC state and "link up" test."""

from __future__ import annotations

from ranksight.aggregator.alerts import AlertEngine
from ranksight.aggregator.analysis.hardware import NicLinkDownRule
from ranksight.aggregator.analysis.straggler_live import corroboration
from ranksight.aggregator.state import NS, LiveState
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import GpuRecord, NicRecord
from ranksight.schemas.wire import event_type


def _env(kind: str, records: list, seq: int) -> Envelope:  # type: ignore[type-arg]
    return Envelope(type=event_type(kind), cluster="c", node="n1", agent="a", seq=seq, ts=0, ttl=60.0,
                    records=records)  # fmt: skip


def test_straggler_evidence_and_link_down_agree_on_which_links_are_up() -> None:
    state, engine = LiveState(), AlertEngine()
    nics = [NicRecord(name=name, kind="rdma", state=link) for name, link in
            (("ib0", "ACTIVE"), ("ib1", "unknown"), ("ib2", "DOWN"), ("eth0", None))]  # fmt: skip
    state.observe(_env("nic", nics, 1), 0)
    state.observe(_env("gpu", [GpuRecord(index=0, throttled=True, throttle_reasons=["thermal"])], 2), 0)
    state.tick(NS)
    engine.evaluate([NicLinkDownRule()], state, NS)
    assert {a.evidence["nic"] for a in engine.active.values()} == {"ib2"}
    assert corroboration(state, "c", "n1") == ["GPU 0 throttled (thermal)", "NIC ib2 is DOWN"]
    assert not state.stragglers.kinds & {"gpu", "nic"}  # no copies of the device state of its own


def test_a_forgotten_node_leaves_no_device_evidence() -> None:
    state = LiveState(forget_after_s=10)
    state.observe(_env("nic", [NicRecord(name="ib2", kind="rdma", state="DOWN")], 1), 0)
    assert corroboration(state, "c", "n1") == ["NIC ib2 is DOWN"]
    state.tick(11 * NS)
    assert corroboration(state, "c", "n1") == []


def test_a_gpu_gauge_is_compared_with_the_whole_cluster_s_gpus() -> None:
    """A GPU's clock is set against the median of every GPU of the cluster, not of one node's (GPUs keyed by index
    alone left one node's two GPUs, too few to compare with)."""
    state = LiveState()
    for seq, node in enumerate(("n1", "n2", "n3", "n4"), start=1):
        gpus = [GpuRecord(index=i, sclk_hz=1.0e9 if (node, i) == ("n1", 0) else 2.0e9) for i in range(2)]
        state.observe(Envelope(type=event_type("gpu"), cluster="c", node=node, agent="a" + node, seq=seq, ts=0,
                               ttl=60.0, records=gpus), 0)  # fmt: skip
    assert corroboration(state, "c", "n1") == ["GPU 0 clock 1000 MHz vs 2000 MHz typical"]
