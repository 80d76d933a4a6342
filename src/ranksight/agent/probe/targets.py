"""Which probe commands an agent obeys: only probes of a registered agent's probe endpoint, within the size caps.

The bus is not trusted with the target: a ``probe`` command names a peer node, an address and a port, and the agent
probes only what that peer itself announced in its ``probe_endpoint`` events (which the agent hears on
``<prefix>.ev.<cluster>.*.probe_endpoint``; the subject's node token says who announced, and NATS permissions let a
node publish only on its own subjects). Anything else, a port scan included, is refused, as is a size above the
probe server caps. An announcement counts for its TTL (the same one the aggregator uses).

Nor does a node choose where others send traffic: an announced address outside the cluster's probe networks
(``agent.collectors.probe.allow``, the networks the probe servers accept clients from) is dropped, so a node cannot
point every agent's probes at a third party; and the bytes this agent's probes send to one address are bounded per
minute (``max_bytes_per_peer_per_minute``, the same bound its own server keeps per client).
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ranksight.agent.probe.server import IpNetwork, is_allowed
from ranksight.errors import RefusedError
from ranksight.schemas.records.probe import ProbeCommand
from ranksight.schemas.subjects import sanitize_token

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
    networks: Sequence[IpNetwork] = ()  # announced addresses outside these are dropped (empty: any)
    max_bytes_per_target_per_minute: int | None = None  # None: unbounded
    _endpoints: dict[str, _Endpoint] = field(default_factory=dict)  # node token -> its announcement
    _sent: dict[str, tuple[float, int]] = field(
        default_factory=dict
    )  # address -> (minute began, bytes planned)

    def observe(self, node: str, addrs: list[str], port: int, ttl_s: float, now: float) -> None:
        """Remember ``node``'s announced endpoint (``node``: its subject token) until ``now + ttl_s``: those of its
        addresses inside the probe networks."""
        if not math.isfinite(ttl_s) or ttl_s <= 0:
            return
        inside = frozenset(addr for addr in addrs if is_allowed(addr, self.networks) and _is_ip(addr))
        self._endpoints.pop(node, None)  # re-insert: the dict stays ordered oldest announcement first
        if not inside:
            return  # nothing of it may be probed
        self._endpoints[node] = _Endpoint(inside, port, now + min(ttl_s, MAX_TTL_S))
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
        self._charge(cmd, now)

    def _charge(self, cmd: ProbeCommand, now: float) -> None:
        """Count the bytes ``cmd`` may move to its address this minute; refuse it past the per-target bound."""
        if self.max_bytes_per_target_per_minute is None:
            return
        planned = 2 * cmd.bytes if cmd.mode == "full" else 0  # both directions; a light probe is echoes only
        began, sent = self._sent.get(cmd.addr, (now, 0))
        if now - began >= 60:
            began, sent = now, 0
        if sent + planned > self.max_bytes_per_target_per_minute:
            raise TargetRefused(
                f"probe refused: {cmd.addr} has had {sent} probe bytes this minute, and this agent sends one address "
                f"at most {self.max_bytes_per_target_per_minute} (agent.collectors.probe.max_bytes_per_peer_per_minute)"
            )
        self._sent[cmd.addr] = (began, sent + planned)
        for addr in [a for a, (t, _) in self._sent.items() if now - t >= 60]:
            del self._sent[addr]  # bounded: only addresses probed within the minute are kept


def _is_ip(addr: str) -> bool:
    """An address literal: a name could resolve anywhere, so it is never a target."""
    try:
        ipaddress.ip_address(addr.split("%", 1)[0])
    except ValueError:
        return False
    return True
