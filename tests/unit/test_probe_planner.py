"""Planner rounds (disjoint, full coverage), TTL-driven re-probes, busy nodes, and the link_degraded rule."""

from __future__ import annotations

import itertools
import random

import pytest

from ranksight.aggregator.analysis.links import LinkDegradedRule
from ranksight.aggregator.component_settings import ProbePlannerSettings
from ranksight.aggregator.probes import ProbePlanner, disjoint_rounds, full_mesh_rounds, sampled_pairs
from ranksight.aggregator.state import NS, LiveState
from ranksight.aggregator.state.links import Endpoint
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import ProbeEndpointRecord, ProbeRecord, RasRecord
from ranksight.schemas.wire import event_type

T0 = 1_700_000_000 * NS


def _assert_disjoint(rounds: list[list[tuple[str, str]]]) -> None:
    for pairs in rounds:
        nodes = [n for pair in pairs for n in pair]
        assert len(nodes) == len(set(nodes)), f"a node is in two probes at once: {pairs}"


@pytest.mark.parametrize("n", [*range(1, 20), 31, 64, 100])
def test_full_mesh_rounds_are_disjoint_and_cover_every_pair_once(n: int) -> None:
    nodes = [f"n{i:03d}" for i in range(n)]
    rounds = full_mesh_rounds(nodes)
    _assert_disjoint(rounds)
    covered = [p for r in rounds for p in r]
    assert sorted(covered) == sorted(itertools.combinations(sorted(nodes), 2))  # each pair exactly once
    assert len(rounds) <= n  # O(N): N-1 rounds for even N, N for odd


@pytest.mark.parametrize("n", [17, 50, 200, 1000])
def test_sampled_pairs_cover_ring_and_rails_in_few_rounds(n: int) -> None:
    eps = [Endpoint("c", f"n{i:04d}", ["10.0.0.1"], 1, "tcp", f"rail{i % 4}", 0) for i in range(n)]
    pairs = sampled_pairs(eps, random_pairs=8, rng=random.Random(1))
    names = sorted(e.node for e in eps)
    ring = {tuple(sorted((names[i], names[(i + 1) % n]))) for i in range(n)}
    assert ring <= set(pairs)
    rail0 = sorted(e.node for e in eps if e.rail == "rail0")
    assert tuple(sorted((rail0[0], rail0[1]))) in pairs
    assert len(pairs) <= 3 * n + 8  # sampled, not N^2
    rounds = disjoint_rounds(pairs)
    _assert_disjoint(rounds)
    assert sorted(p for r in rounds for p in r) == sorted(pairs)
    assert len(rounds) <= 12  # bounded by the degree, not by N


def _env(kind: str, node: str, records: list, ttl: float, seq: int = 1) -> Envelope:
    return Envelope(type=event_type(kind), cluster="c", node=node, agent=f"ag-{node}", seq=seq, ts=T0, ttl=ttl,
                    records=records)  # fmt: skip


def _state(nodes: list[str]) -> LiveState:
    state = LiveState()
    for i, node in enumerate(nodes):
        ep = ProbeEndpointRecord(addrs=[f"10.0.0.{i + 1}"], port=28100)
        state.observe(_env("probe_endpoint", node, [ep], ttl=10_000), T0)
    state.tick(T0)
    return state


def _measure(state: LiveState, src: str, dst: str, addr: str, at: int, up: float = 1e10, down: float = 1e10,
             ttl: float = 60, mode: str = "full") -> None:  # fmt: skip
    rec = ProbeRecord(src=src, dst=dst, dst_addr=addr, mode=mode, rtt_us=50, upload_bps=up, download_bps=down)
    state.observe(_env("probe", src, [rec], ttl=ttl), at)


def _run_rounds(
    planner: ProbePlanner, state: LiveState, now: int, ttl: float = 60
) -> list[list[tuple[str, str]]]:
    """Plan rounds until nothing is due, 'measuring' each planned probe right away."""
    rounds = []
    for _ in range(100):
        state.tick(now)
        planned = planner.plan(state.links, now)
        if not planned:
            return rounds
        rounds.append([(p.src, p.dst) for p in planned])
        for p in planned:
            _measure(state, p.src, p.dst, p.command.addr, now, ttl=ttl)
        now += NS
    raise AssertionError("planner never converged")


