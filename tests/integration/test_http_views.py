"""The web page's read endpoints over HTTP: ``cluster_map`` (node health from state and firing alerts) and ``series``
(history bounded by time range, bucket count and line count)."""

from __future__ import annotations

import datetime

from ranksight.settings import Settings
from tests.http_cluster import DEGRADED, JOB, Publisher, http_settings, publish_cluster
from tests.integration.test_http_api import _degraded, get
from tests.support import aggregator, wait_for


async def test_cluster_map_health_follows_alerts(settings: Settings) -> None:
    cfg = http_settings(settings)
    async with aggregator(cfg) as agg, Publisher(cfg) as pub:
        await publish_cluster(pub, with_stragglers=False)
        await wait_for(lambda: len(agg.state.nodes.nodes) == 4 and _degraded(agg))
        status, _, body = await get(agg, "/api/cluster_map")
        assert status == 200
        nodes = {r["node"]: r for r in body["rows"]}
        src = nodes[DEGRADED[0]]  # alive, but its link_degraded alert (a warning) fires
        assert src["state"] == "alive" and src["health"] == "warning" and src["alerts"] >= 1
        assert [a["rule"] for a in src["alert_rules"]] == ["link_degraded"]
        assert nodes["node003"]["health"] == "ok" and nodes["node003"]["alerts"] == 0
        assert nodes["node001"]["gpus"] == [
            {"gpu": 0, "health": "ok", "utilization_pct": 90.0, "name": "MI300X"}
        ]
        # one vocabulary: the map's states and health words are status's and nodes'
        assert body["meta"]["health_words"] == ["ok", "warning", "critical"]
        _, _, listed = await get(agg, "/api/status")
        _, _, nodes_body = await get(agg, "/api/nodes")
        for rows in (listed["rows"], nodes_body["rows"]):
            assert {r["node"]: (r["state"], r["health"]) for r in rows} == {
                n: (r["state"], r["health"]) for n, r in nodes.items()
            }
        assert (src["state"], src["health"], src["node_wide"]) == ("alive", "warning", "warning")
        assert (nodes["node003"]["state"], nodes["node003"]["health"]) == ("alive", "ok")


async def test_series_bounds(settings: Settings) -> None:
    cfg = http_settings(settings)
    query = cfg.aggregator.query.model_copy(update={"series_max_lines": 2, "series_max_points": 50})
    cfg = cfg.model_copy(update={"aggregator": cfg.aggregator.model_copy(update={"query": query})})
    async with aggregator(cfg) as agg, Publisher(cfg) as pub:
        await publish_cluster(pub, with_stragglers=False)
        await wait_for(
            lambda: next(agg.store.rows("SELECT count(DISTINCT node) AS n FROM gpu"))["n"] == 4, timeout=10
        )
        status, _, body = await get(agg, "/api/series?metric=gpu_power_w&node=node001,node002")
        assert status == 200 and body["meta"]["unit"] == "W" and not body["truncated"]
        assert {r["series"]: r["v"] for r in body["rows"]} == {
            "node001 gpu 0": [600.0],
            "node002 gpu 0": [600.0],
        }
        _, _, body = await get(agg, f"/api/series?metric=gpu_power_w&job={JOB}")  # polled from node000 only
        assert [r["series"] for r in body["rows"]] == ["node000 gpu 0"]
        _, _, body = await get(agg, "/api/series?metric=gpu_power_w&job=no-such-job")
        assert body["ok"] and body["rows"] == []
        _, _, body = await get(agg, "/api/series?metric=gpu_power_w&points=100000")
        assert body["truncated"] and len(body["rows"]) == 2  # four GPUs, two lines at most
        assert body["meta"]["step_s"] == 15 * 60 / 50  # buckets capped at series_max_points
        now = datetime.datetime.now(datetime.UTC)
        for bad in ("metric=nope", f"metric=gpu_power_w&since={now.isoformat()}&until={(now - datetime.timedelta(1)).isoformat()}",
                    f"metric=gpu_power_w&since={(now - datetime.timedelta(days=30)).isoformat()}", "metric=gpu_power_w&until=0001-01-01T00:00:00"):  # fmt: skip
            status, _, body = await get(agg, f"/api/series?{bad.replace('+', '%2B')}")
            assert status == 400 and not body["ok"], (bad, body)


async def test_step_time_of_a_job_without_step_reports_comes_from_inspector(settings: Settings) -> None:
    """Issue 47: during a running job without ``ranksight.client`` (the demo), "Step time per rank" had no data; each
    rank's collective cadence stands in, and ``meta.source`` says so."""
    from tests.http_cluster import STRAGGLER_JOB

    cfg = http_settings(settings)
    async with aggregator(cfg) as agg, Publisher(cfg) as pub:
        await publish_cluster(pub)
        await wait_for(lambda: list(agg.store.rows("SELECT 1 FROM app LIMIT 1")), timeout=20)
        await wait_for(lambda: list(agg.store.rows("SELECT 1 FROM inspector_summary LIMIT 1")), timeout=20)
        _, _, reported = await get(agg, f"/api/series?metric=step_time_s&job={STRAGGLER_JOB}")
        assert reported["rows"] and reported["meta"]["source"] == "step_time_s"
        await agg.store.call(lambda: agg.store.con.execute("DELETE FROM app"))  # a job that reports no steps
        _, _, derived = await get(agg, f"/api/series?metric=step_time_s&job={STRAGGLER_JOB}")
        assert derived["meta"]["source"] == "step_period_s" and derived["meta"]["unit"] == "s"
        assert len(derived["rows"]) == 16 and all(
            v > 0 for r in derived["rows"] for v in r["v"] if v is not None
        )
