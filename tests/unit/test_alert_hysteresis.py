"""The alert engine's generic machinery: hold-down per rule (``for_s`` / ``clear_s``), inhibition by a silent node,
drained nodes, job end, silences. Each rule is driven by a flapping input and its state changes are counted."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from ranksight.aggregator.actions.planner import ActionBreakerRule, ActionPlanner
from ranksight.aggregator.actions.settings import ActionSettings
from ranksight.aggregator.alerts import INHIBITIONS, AlertEngine, Condition
from ranksight.aggregator.analysis.hardware import NicErrorsRisingRule
from ranksight.aggregator.analysis.links import LinkDegradedRule
from ranksight.aggregator.analysis.nodes import NodeSilentRule
from ranksight.aggregator.analysis.rules import default_rules
from ranksight.aggregator.component_settings import AlertSettings
from ranksight.aggregator.rulebook import check_rule_names, rule_timings
from ranksight.aggregator.state import NS, LiveState
from ranksight.aggregator.timefmt import iso
from ranksight.core.config import ConfigError
from ranksight.schemas.alerts import Matcher, Silence
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import HeartbeatRecord, NicRecord, ProbeRecord, RasEventRecord, RasRecord
from ranksight.schemas.wire import event_type
from ranksight.settings import load_settings

T0 = 1_800_000_000 * NS
HOUR = 3600
RULE_TIMINGS = rule_timings()


@dataclass
class Scripted:
    """A rule whose condition is present when ``present(second)`` says so."""

    name: str
    present: Callable[[int], bool]
    node: str = "n1"
    job: str | None = None

    @property
    def for_s(self) -> float:  # the hold-down of the real rule of this name
        return RULE_TIMINGS.get(self.name, (0.0, 0.0))[0]

    @property
    def clear_s(self) -> float:
        return RULE_TIMINGS.get(self.name, (0.0, 0.0))[1]

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        if self.present((now_ns - T0) // NS):
            yield Condition(
                self.name, "warning", "c", f"{self.name} on {self.node}", node=self.node, job=self.job
            )


def run(
    engine: AlertEngine, rules: list, seconds: range, state: LiveState | None = None
) -> list[tuple[int, str]]:
    state = state or LiveState()
    out = []
    for t in seconds:
        now = T0 + t * NS
        state.tick(now)
        out += [(t, f"{a.rule}:{a.state}") for a in engine.evaluate(rules, state, now)]
    return out


def flapping(t: int) -> bool:
    """A steady fault seen unreliably: present 4 s, absent 5 s, present 1 s, absent 3 s ... (gaps below any clear_s)."""
    return t % 13 in (0, 1, 2, 3, 9)


def test_every_evaluated_rule_declares_its_timing_beside_it() -> None:
    # the aggregator evaluates default_rules() and the action planner's breaker rule (runtime.Aggregator)
    evaluated = [*default_rules(), ActionBreakerRule(ActionPlanner(ActionSettings()))]
    assert {r.name: (r.for_s, r.clear_s) for r in evaluated} == RULE_TIMINGS
    assert len({r.name for r in evaluated}) == len(evaluated)  # one rule per name


@pytest.mark.parametrize("rule", sorted(RULE_TIMINGS))
def test_each_rule_holds_a_flapping_condition_as_one_alert(rule: str) -> None:
    settings = AlertSettings()
    for_s, clear_s = settings.timing(rule, RULE_TIMINGS[rule])
    source = Scripted(rule, lambda t: t < HOUR and (flapping(t) if clear_s >= 5 else True))
    steady_for = for_s > 4  # a hold-down longer than the flapping runs never fires on them: nothing to count
    events = run(AlertEngine(settings=settings), [source], range(0, HOUR + int(clear_s) + 2))
    if steady_for:
        assert events == []
    else:
        assert [e for _, e in events] == [f"{rule}:firing", f"{rule}:resolved"]
        assert events[0][0] == int(for_s)
        last_seen = max(t for t in range(HOUR) if source.present(t))
        # resolved only once the fault ended, after clear_s: at the first evaluation (each second) that no longer
        # sees it when clear_s is 0
        assert events[1][0] == last_seen + max(clear_s, 1)


@pytest.mark.parametrize("rule", sorted(r for r, (f, _) in RULE_TIMINGS.items() if f > 4))
def test_rules_with_a_hold_down_fire_once_on_a_steady_fault_and_never_on_blips(rule: str) -> None:
    settings = AlertSettings()
    for_s, _ = settings.timing(rule, RULE_TIMINGS[rule])
    steady = run(AlertEngine(settings=settings), [Scripted(rule, lambda t: 100 <= t < 700)], range(0, 1200))
    assert [(t, e) for t, e in steady][:1] == [(100 + int(for_s), f"{rule}:firing")] and len(steady) == 2
    blips = run(
        AlertEngine(settings=settings), [Scripted(rule, lambda t: t % 60 < for_s - 1)], range(0, HOUR)
    )
    assert blips == []


def test_without_settings_the_engine_reports_each_change_and_with_them_flapping_is_counted() -> None:
    raw = run(AlertEngine(), [Scripted("nic_errors_rising", flapping)], range(0, 300))
    held = run(
        AlertEngine(settings=AlertSettings()), [Scripted("nic_errors_rising", lambda t: True)], range(0, 300)
    )
    assert len(raw) > 60  # what the issue saw: dozens of state changes in five minutes
    assert held == [(30, "nic_errors_rising:firing")]


def test_rule_timings_are_settings_and_unknown_rules_are_refused(tmp_path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[aggregator.alerts.rules.nic_errors_rising]\nfor_s = 5\n")
    settings = load_settings(cfg).aggregator.alerts
    assert settings.timing("nic_errors_rising", RULE_TIMINGS["nic_errors_rising"]) == (
        5,
        RULE_TIMINGS["nic_errors_rising"][1],
    )
    cfg.write_text("[aggregator.alerts.rules.no_such_rule]\nfor_s = 5\n")
    with pytest.raises(
        ConfigError, match=r"aggregator\.alerts\.rules\.no_such_rule: unknown rule 'no_such_rule'"
    ):
        check_rule_names(load_settings(cfg))  # what the aggregator does first
    policy = {"name": "p", "rules": ["straggler", "stragler"], "action": "slurm_drain"}
    with pytest.raises(ConfigError, match=r"policies \(p\).rules: unknown rule 'stragler'"):
        check_rule_names(load_settings(None, aggregator={"actions": {"policies": [policy]}}))


def _nic(seq: int, errors_per_s: float) -> Envelope:
    rec = NicRecord(name="mlx5_0/1", kind="rdma", state="ACTIVE", errors_per_s=errors_per_s)
    return Envelope(
        type=event_type("nic"), cluster="c", node="n1", agent="a", seq=seq + 1, ts=0, ttl=6.0, records=[rec]
    )


def test_nic_errors_rising_is_stable_on_bursty_errors() -> None:
    """Symbol errors that come in bursts (8 every 6 s, 1.33/s) read every 2 s give per-sample rates of 4, 0, 0, 4 ...:
    a rule on the last sample changes state at every read; the windowed rate fires once and holds."""
    state, engine, rule = LiveState(), AlertEngine(settings=AlertSettings()), NicErrorsRisingRule(1.0, 60.0)
    raw_engine, raw_state = AlertEngine(), LiveState()
    events: list[tuple[int, str]] = []
    raw: list[tuple[int, str]] = []
    for t in range(0, 1200, 2):
        rate = 4.0 if t % 6 == 0 else 0.0
        state.observe(_nic(t, rate), T0 + t * NS)
        raw_state.observe(_nic(t, rate), T0 + t * NS)
        events += run(engine, [rule], range(t, t + 2), state)
        raw += [(t, a.state) for a in raw_engine.evaluate([_LastSample()], raw_state, T0 + t * NS)]
    assert [e for _, e in events] == ["nic_errors_rising:firing"]
    assert len(raw) > 300  # the old rule: one state change per sample


class _LastSample:
    """The rule as it was: the last sample's rate against the threshold."""

    name = "nic_errors_rising"
    for_s, clear_s = NicErrorsRisingRule.for_s, NicErrorsRisingRule.clear_s

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        for dev in state.nics.devices.values():
            if (dev.record.errors_per_s or 0) >= 1.0:
                yield Condition(self.name, "warning", dev.cluster, "x", node=dev.node, key=dev.key)