def test_planner_probes_every_pair_then_waits_until_ttl_expires() -> None:
    nodes = ["a", "b", "c", "d", "e"]
    state = _state(nodes)
    planner = ProbePlanner(ProbePlannerSettings(), seed=0)
    rounds = _run_rounds(planner, state, T0, ttl=60)
    _assert_disjoint(rounds)
    assert sorted(p for r in rounds for p in r) == sorted(itertools.combinations(nodes, 2))
    assert len(rounds) == 5
    # Everything fresh: nothing to do 30 s later.
    state.tick(T0 + 30 * NS)
    assert planner.plan(state.links, T0 + 30 * NS) == []
    # Past the TTL every link is due again.
    later = T0 + 120 * NS
    state.tick(later)
    assert state.links.links[("c", "a", "b", "tcp", "10.0.0.2")].fresh is False
    again = planner.plan(state.links, later)
    assert again and all(p.command.mode == "full" for p in again)


def test_only_the_expired_link_is_reprobed() -> None:
    state = _state(["a", "b", "c"])
    planner = ProbePlanner(ProbePlannerSettings(), seed=0)
    _run_rounds(planner, state, T0, ttl=600)
    _measure(state, "a", "c", "10.0.0.3", T0 - 1000 * NS, ttl=1)  # older than the last one: ignored
    _measure(state, "b", "c", "10.0.0.3", T0 + 10 * NS, ttl=1)  # a newer, short-lived result
    now = T0 + 20 * NS
    state.tick(now)
    planned = planner.plan(state.links, now)
    assert [(p.src, p.dst) for p in planned] == [("b", "c")]


def test_busy_node_gets_light_probe_and_says_why() -> None:
    state = _state(["a", "b", "c", "d"])
    state.observe(
        _env("ras", "b", [RasRecord(endpoint="localhost:28028", format="json", health="ok")], ttl=30), T0
    )
    planner = ProbePlanner(ProbePlannerSettings(), seed=0)
    state.tick(T0)
    planned = []
    for _ in range(3):  # three rounds cover the four nodes; mark each round in flight like the sender does
        for p in planner.plan(state.links, T0):
            planner.pending[(p.cluster, p.src, p.dst, p.command.addr)] = T0
            planned.append(p)
    by_pair = {(p.src, p.dst): p.command for p in planned}
    assert by_pair[("a", "b")].mode == "light"
    assert "node b runs a job" in (by_pair[("a", "b")].skipped or "")
    assert by_pair[("c", "d")].mode == "full" and by_pair[("c", "d")].skipped is None
    # Once the RAS data expires the node is idle again.
    assert not state.links.runs_job("c", "b", T0 + 31 * NS)


def test_a_job_whose_data_arrives_late_keeps_its_nodes_on_light_probes() -> None:
    """Inspector facts live 3 s; a loaded agent or aggregator can leave a gap between them. The job is still there."""
    state = _state(["a", "b"])
    planner = ProbePlanner(ProbePlannerSettings(job_hold_s=60), seed=0)
    state.observe(_env("inspector", "b", [], ttl=3), T0)
    state.tick(T0)
    assert planner.plan(state.links, T0)[0].command.mode == "light"
    gap = T0 + 10 * NS  # its data lapsed 7 s ago; no result came back: the pair is due again
    planner.pending.clear()
    state.tick(gap)
    [probe] = planner.plan(state.links, gap)
    assert probe.command.mode == "light" and "node b runs a job" in (probe.command.skipped or "")
    later = T0 + 61 * NS  # no job data for a minute: the node is idle
    state.tick(later)
    assert planner.plan(state.links, later)[0].command.mode == "full"


