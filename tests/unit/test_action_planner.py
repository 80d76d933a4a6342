"""The action planner's guard rails, on alerts as the engine fires them: dry-run, approval, the circuit breaker, one
action per incident, cooldown, operator drains, confidence, corroboration, duration, Xid classes; the policy settings'
validation; and the Slurm node state as scontrol 22.05 prints it (fixtures/slurm)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ranksight.aggregator.actions.executors import parse_show_node
from ranksight.aggregator.actions.model import action_id
from ranksight.aggregator.actions.planner import ActionPlanner
from ranksight.aggregator.actions.settings import ActionSettings
from ranksight.aggregator.analysis.xid import resolution
from ranksight.aggregator.timefmt import iso
from ranksight.core.config import ConfigError
from ranksight.schemas.alerts import Alert
from ranksight.settings import load_settings

NS = 1_000_000_000
T0 = 1_800_000_000 * NS


def alert(node: str, rule: str = "gpu_ecc_uncorrectable", started: int = T0, **kw: Any) -> Alert:
    fields: dict[str, Any] = dict(rule=rule, severity="critical", fingerprint=f"{rule}:{node}", state="firing",
                                  cluster="c", node=node, summary=f"{rule} on {node}", started_at=iso(started),
                                  updated_at=iso(started))  # fmt: skip
    return Alert(**{**fields, **kw})


def settings(mode: str = "enforce", **kw: Any) -> ActionSettings:
    policy = {"name": "drain", "rules": ["gpu_ecc_uncorrectable", "straggler"], "action": "slurm_drain",
              **kw.pop("policy", {})}  # fmt: skip
    return ActionSettings(mode=mode, policies=[policy], **kw)  # type: ignore[arg-type,list-item]


def statuses(decided: list[Any]) -> dict[str | None, str]:
    return {a.node: a.status for a in decided}


def test_breaker_stops_a_storm_of_twenty_findings_at_its_limit() -> None:
    planner = ActionPlanner(settings(max_nodes_per_window=4, max_cluster_fraction=0.5))
    storm = [alert(f"n{i:02}") for i in range(20)]
    decided = planner.plan(storm, {"c": 100}, set(), T0)
    counts = sorted(a.status for a in decided)
    assert counts.count("queued") == 4 and counts.count("breaker_open") == 16
    assert planner.breaker.open_since_ns == {"c": T0}
    assert "circuit breaker open: 4 of 100 nodes" in next(
        a.why for a in decided if a.status == "breaker_open"
    )
    # the next tick decides nothing again: one decision per incident
    assert planner.plan(storm, {"c": 100}, set(), T0 + NS) == []


def test_breaker_limits_by_share_of_the_cluster() -> None:
    planner = ActionPlanner(settings(max_nodes_per_window=10, max_cluster_fraction=0.1))
    decided = planner.plan([alert(f"n{i}") for i in range(5)], {"c": 32}, set(), T0)
    assert sorted(a.status for a in decided).count("queued") == 3  # 10 % of 32 nodes


def test_breaker_window_frees_room_and_closes() -> None:
    planner = ActionPlanner(settings(max_nodes_per_window=1, window_s=60, cooldown_s=0))
    assert statuses(planner.plan([alert("a"), alert("b")], {"c": 10}, set(), T0)) == {
        "a": "queued",
        "b": "breaker_open",
    }
    later = T0 + 61 * NS
    assert statuses(planner.plan([alert("c", started=later)], {"c": 10}, set(), later)) == {"c": "queued"}
    assert planner.breaker.open_since_ns == {"c": T0}  # c took the room there was: still no room
    assert planner.plan([], {"c": 10}, set(), later + 61 * NS) == []
    assert planner.breaker.open_since_ns == {}


def test_dry_run_acts_on_nothing_and_says_what_the_breaker_would_do() -> None:
    planner = ActionPlanner(settings(mode="dry_run", max_nodes_per_window=1))
    decided = planner.plan([alert("a"), alert("b")], {"c": 10}, set(), T0)
    assert {a.status for a in decided} == {"planned"}
    assert not any(a.status == "queued" for a in planner.actions.values())
    assert [a.result for a in decided] == ["", decided[1].result] and "would be stopped" in decided[1].result
    # the operator switches to enforce: the planned incidents are decided again, and now act
    planner.settings = settings(mode="enforce", max_nodes_per_window=1)
    assert statuses(planner.plan([alert("a"), alert("b")], {"c": 10}, set(), T0 + NS)) == {
        "a": "queued", "b": "breaker_open"}  # fmt: skip


def test_approval_mode_waits_then_approve_or_reject() -> None:
    planner = ActionPlanner(settings(mode="approve", max_nodes_per_window=1))
    decided = planner.plan([alert("a"), alert("b")], {"c": 10}, set(), T0)
    assert {a.status for a in decided} == {"awaiting_approval"}
    a, b = decided
    approved = planner.approve(a.id, "alice", {"c": 10}, T0 + NS)
    assert (approved.status, approved.who) == ("queued", "alice")
    with pytest.raises(ValueError, match="circuit breaker open"):
        planner.approve(b.id, "alice", {"c": 10}, T0 + NS)
    assert planner.reject(b.id, "bob", T0 + NS).status == "rejected"
    with pytest.raises(ValueError, match="not awaiting approval"):
        planner.approve(b.id, "alice", {"c": 10}, T0 + NS)
    with pytest.raises(ValueError, match="no action"):
        planner.reject("nope", "bob", T0)


def test_awaiting_approval_expires() -> None:
    planner = ActionPlanner(settings(mode="approve", approval_timeout_s=60))
    planner.plan([alert("a")], {"c": 10}, set(), T0)
    assert planner.expire(T0 + 30 * NS) == []
    assert [a.status for a in planner.expire(T0 + 61 * NS)] == ["expired"]


def test_cooldown_and_operator_drains_skip() -> None:
    planner = ActionPlanner(settings(cooldown_s=600, max_nodes_per_window=10, max_cluster_fraction=1))
    planner.plan([alert("a")], {"c": 10}, set(), T0)
    # another incident on the same node within the cooldown: skipped
    other = alert("a", rule="straggler", severity="warning")
    assert statuses(planner.plan([other], {"c": 10}, set(), T0 + 60 * NS)) == {"a": "skipped"}
    # a node an operator drained in ranksight: skipped
    assert statuses(planner.plan([alert("b")], {"c": 10}, {("c", "b")}, T0)) == {"b": "skipped"}


def test_same_incident_once_a_new_incident_again() -> None:
    planner = ActionPlanner(settings(cooldown_s=0, max_nodes_per_window=10, max_cluster_fraction=1))
    first = planner.plan([alert("a")], {"c": 10}, set(), T0)
    assert planner.plan([alert("a")], {"c": 10}, set(), T0 + NS) == []
    # the alert resolved and fired again later: a new incident (new started_at), a new action
    again = planner.plan([alert("a", started=T0 + 100 * NS)], {"c": 10}, set(), T0 + 100 * NS)
    assert len(again) == 1 and again[0].id != first[0].id
    assert first[0].id == action_id("drain", "gpu_ecc_uncorrectable:a", iso(T0) or "")


def test_for_s_confidence_and_corroboration() -> None:
    planner = ActionPlanner(settings(policy={"for_s": 30, "min_confidence": 0.8, "min_corroboration": 1},
                                     max_nodes_per_window=10, max_cluster_fraction=1))  # fmt: skip
    weak = alert(
        "a", rule="straggler", severity="warning", evidence={"confidence": 0.5, "corroboration": ["gpu hot"]}
    )
    sure = alert("b", rule="straggler", severity="warning", evidence={"confidence": 0.9, "corroboration": []})
    backed = alert(
        "c", rule="straggler", severity="warning", evidence={"confidence": 0.9, "corroboration": ["clk"]}
    )
    assert planner.plan([weak, sure, backed], {"c": 10}, set(), T0 + 10 * NS) == []  # not firing 30 s yet
    assert statuses(planner.plan([weak, sure, backed], {"c": 10}, set(), T0 + 31 * NS)) == {"c": "queued"}
    # another rule firing on the same node counts as corroboration
    ecc = alert("b", rule="gpu_throttled", severity="warning")
    assert statuses(planner.plan([sure, ecc], {"c": 10}, set(), T0 + 32 * NS)) == {"b": "queued"}


def test_patterns_and_severities() -> None:
    planner = ActionPlanner(settings(policy={"nodes": ["gpu-*"], "clusters": ["prod*"], "severities": ["critical"]},
                                     max_nodes_per_window=10, max_cluster_fraction=1))  # fmt: skip
    found = [alert("gpu-1", cluster="prod-a"), alert("cpu-1", cluster="prod-a"), alert("gpu-2", cluster="dev"),
             alert("gpu-3", cluster="prod-b", severity="warning")]  # fmt: skip
    assert statuses(planner.plan(found, {"prod-a": 10}, set(), T0)) == {"gpu-1": "queued"}


def test_xid_policy_follows_the_catalog_with_overrides() -> None:
    assert resolution(79) == "reboot" and resolution(13) == "restart_app" and resolution(48) == "reset_gpu"
    assert resolution(99999) == "investigate"
    assert resolution(13, {"13": "drain"}) == "drain"
    policy = {"rules": ["gpu_ecc_uncorrectable"], "xid_resolutions": ["drain", "reboot"]}
    planner = ActionPlanner(settings(policy=policy, xid={"31": "drain"}, max_nodes_per_window=10,
                                     max_cluster_fraction=1))  # fmt: skip
    found = [alert("a", evidence={"xid": 79}), alert("b", evidence={"xid": 13}), alert("c", evidence={"xid": 31}),
             alert("d")]  # fmt: skip
    assert statuses(planner.plan(found, {"c": 10}, set(), T0)) == {"a": "queued", "c": "queued"}


def test_resolved_incidents_resume_only_when_the_policy_says_so() -> None:
    planner = ActionPlanner(settings(policy={"resume_on_resolve": True}))
    [queued] = planner.plan([alert("a")], {"c": 10}, set(), T0)
    planner.record(queued.moved("done", T0 + NS))
    resolved = alert("a", state="resolved")
    assert [a.id for a in planner.resolved([resolved])] == [queued.id]
    assert ActionPlanner(settings()).resolved([resolved]) == []


@pytest.mark.parametrize(
    ("actions", "error"),
    [
        (
            {"policies": [{"name": "x", "rules": ["straggler"], "action": "slurm_drain", "colour": 1}]},
            "colour",
        ),
        (
            {"policies": [{"name": "x", "rules": ["straggler"], "action": "webhook"}]},
            "needs aggregator.actions.webhook.url",
        ),
        ({"policies": [{"name": "x", "rules": ["straggler"], "action": "reboot"}]}, "action"),
        ({"mode": "yolo"}, "mode"),
        ({"xid": {"abc": "drain"}}, "Xid codes are numbers"),
        ({"policies": [{"name": "x", "rules": ["straggler"], "action": "none"}] * 2}, "unique"),
    ],
)
def test_bad_policies_are_refused_naming_the_key(actions: dict[str, Any], error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        load_settings(None, aggregator={"actions": actions})


def test_a_policy_file(tmp_path: Any) -> None:
    path = tmp_path / "c.toml"
    path.write_text("""