def _probe(seq: int, src: str, dst: str, mbps: float, at: int) -> tuple[Envelope, int]:
    rec = ProbeRecord(src=src, dst=dst, dst_addr=f"10.0.0.{dst[-1]}", transport="tcp", mode="full",
                      upload_bps=mbps * 1e6, download_bps=mbps * 1e6, rtt_us=100.0)  # fmt: skip
    return Envelope(type=event_type("probe"), cluster="c", node=src, agent=src, seq=seq, ts=0, ttl=300.0,
                    records=[rec]), T0 + at * NS  # fmt: skip


def test_link_degraded_ignores_one_slow_probe_under_load_and_fires_once_on_a_steady_fault() -> None:
    state, engine, rule = LiveState(), AlertEngine(settings=AlertSettings()), LinkDegradedRule()
    events: list[tuple[int, str]] = []
    seq = 0
    for rnd in range(40):  # a probe round every 60 s; every third measurement of n1->n2 is slowed by CPU load
        at = rnd * 60
        for dst, mbps in (("n2", 300.0 if rnd % 3 == 2 else 9000.0), ("n3", 9400.0), ("n4", 9100.0)):
            seq += 1
            state.observe(*_probe(seq, "n1", dst, mbps, at))
        events += run(engine, [rule], range(at, at + 60), state)
    assert events == []
    for rnd in range(40, 60):  # now n1->n2 is degraded for good
        at = rnd * 60
        for dst, mbps in (("n2", 300.0), ("n3", 9400.0), ("n4", 9100.0)):
            seq += 1
            state.observe(*_probe(seq, "n1", dst, mbps, at))
        events += run(engine, [rule], range(at, at + 60), state)
    assert [e for _, e in events] == ["link_degraded:firing"]
    [alert] = engine.active.values()
    assert alert.node == "n1" and alert.entity == "link n1->n2"


