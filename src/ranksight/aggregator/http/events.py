"""Live events for ``/events`` (server-sent events): alert transitions and node state changes.

Each client has its own bounded queue; publishing never waits. A client whose queue is full is dropped (its stream
ends; the browser's EventSource reconnects and re-reads the API), so a slow reader can never slow ingest or the tick.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ranksight.schemas.alerts import Alert

if TYPE_CHECKING:
    from ranksight.aggregator.state import LiveState

Event = tuple[str, dict[str, Any]]  # (SSE event name, JSON data)


@dataclass(eq=False)
class Subscriber:
    queue: asyncio.Queue[Event | None]
    dropped: bool = False


@dataclass
class LiveEvents:
    queue_size: int
    clients: set[Subscriber] = field(default_factory=set)
    dropped_total: int = 0
    published_total: int = 0
    _node_states: dict[tuple[str, str], str] = field(default_factory=dict)

    def subscribe(self) -> Subscriber:
        client = Subscriber(asyncio.Queue(self.queue_size))
        self.clients.add(client)
        return client

    def unsubscribe(self, client: Subscriber) -> None:
        self.clients.discard(client)

    def publish(self, name: str, data: dict[str, Any]) -> None:
        self.published_total += 1
        for client in list(self.clients):
            try:
                client.queue.put_nowait((name, data))
            except asyncio.QueueFull:
                client.dropped = True
                self.clients.discard(client)
                self.dropped_total += 1

    def tick(self, state: LiveState, transitions: list[Alert]) -> None:
        """Called by ``Aggregator.tick``: publish its alert transitions and every node whose state changed."""
        states: dict[tuple[str, str], str] = {}
        for key, node in state.nodes.nodes.items():
            if self._node_states.get(key) != node.state:
                self.publish("node", {"cluster": node.cluster, "node": node.node, "state": node.state})
            states[key] = node.state
        self._node_states = states  # a node live state forgot is forgotten here too
        for alert in transitions:
            self.publish("alert", alert.model_dump(mode="json"))

    def close(self) -> None:
        """End every stream (shutdown)."""
        for client in list(self.clients):
            client.dropped = True
            try:
                client.queue.put_nowait(None)
            except asyncio.QueueFull:
                pass  # its handler is not waiting on the queue: it sees ``dropped`` next
        self.clients.clear()
