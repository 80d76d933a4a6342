"""Live state is a pure function of events and the clock; the alert engine fires once, resolves, never re-fires."""

from __future__ import annotations

from ranksight.aggregator.alerts import AlertEngine
from ranksight.aggregator.analysis.nodes import NodeSilentRule
from ranksight.aggregator.state import NS, LiveState
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import HeartbeatRecord
from ranksight.schemas.wire import event_type

T0 = 1_800_000_000 * NS


def _beat(node: str, seq: int, ts: int, ttl: float = 10.0) -> Envelope:
    return Envelope(type=event_type("heartbeat"), cluster="c", node=node, agent=f"{node}-1", seq=seq, ts=ts, ttl=ttl,
                    records=[HeartbeatRecord(hostname=node, version="1", pid=1, started_ns=0)])  # fmt: skip


def test_expiry_uses_receipt_time_not_agent_clock() -> None:
    state = LiveState(gone_after_s=60)
    # The agent's clock is an hour ahead; the fact must still expire 10 s after receipt.
    state.observe(_beat("n1", 1, ts=T0 + 3600 * NS), recv_ns=T0)
    state.tick(T0 + 9 * NS)
    node = state.nodes.nodes[("c", "n1")]
    assert node.state == "alive" and round(node.clock_skew_s) == 3600
    state.tick(T0 + 11 * NS)
    assert node.state == "stale"
    state.tick(T0 + 71 * NS)
    assert node.state == "gone"


def test_older_fact_never_replaces_newer() -> None:
    state = LiveState()
    state.observe(_beat("n1", 2, T0 + 5 * NS), recv_ns=T0 + 5 * NS)
    state.observe(_beat("n1", 1, T0), recv_ns=T0)
    assert state.nodes.nodes[("c", "n1")].last_seen_ns == T0 + 5 * NS


def test_alert_fires_once_resolves_and_replay_does_not_refire() -> None:
    rules = [NodeSilentRule()]
    state = LiveState(gone_after_s=60)
    engine = AlertEngine()
    state.observe(_beat("n1", 1, T0), T0)
    state.tick(T0 + 20 * NS)
    fired = engine.evaluate(rules, state, T0 + 20 * NS)
    assert [(a.rule, a.state, a.node) for a in fired] == [("node_silent", "firing", "n1")]
    assert engine.evaluate(rules, state, T0 + 21 * NS) == []  # still firing: no new transition

    # Restart: replay the same events into fresh state, reload active alerts: nothing fires again.
    replayed, reloaded = LiveState(gone_after_s=60), AlertEngine(engine.active.values())
    replayed.observe(_beat("n1", 1, T0), T0)
    replayed.tick(T0 + 22 * NS)
    assert reloaded.evaluate(rules, replayed, T0 + 22 * NS) == []

    state.observe(_beat("n1", 2, T0 + 30 * NS), T0 + 30 * NS)
    state.tick(T0 + 31 * NS)
    resolved = engine.evaluate(rules, state, T0 + 31 * NS)
    assert [(a.state, a.fingerprint) for a in resolved] == [("resolved", fired[0].fingerprint)]
    assert resolved[0].resolved_at is not None