def _beat(node: str, seq: int, at_s: int) -> tuple[Envelope, int]:
    env = Envelope(type=event_type("heartbeat"), cluster="c", node=node, agent=f"{node}-1", seq=seq, ts=0, ttl=10.0,
                   records=[HeartbeatRecord(hostname=node, version="1", pid=1, started_ns=0)])  # fmt: skip
    return env, T0 + at_s * NS


def test_a_silent_node_inhibits_what_it_explains_and_nothing_else() -> None:
    state = LiveState()
    for node in ("n1", "n2"):
        state.observe(*_beat(node, 1, 0))
    engine = AlertEngine(settings=AlertSettings())
    # n1 stops at 0: stale at 10 s (TTL), node_silent fires at 40 s (for_s 30); its GPU and rank conditions appear at
    # 30 s, while node_silent is pending: a node already silent explains them
    rules = [NodeSilentRule(), Scripted("gpu_missing", lambda t: t >= 30, node="n1"),
             Scripted("rank_missing", lambda t: t >= 30, node="n1", job="j1"),
             Scripted("gpu_overheating", lambda t: t >= 30, node="n2")]  # fmt: skip
    for t in range(1, 100, 5):
        state.observe(*_beat("n2", t, t))
    events = run(engine, rules, range(1, 100), state)
    assert [e for _, e in events] == ["node_silent:firing", "gpu_overheating:firing"]
    assert events[0][0] == 40 and {a.node for a in engine.active.values()} == {"n1", "n2"}
    assert set(engine.inhibited.values()) == {"node_silent"} and len(engine.inhibited) == 2


def test_inhibition_can_be_turned_off_and_is_declared_for_alertmanager_too() -> None:
    state = LiveState()
    state.observe(*_beat("n1", 1, 0))
    rules = [NodeSilentRule(), Scripted("gpu_missing", lambda t: True)]
    events = run(AlertEngine(settings=AlertSettings(inhibit=False)), rules, range(1, 60), state)
    assert {e for _, e in events} == {"gpu_missing:firing", "node_silent:firing"}
    assert [i.source for i in INHIBITIONS] == ["node_silent"]


def test_a_drained_node_raises_nothing_and_its_alerts_resolve() -> None:
    state = LiveState()
    state.observe(*_beat("n1", 1, 0))
    engine = AlertEngine(settings=AlertSettings(inhibit=False))  # both fire, then the drain resolves both
    rules = [NodeSilentRule(), Scripted("gpu_overheating", lambda t: True)]
    assert {e for _, e in run(engine, rules, range(1, 60), state)} == {
        "gpu_overheating:firing",
        "node_silent:firing",
    }
    engine.drained.add(("c", "n1"))
    resolved = engine.evaluate(rules, state, T0 + 61 * NS)
    assert {(a.rule, a.state, a.evidence["resolved_because"]) for a in resolved} == {
        ("gpu_overheating", "resolved", "drained"),
        ("node_silent", "resolved", "drained"),
    }
    assert run(engine, rules, range(62, 400), state) == []


