"""The query front's merge rules (aggregator.api.merge), on the endpoints' own declarations."""

from __future__ import annotations

from ranksight.aggregator.api.endpoints import ENDPOINTS
from ranksight.aggregator.api.merge import merge_meta, sort_rows
from ranksight.api.contract import ClusterParams
from ranksight.api.params import AlertsParams, NodesParams
from ranksight.schemas.api import ApiResponse


def _node(node: str, last_seen: str | None, via: str) -> dict[str, object]:
    return {"cluster": "c1", "node": node, "last_seen": last_seen, "via": via}


def test_nodes_are_unioned_by_key_the_newest_kept_and_sorted_after_the_merge() -> None:
    merge = ENDPOINTS["nodes"].merge
    assert merge is not None
    lead = ApiResponse.success(
        [_node("n3", "2026-01-01T00:00:05Z", "lead"), _node("n1", "2026-01-01T00:00:01Z", "lead")]
    )
    other = ApiResponse.success([_node("n1", "2026-01-01T00:00:02Z", "b"), _node("n2", None, "b"),
                                 _node("n3", "2026-01-01T00:00:05Z", "b")])  # fmt: skip
    merged = merge.merge(NodesParams(), [("a", lead), ("b", other)])
    assert [(r["node"], r["via"]) for r in merged.rows] == [("n1", "b"), ("n2", "b"), ("n3", "lead")]
    assert merged.meta["shards"] == {"a": {}, "b": {}} and not merged.truncated


def test_firing_alerts_are_one_per_fingerprint_but_history_keeps_every_transition() -> None:
    merge = ENDPOINTS["alerts"].merge
    assert merge is not None
    a = ApiResponse.success(
        [{"fingerprint": "f1", "state": "firing", "started_at": "t1", "updated_at": "t1"}]
    )
    b = ApiResponse.success([{"fingerprint": "f1", "state": "firing", "started_at": "t1", "updated_at": "t3"},
                             {"fingerprint": "f2", "state": "firing", "started_at": "t2", "updated_at": "t2"}])  # fmt: skip
    firing = merge.merge(AlertsParams(), [("a", a), ("b", b)])
    assert [(r["fingerprint"], r["updated_at"]) for r in firing.rows] == [("f2", "t2"), ("f1", "t3")]
    history = merge.merge(AlertsParams(state="all", limit=2), [("a", a), ("b", b)])
    assert [r["updated_at"] for r in history.rows] == [
        "t3",
        "t2",
    ] and history.truncated  # 3 transitions, limit 2


def test_counts_are_summed_lists_joined_and_a_truncated_shard_makes_a_truncated_answer() -> None:
    merge = ENDPOINTS["stragglers"].merge
    assert merge is not None
    a = ApiResponse.success([{"cluster": "c", "hostname": "h1", "pid": 1, "slowdown": 1.5}],
                            meta={"records": 10, "window_s": 30, "evaluated": {"c": "t1"}})  # fmt: skip
    b = ApiResponse.success([{"cluster": "c", "hostname": "h2", "pid": 2, "slowdown": 2.5}], truncated=True,
                            meta={"records": 5, "window_s": 30, "evaluated": {"d": "t2"}})  # fmt: skip
    merged = merge.merge(ClusterParams(), [("a", a), ("b", b)])
    assert [r["hostname"] for r in merged.rows] == ["h2", "h1"]  # slowest first across shards
    assert merged.truncated
    assert {k: merged.meta[k] for k in ("records", "window_s", "evaluated")} == {
        "records": 15,
        "window_s": 30,
        "evaluated": {"c": "t1", "d": "t2"},
    }
    assert merge_meta([{"skipped": [1]}, {"skipped": [2]}], ()) == {"skipped": [1, 2]}


def test_missing_values_sort_last_both_ways() -> None:
    rows = [{"t": None, "n": 1}, {"t": "b", "n": 2}, {"t": "a", "n": 3}]
    assert [r["n"] for r in sort_rows(rows, ("t",))] == [3, 2, 1]
    assert [r["n"] for r in sort_rows(rows, ("-t",))] == [2, 3, 1]


def test_what_is_not_merged_is_said() -> None:
    unmerged = {name for name, e in ENDPOINTS.items() if e.merge is None}
    # requests that change state, or ask one job's agents, are answered by the shard that takes them
    assert unmerged == {"sql", "export", "series", "incidents", "drain", "silence_add", "silence_expire",
                        "action_approve", "action_reject", "action_undo", "job_dump", "job_evidence"}  # fmt: skip
