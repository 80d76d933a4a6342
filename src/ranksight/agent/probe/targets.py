"""Which probe commands an agent obeys: only probes of a registered agent's probe endpoint, within the size caps.

The bus is not trusted with the target: a ``probe`` command names a peer node, an address and a port, and the agent
probes only what that peer itself announced in its ``probe_endpoint`` events (which the agent hears on
``<prefix>.ev.<cluster>.*.probe_endpoint``; the subject's node token says who announced, and NATS permissions let a
node publish only on its own subjects). Anything else, a port scan included, is refused, as is a size above the
probe server caps. An announcement counts for its TTL (the same one the aggregator uses).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ranksight.errors import RefusedError
from ranksight.schemas.subjects import sanitize_token
from ranksight.schemas.twins import ProbeCommand

MAX_TTL_S = 3600.0  # an announcement counts this long at most, whatever TTL it claims


class TargetRefused(RefusedError, ValueError):
    """A probe command this agent will not run; the message says why."""


@dataclass(frozen=True)
class _Endpoint:
    addrs: frozenset[str]
    port: int
    expires: float


@dataclass
class ProbeTargets:
    max_bytes: int  # per direction
    max_seconds: float  # per direction
    max_peers: int  # announcements remembered at most
    _endpoints: dict[str, _Endpoint] = field(default_factory=dict)  # node token -> its announcement

    def observe(self, node: str, addrs: list[str], port: int, ttl_s: float, now: float) -> None:
        """Remember ``node``'s announced endpoint (``node``: its subject token) until ``now + ttl_s``."""
        if not math.isfinite(ttl_s) or ttl_s <= 0:
            return
        self._endpoints.pop(node, None)  # re-insert: the dict stays ordered oldest announcement first
        self._endpoints[node] = _Endpoint(frozenset(addrs), port, now + min(ttl_s, MAX_TTL_S))
        while len(self._endpoints) > self.max_peers:
            del self._endpoints[next(iter(self._endpoints))]

    def check(self, cmd: ProbeCommand, now: float) -> None:
        """Raise :class:`TargetRefused` unless ``cmd`` aims at a registered endpoint within the caps."""
        if cmd.bytes > self.max_bytes or cmd.seconds > self.max_seconds:
            raise TargetRefused(
                f"probe of {cmd.bytes} bytes / {cmd.seconds} s per direction refused: this agent probes at most "
                f"{self.max_bytes} bytes and {self.max_seconds} s (agent.collectors.probe.max_bytes, max_seconds)"
            )
        endpoint = self._endpoints.get(sanitize_token(cmd.peer))
        if endpoint is None or endpoint.expires < now:
            raise TargetRefused(f"probe refused: node {cmd.peer!r} has no registered probe endpoint")
        if cmd.addr not in endpoint.addrs or cmd.port != endpoint.port:
            raise TargetRefused(
                f"probe refused: {cmd.addr}:{cmd.port} is not the probe endpoint node {cmd.peer!r} registered"
            )
