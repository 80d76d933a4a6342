"""The probe planner: decides who probes whom, in rounds of disjoint pairs, from the link map alone.

State-driven and replay-safe: a pair is due when the link map (rebuilt from DuckDB at start) holds no fresh result for
it, so a restart re-probes only what is missing or expired. Each round pairs every node at most once (a node is never in
two probes at once, so measurements do not disturb each other). Up to ``full_mesh_max_nodes`` nodes every pair is
probed, scheduled by the circle method: N-1 rounds for even N, N for odd. Above it, a sampled set: ring neighbours,
ring neighbours within each rail, and a few random pairs. A node that runs a job (fresh RAS or Inspector data, or such
data within the last ``job_hold_s``: under load a job's data can arrive after its short TTL lapsed) gets a light probe
(RTT only) and the result says why bandwidth was skipped.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from ranksight.aggregator.component_settings import ProbePlannerSettings
from ranksight.aggregator.state.links import Endpoint, LinkTracker
from ranksight.schemas.records.probe import ProbeCommand

if TYPE_CHECKING:
    from ranksight.aggregator.runtime import Aggregator

log = logging.getLogger(__name__)
Pair = tuple[str, str]  # (prober, probed), prober < probed


def full_mesh_rounds(nodes: Sequence[str]) -> list[list[Pair]]:
    """Every unordered pair exactly once, in rounds of disjoint pairs (circle method)."""
    ring: list[str | None] = list(sorted(nodes))
    if len(ring) % 2:
        ring.append(None)  # the node paired with None sits the round out
    n, rounds = len(ring), []
    for _ in range(n - 1):
        pairs = [_ordered(ring[i], ring[n - 1 - i]) for i in range(n // 2)]
        rounds.append([p for p in pairs if p is not None])
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return rounds


def sampled_pairs(endpoints: Sequence[Endpoint], random_pairs: int, rng: random.Random) -> list[Pair]:
    """Ring neighbours, ring neighbours within each rail, and ``random_pairs`` random pairs."""
    nodes = sorted(e.node for e in endpoints)
    pairs = set(_ring(nodes))
    rails: dict[str, list[str]] = {}
    for e in endpoints:
        if e.rail is not None:
            rails.setdefault(e.rail, []).append(e.node)
    for members in rails.values():
        pairs.update(_ring(sorted(members)))
    for _ in range(random_pairs if len(nodes) > 1 else 0):
        pair = _ordered(*rng.sample(nodes, 2))
        if pair is not None:
            pairs.add(pair)
    return sorted(pairs)


def disjoint_rounds(pairs: Iterable[Pair]) -> list[list[Pair]]:
    """Greedy: each pair goes to the first round where neither node is busy (at most 2*degree-1 rounds)."""
    rounds: list[list[Pair]] = []
    used: list[set[str]] = []
    for a, b in pairs:
        for i, nodes in enumerate(used):
            if a not in nodes and b not in nodes:
                rounds[i].append((a, b))
                nodes.update((a, b))
                break
        else:
            rounds.append([(a, b)])
            used.append({a, b})
    return rounds


def _ring(nodes: Sequence[str]) -> list[Pair]:
    if len(nodes) < 2:
        return []
    pairs = (_ordered(nodes[i], nodes[(i + 1) % len(nodes)]) for i in range(len(nodes)))
    return [p for p in pairs if p is not None]


def _ordered(a: str | None, b: str | None) -> Pair | None:
    if a is None or b is None or a == b:
        return None
    return (a, b) if a < b else (b, a)


@dataclass(frozen=True)
class PlannedProbe:
    cluster: str
    src: str
    dst: str
    command: ProbeCommand


class ProbePlanner:
    """Plans one round at a time from the live link map and sends it; ``skipped`` says which nodes got light probes."""

    def __init__(self, settings: ProbePlannerSettings, seed: int | None = None) -> None:
        self.settings = settings
        self.rng = random.Random(seed)
        self.pending: dict[tuple[str, str, str, str], int] = {}  # (cluster, src, dst, addr) -> commanded at
        self.skipped: dict[str, str] = {}  # node -> why its heavy probes are skipped
        self.job_seen: dict[tuple[str, str], int] = {}  # (cluster, node) -> when it last had fresh job data
        self.rounds = 0
        self.last_round: list[dict[str, Any]] = []

    @property
    def _timeout_ns(self) -> int:
        """How long a command counts as in flight: its answer, then its result's way through ingest."""
        return int(self.settings.command_timeout_s * 2e9)

    def plan(self, links: LinkTracker, now_ns: int) -> list[PlannedProbe]:
        """The next round: disjoint probes over due pairs (no fresh result and none in flight)."""
        out: list[PlannedProbe] = []
        self.skipped = {}
        # a command past its timeout is no longer in flight; dropped here, since a pair whose node left (forgotten
        # by live state) is never looked at again
        self.pending = {key: at for key, at in self.pending.items() if now_ns < at + self._timeout_ns}
        hold_ns = int(self.settings.job_hold_s * 1e9)
        self.job_seen = {key: at for key, at in self.job_seen.items() if now_ns < at + hold_ns}
        for cluster in sorted(links.clusters()):
            endpoints = {e.node: e for e in links.live_endpoints(cluster, now_ns)}
            for node in endpoints:
                if links.runs_job(cluster, node, now_ns):
                    self.job_seen[(cluster, node)] = now_ns
                if (cluster, node) in self.job_seen:
                    self.skipped[node] = (
                        f"node {node} runs a job (fresh RAS or Inspector data): bandwidth not probed"
                    )
            if len(endpoints) <= self.settings.full_mesh_max_nodes:
                schedule = full_mesh_rounds(list(endpoints))
            else:
                schedule = disjoint_rounds(
                    sampled_pairs(list(endpoints.values()), self.settings.random_pairs, self.rng)
                )
            for round_pairs in schedule:
                due = [
                    p
                    for p in (self._due(links, cluster, endpoints, pair, now_ns) for pair in round_pairs)
                    if p
                ]
                if due:
                    out.extend(due)
                    break
        return out

    def _due(self, links: LinkTracker, cluster: str, endpoints: dict[str, Endpoint], pair: Pair,
             now_ns: int) -> PlannedProbe | None:  # fmt: skip
        src, dst = pair
        target = endpoints[dst]
        for addr in target.addrs:
            key = (cluster, src, dst, target.transport, addr)
            commanded = self.pending.get((cluster, src, dst, addr))
            if commanded is not None:
                link = links.links.get(key)
                if (link is None or link.measured_ns < commanded) and now_ns < commanded + self._timeout_ns:
                    continue  # in flight, or its result is not ingested yet
                del self.pending[(cluster, src, dst, addr)]
            if links.is_fresh(key, now_ns):
                continue
            busy = self.skipped.get(src) or self.skipped.get(dst)
            s = self.settings
            cmd = ProbeCommand(peer=dst, addr=addr, port=target.port, mode="light" if busy else "full", skipped=busy,
                               echo_count=s.echo_count, bytes=s.bytes, seconds=s.seconds)  # fmt: skip
            return PlannedProbe(cluster, src, dst, cmd)
        return None

    async def run(self, agg: Aggregator) -> None:
        """Plan and send rounds until cancelled; a failed command is logged and retried when due again."""
        while self.settings.enabled:
            await asyncio.sleep(self.settings.round_pause_s)
            if agg.nc is None:
                continue
            state = agg.analysis_state
            if state is None:
                continue  # sharded: the analysis lead plans for every node
            now = time.time_ns()
            probes = self.plan(state.links, now)
            if not probes:
                continue
            for p in probes:
                self.pending[(p.cluster, p.src, p.dst, p.command.addr)] = now
            results = await asyncio.gather(*(self._send(agg, p) for p in probes))
            self.rounds += 1
            self.last_round = [{"src": p.src, "dst": p.dst, "addr": p.command.addr, "mode": p.command.mode,
                                "ok": ok} for p, ok in zip(probes, results, strict=True)]  # fmt: skip

    async def _send(self, agg: Aggregator, probe: PlannedProbe) -> bool:
        assert agg.nc is not None
        subject = agg.subjects.agent(probe.cluster, probe.src, "probe")
        body = msgspec.json.encode(probe.command)
        try:
            msg = await agg.nc.request(subject, body, timeout=self.settings.command_timeout_s)
        except Exception as exc:
            log.warning("probe %s -> %s not sent: %s", probe.src, probe.dst, exc)
            return False
        if msg.headers and msg.headers.get("Nats-Service-Error"):
            log.warning(
                "probe %s -> %s failed on the agent: %s",
                probe.src,
                probe.dst,
                msg.headers["Nats-Service-Error"],
            )
            return False
        return json.loads(msg.data).get("error") is None