def test_link_degraded_against_peers_and_own_history() -> None:
    state = _state(["a", "b", "c", "d"])
    rule = LinkDegradedRule()
    for src, dst, addr in [("a", "b", "10.0.0.2"), ("a", "d", "10.0.0.4"), ("b", "d", "10.0.0.4")]:
        _measure(state, src, dst, addr, T0)
    _measure(state, "a", "c", "10.0.0.3", T0, up=4e7, down=4e7)  # 40 Mbit/s among 10 Gbit/s links
    state.tick(T0)
    found = list(rule.evaluate(state, T0))
    assert [c.key for c in found] == ["a->c/tcp/10.0.0.3"]
    assert found[0].evidence["upload_bps"]["comparable_median_bps"] == 1e10
    # A link that is alone in its class but dropped against its own history.
    solo = _state(["x", "y"])
    for i in range(4):
        _measure(solo, "x", "y", "10.0.0.2", T0 + i * NS, up=1e9)
    _measure(solo, "x", "y", "10.0.0.2", T0 + 5 * NS, up=2e8)
    solo.tick(T0 + 5 * NS)
    assert list(rule.evaluate(solo, T0 + 5 * NS)) == []  # one slow measurement (CPU load?) is not enough
    _measure(solo, "x", "y", "10.0.0.2", T0 + 5 * NS + 1, up=2.5e8)
    solo.tick(T0 + 5 * NS + 1)
    (cond,) = rule.evaluate(solo, T0 + 5 * NS + 1)
    assert cond.evidence["upload_bps"]["own_history_median_bps"] == 1e9
    assert cond.evidence["upload_bps"]["value_bps"] == 2.5e8  # the better of the two: both are low
    # Healthy: nothing.
    _measure(solo, "x", "y", "10.0.0.2", T0 + 6 * NS, up=9e8)
    solo.tick(T0 + 6 * NS)
    assert list(rule.evaluate(solo, T0 + 6 * NS)) == []


def test_link_degraded_judges_only_measurements_that_timed_the_link() -> None:
    """A probe whose end was stalled (busy, or starved of CPU) measured the host: it accuses no link. A stalled peer is
    still a baseline: its link carried at least that much."""
    state = _state(["a", "b", "c", "d"])
    rule = LinkDegradedRule()

    def measure(dst: str, at: int, bps: float, stall: float) -> None:
        rec = ProbeRecord(src="a", dst=dst, dst_addr=f"10.0.0.{ord(dst) - 96}", rtt_us=50, upload_bps=bps,
                          download_bps=bps, src_stall_share=stall, dst_stall_share=stall / 2)  # fmt: skip
        state.observe(_env("probe", "a", [rec], ttl=600), at)

    for at in (T0, T0 + 60 * NS):  # a->b slow twice in a row, but each time on a starved host
        measure("b", at, 4e7, stall=0.7)
        measure("c", at, 1e9, stall=0.6)
        measure("d", at, 1.1e9, stall=0.5)
    state.tick(T0 + 60 * NS)
    assert list(rule.evaluate(state, T0 + 60 * NS)) == []
    for at in (T0 + 120 * NS, T0 + 180 * NS):  # now slow on a quiet host, beside peers measured on a busy one
        measure("b", at, 4e7, stall=0.05)
        measure("c", at, 1e9, stall=0.6)
        measure("d", at, 1.1e9, stall=0.5)
    state.tick(T0 + 180 * NS)
    (cond,) = rule.evaluate(state, T0 + 180 * NS)
    assert cond.key == "a->b/tcp/10.0.0.2" and cond.evidence["stall_share"] == 0.05
    assert cond.evidence["upload_bps"]["comparable_median_bps"] == 1.05e9
    assert "own_history_median_bps" not in cond.evidence["upload_bps"]  # two earlier ones: below min_history


def test_commands_to_nodes_that_left_are_not_remembered() -> None:
    state = LiveState()
    for i, node in enumerate(["a", "b"]):
        state.observe(
            _env("probe_endpoint", node, [ProbeEndpointRecord(addrs=[f"10.0.0.{i}"], port=1)], ttl=10), T0
        )
    state.tick(T0)
    planner = ProbePlanner(ProbePlannerSettings(command_timeout_s=5), seed=0)
    for p in planner.plan(state.links, T0):  # sent, never answered: "b" left
        planner.pending[(p.cluster, p.src, p.dst, p.command.addr)] = T0
    assert planner.pending
    later = T0 + 100 * NS
    state.observe(
        _env("probe_endpoint", "a", [ProbeEndpointRecord(addrs=["10.0.0.0"], port=1)], ttl=10), later
    )
    state.tick(later)
    assert planner.plan(state.links, later) == []  # "a" alone: no pair to probe
    assert planner.pending == {}