[aggregator.actions]
mode = "approve"
max_nodes_per_window = 2

[[aggregator.actions.policies]]
name = "ecc"
rules = ["gpu_ecc_uncorrectable"]
nodes = ["gpu-*"]
action = "slurm_drain"
resume_on_resolve = true
""")
    actions = load_settings(path).aggregator.actions
    assert (
        actions.mode == "approve"
        and actions.policies[0].nodes == ["gpu-*"]
        and actions.policies[0].resume_on_resolve
    )


def test_default_is_dry_run_with_no_policy() -> None:
    default = load_settings(None).aggregator.actions
    assert default.mode == "dry_run" and default.policies == []


def test_a_small_cluster_can_still_have_one_node_acted_on() -> None:
    planner = ActionPlanner(settings(max_nodes_per_window=3, max_cluster_fraction=0.1))
    decided = planner.plan([alert("a"), alert("b")], {"c": 4}, set(), T0)  # 10 % of 4 nodes rounds down to 0
    assert statuses(decided) == {"a": "queued", "b": "breaker_open"}
    assert ActionPlanner(settings(max_nodes_per_window=0)).plan([alert("a")], {"c": 100}, set(), T0)[0].status == (
        "breaker_open")  # fmt: skip


def test_finished_actions_are_forgotten_once_no_guard_rail_needs_them() -> None:
    planner = ActionPlanner(settings(window_s=60, cooldown_s=60, approval_timeout_s=60))
    [queued] = planner.plan([alert("a")], {"c": 10}, set(), T0)
    planner.record(queued.moved("done", T0 + NS))
    planner.plan(
        [alert("a")], {"c": 10}, set(), T0 + 120 * NS
    )  # still firing: kept, so it is not decided again
    assert queued.id in planner.actions
    planner.plan([], {"c": 10}, set(), T0 + 120 * NS)
    assert planner.actions == {}


SLURM = Path(__file__).resolve().parents[2] / "fixtures" / "slurm"


def test_scontrol_show_node_as_slurm_22_05_prints_it() -> None:
    idle = parse_show_node((SLURM / "scontrol-22.05.8-show-node-idle.txt").read_text())
    assert (idle.state, idle.reason, idle.unavailable) == ("IDLE", "", False)
    ours = parse_show_node((SLURM / "scontrol-22.05.8-show-node-drained-by-ranksight.txt").read_text())
    assert ours.unavailable and "DRAIN" in ours.state
    assert ours.reason == "ranksight: gpu_xid vm Xid 79 on 0000:3b:00 (reboot): GPU has fallen off the bus."
    theirs = parse_show_node((SLURM / "scontrol-22.05.8-show-node-down-by-operator.txt").read_text())
    assert theirs.unavailable and theirs.state.startswith("DOWN") and theirs.reason == "bad DIMM, ticket 4711"
