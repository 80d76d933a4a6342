"""LiveEvents: bounded per-client queues; a client that falls behind is dropped, the others keep receiving."""

from __future__ import annotations

from ranksight.aggregator.http.events import LiveEvents
from ranksight.aggregator.state import NS, LiveState
from ranksight.schemas.alerts import Alert
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import HeartbeatRecord
from ranksight.schemas.wire import event_type


async def test_slow_client_is_dropped_and_publishing_never_waits() -> None:
    events = LiveEvents(queue_size=3)
    slow, fast = events.subscribe(), events.subscribe()
    for i in range(5):
        events.publish("alert", {"n": i})
        while not fast.queue.empty():  # the fast client keeps up
            fast.queue.get_nowait()
    assert slow.dropped and not fast.dropped
    assert events.clients == {fast} and events.dropped_total == 1
    events.publish("node", {"n": 5})
    assert fast.queue.get_nowait() == ("node", {"n": 5})
    events.close()
    assert fast.dropped and fast.queue.get_nowait() is None and not events.clients


async def test_tick_publishes_node_changes_once_then_alerts() -> None:
    events = LiveEvents(queue_size=100)
    client = events.subscribe()
    state = LiveState(gone_after_s=60)
    beat = HeartbeatRecord(hostname="n1", version="1", pid=1, started_ns=0)
    state.observe(Envelope(type=event_type("heartbeat"), cluster="c", node="n1", agent="a", seq=1, ts=0, ttl=5,
                           records=[beat]), 0)  # fmt: skip
    alert = Alert(rule="node_silent", severity="warning", fingerprint="f", state="firing", cluster="c", node="n1",
                  summary="s", started_at="t", updated_at="t")  # fmt: skip
    state.tick(1)
    events.tick(state, [])
    events.tick(state, [])  # no change: nothing new
    state.tick(6 * NS)  # TTL passed: stale
    events.tick(state, [alert])
    got = []
    while not client.queue.empty():
        got.append(client.queue.get_nowait())
    assert got == [("node", {"cluster": "c", "node": "n1", "state": "alive"}),
                   ("node", {"cluster": "c", "node": "n1", "state": "stale"}),
                   ("alert", alert.model_dump(mode="json"))]  # fmt: skip


def test_nodes_live_state_forgets_leave_no_trace_in_the_event_feed() -> None:
    events = LiveEvents(queue_size=100)
    state = LiveState(gone_after_s=60, forget_after_s=100)
    for node in ("n1", "n2"):
        beat = HeartbeatRecord(hostname=node, version="1", pid=1, started_ns=0)
        state.observe(Envelope(type=event_type("heartbeat"), cluster="c", node=node, agent="a", seq=1, ts=0, ttl=5,
                               records=[beat]), 0 if node == "n1" else 90 * NS)  # fmt: skip
    state.tick(NS)
    events.tick(state, [])
    state.tick(101 * NS)  # n1 silent past the horizon: forgotten
    events.tick(state, [])
    assert list(events._node_states) == [("c", "n2")]