def test_a_job_end_resolves_its_alerts_at_once() -> None:
    state = LiveState()
    rec = RasRecord(job_id="j1", endpoint="localhost:28028", format="json", health="ok")
    env = Envelope(
        type=event_type("ras"), cluster="c", node="n1", agent="a", seq=1, ts=0, ttl=30.0, records=[rec]
    )
    state.observe(env, T0)
    engine = AlertEngine(settings=AlertSettings())
    rules = [Scripted("comm_hang", lambda t: t < 20, job="j1")]
    assert run(engine, rules, range(1, 25), state) == [
        (1, "comm_hang:firing")
    ]  # clear_s 60: still firing at 24
    closed = RasEventRecord(job_id="j1", endpoint="localhost:28028", event="ENDPOINT_CLOSED")
    state.observe(Envelope(type=event_type("ras_event"), cluster="c", node="n1", agent="a", seq=2, ts=0, ttl=30.0,
                           records=[closed]), T0 + 25 * NS)  # fmt: skip
    [resolved] = run(engine, rules, range(25, 27), state)
    assert resolved == (25, "comm_hang:resolved")


def test_a_silence_marks_the_transitions_it_matches() -> None:
    engine = AlertEngine(settings=AlertSettings())
    engine.silences["s1"] = Silence(id="s1", matchers=[Matcher.parse("rule=gpu_overheating"), Matcher.parse("node=~n[12]")],
                                    starts_at=iso(T0) or "", ends_at=iso(T0 + 100 * NS) or "")  # fmt: skip
    rules = [Scripted("gpu_overheating", lambda t: t < 150, node=n) for n in ("n1", "n3")]
    alerts = {
        (a.node, a.state): a.silenced_by for r in [rules] for a in _transitions(engine, r, range(0, 500))
    }
    assert alerts == {
        ("n1", "firing"): ["s1"],
        ("n3", "firing"): [],
        ("n1", "resolved"): [],
        ("n3", "resolved"): [],
    }


def _transitions(engine: AlertEngine, rules: list, seconds: range) -> list:
    out = []
    state = LiveState()
    for t in seconds:
        out += engine.evaluate(rules, state, T0 + t * NS)
    return out


@pytest.mark.parametrize(
    ("text", "labels", "hit"),
    [("rule=a", {"rule": "a"}, True), ("rule!=a", {"rule": "a"}, False), ("node=~gpu-0.*", {"node": "gpu-01"}, True),
     ("node!~gpu-0.*", {"node": "gpu-11"}, True), ("node=~gpu", {"node": "gpu-1"}, False), ("job=", {}, True)],
)  # fmt: skip
def test_matchers_follow_alertmanager(text: str, labels: dict[str, str], hit: bool) -> None:
    assert Matcher.parse(text).matches(labels) is hit


@pytest.mark.parametrize("bad", ["rule", "pod=x", "node=~(", "=x"])
def test_bad_matchers_are_refused_with_the_reason(bad: str) -> None:
    with pytest.raises(ValueError):
        Matcher.parse(bad)


def test_link_degraded_compares_with_links_measured_at_the_same_time() -> None:
    """A load spike slows every probe of a round: links measured earlier at full speed are no baseline for it."""
    state, rule = LiveState(), LinkDegradedRule()
    seq = 0
    for dst in ("n3", "n4", "n5"):  # measured at full speed, a few minutes earlier (still fresh)
        seq += 1
        state.observe(*_probe(seq, "n1", dst, 9000.0, 450))
    for at in (600, 660):  # then, under load, n1->n2 and n6->n7 twice in a row, both slow
        for src, dst in (("n1", "n2"), ("n6", "n7"), ("n8", "n9")):
            seq += 1
            state.observe(*_probe(seq, src, dst, 300.0, at))
    state.tick(T0 + 661 * NS)
    assert list(rule.evaluate(state, T0 + 661 * NS)) == []


def test_an_aggregator_behind_its_ingest_does_not_call_its_own_lag_silence() -> None:
    """Heartbeats judged by receipt time: ingest minutes behind makes every node look silent at once. While it is
    behind, silence rules raise nothing (what fires stays); other rules go on; once caught up, real silence fires."""
    state = LiveState()
    for node in ("n1", "n2"):
        state.observe(*_beat(node, 1, 0))
    engine = AlertEngine(settings=AlertSettings())
    rules = [NodeSilentRule(), Scripted("gpu_overheating", lambda t: t >= 30, node="n2")]
    events = []
    for t in range(1, 120):  # no heartbeat ingested after 0: ingest is behind from 5 s on
        now = T0 + t * NS
        state.tick(now)
        events += [
            (t, f"{a.rule}:{a.state}") for a in engine.evaluate(rules, state, now, ingest_behind_s=t - 5)
        ]
    assert [e for _, e in events] == ["gpu_overheating:firing"]
    assert set(engine.inhibited.values()) == {"ingest behind"}
    events = run(engine, rules, range(120, 200), state)  # caught up, and still no heartbeat: real silence
    assert [e for _, e in events] == ["node_silent:firing", "node_silent:firing"]
    assert events[0][0] == 150  # its for_s counts from when the aggregator could judge it
