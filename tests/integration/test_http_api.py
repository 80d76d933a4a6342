"""The HTTP face against a running aggregator fed a simulated cluster over real NATS: endpoints mirror the NATS
service, bearer token, OpenAPI fuzzed by schemathesis, /metrics parsed by prometheus_client, /events (SSE)."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr

from ranksight.aggregator.http.openapi import HTTP_ENDPOINTS
from ranksight.aggregator.runtime import Aggregator
from ranksight.api.client import query, query_http
from ranksight.schemas.records import AppRecord
from ranksight.settings import Settings
from tests.http_cluster import DEAD_PID, DEGRADED, JOB, NODES, Publisher, http_settings, publish_cluster
from tests.support import aggregator, wait_for

METRIC_NAME = re.compile(r"^ranksight_[a-z0-9_]+$")


async def get(agg: Aggregator, path: str, **kw: Any) -> tuple[int, dict[str, str], Any]:
    async with aiohttp.ClientSession() as http, http.get(f"{agg.http.url}{path}", **kw) as resp:
        body = await resp.text()
        is_json = resp.content_type == "application/json"
        return resp.status, dict(resp.headers), json.loads(body) if is_json else body


def _degraded(agg: Aggregator) -> bool:
    return any(a.rule == "link_degraded" for a in agg.engine.active.values())


async def test_endpoints_mirror_the_nats_service(settings: Settings) -> None:
    cfg = http_settings(settings)
    async with aggregator(cfg) as agg, Publisher(cfg) as pub:
        await publish_cluster(pub, with_stragglers=False)
        await wait_for(lambda: len(agg.state.nodes.nodes) == 4 and agg.state.jobs.jobs and _degraded(agg))
        for name, params in [("status", {}), ("nodes", {"state": "alive"}), ("jobs", {}), ("comms", {"job": JOB}),
                             ("links", {}), ("alerts", {"rule": "link_degraded"}), ("gpus", {"node": "node001"}),
                             ("nics", {}), ("stragglers", {}), ("gpu_probes", {}), ("markers", {"limit": 5})]:  # fmt: skip
            status, _, body = await get(agg, f"/api/{name}", params=params)
            over_nats = await query(cfg, name, params)
            assert status == 200 and body["ok"], (name, body)
            assert body["rows"] == over_nats.rows, name
            # what a query command gets with api_url set (blocking: off the loop the aggregator runs on)
            over_http = await asyncio.to_thread(query_http, cfg.model_copy(update={"api_url": agg.http.url}), name,
                                                params)  # fmt: skip
            assert over_http.rows == over_nats.rows, name
            assert (
                set(body) == {"ok", "rows", "truncated", "error", "meta", "next", "partial", "missing_shards"}
                and body["next"] is None
            )
        _, _, nodes = await get(agg, "/api/nodes")
        assert [r["node"] for r in nodes["rows"]] == NODES
        _, _, jobs = await get(agg, "/api/jobs")
        assert [p["pid"] for p in jobs["rows"][0]["dead_processes"]] == [DEAD_PID]
        _, _, alerts = await get(agg, "/api/alerts", params={"rule": "link_degraded", "limit": "1"})
        assert [a["node"] for a in alerts["rows"]] == [DEGRADED[0]]
        _, _, rows = await get(agg, "/api/sql", params={"sql": "SELECT count(*) AS n FROM heartbeat"})
        assert rows["rows"] == [{"n": 4}] and rows["meta"]["columns"] == ["n"]
        # Errors: the NATS service's codes as HTTP statuses, the same response shape.
        status, _, body = await get(agg, "/api/nodes", params={"colour": "red"})
        assert status == 400 and not body["ok"] and "colour" in body["error"]
        status, _, body = await get(agg, "/api/alerts", params={"limit": "zero"})
        assert status == 400 and "limit" in body["error"]
        status, _, body = await get(agg, "/api/sql", params={"sql": "DELETE FROM heartbeat"})
        assert status == 403 and body["error"].startswith("refused")
        status, _, body = await get(agg, "/api/sql", params={"sql": "SELECT * FROM no_such_table"})
        assert status == 422 and body["error"].startswith("query failed")
        status, _, _ = await get(agg, "/api/export")
        assert status == 404  # writes files: NATS only


async def test_bearer_token(settings: Settings) -> None:
    cfg = http_settings(settings, token=SecretStr("s3cret"))
    async with aggregator(cfg) as agg:
        status, headers, body = await get(agg, "/api/status")
        assert status == 401 and headers["WWW-Authenticate"] == "Bearer" and not body["ok"]
        assert (await get(agg, "/metrics", headers={"Authorization": "Bearer wrong"}))[0] == 401
        assert (await get(agg, "/api/status", headers={"Authorization": "Bearer s3cret"}))[0] == 200
        assert (await get(agg, "/api/status", params={"access_token": "s3cret"}))[0] == 200
        assert (await get(agg, "/"))[0] == 200  # the page itself holds no data
        _, _, spec = await get(agg, "/openapi.json", headers={"Authorization": "Bearer s3cret"})
        assert spec["security"] == [{"bearer": []}]
        # the query commands' HTTP client sends aggregator.http.token
        client = cfg.model_copy(update={"api_url": agg.http.url})
        assert (await asyncio.to_thread(query_http, client, "status")).ok
        wrong = client.model_copy(update={"aggregator": cfg.aggregator.model_copy(update={
            "http": cfg.aggregator.http.model_copy(update={"token": SecretStr("wrong")})})})  # fmt: skip
        refused = await asyncio.to_thread(query_http, wrong, "status")
        assert not refused.ok and "unauthorized" in (refused.error or "")


async def test_disabled_and_port_in_use(settings: Settings) -> None:
    cfg = http_settings(settings, enabled=False)
    async with aggregator(cfg) as agg:
        assert agg.http.url is None
    cfg = http_settings(settings)
    async with aggregator(cfg) as first:
        port = int(first.http.url.rsplit(":", 1)[1])
        taken = http_settings(settings, port=port)
        taken = taken.model_copy(update={"state_dir": settings.state_dir / "second"})
        async with aggregator(taken) as second:  # ingest and NATS go on; the HTTP face says why it is off
            assert second.http.url is None
            assert (await query(taken, "status")).ok


async def test_openapi_fuzzed_by_schemathesis(settings: Settings, tmp_path: Path) -> None:
    st = shutil.which("st", path=str(Path(sys.executable).parent))
    assert st, "schemathesis is a dev dependency"
    cfg = http_settings(settings)
    async with aggregator(cfg) as agg, Publisher(cfg) as pub:
        await publish_cluster(pub, with_stragglers=False)
        await wait_for(lambda: len(agg.state.nodes.nodes) == 4)
        _, _, spec = await get(agg, "/openapi.json")
        assert set(spec["paths"]) >= {f"/api/{n}" for n in ("status", "nodes", "jobs", "comms", "stragglers",
                                                              "links", "alerts", "sql")}  # fmt: skip
        assert spec["components"]["schemas"]["ApiResponse"]["required"] == ["ok"]
        cmd = [st, "run", f"{agg.http.url}/openapi.json", "--checks",
               "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
               "--max-examples", "15", "--seed", "1", "--phases", "examples,fuzzing", "--request-timeout", "15"]  # fmt: skip
        proc = await asyncio.to_thread(subprocess.run, cmd, capture_output=True, text=True, timeout=120,
                                       cwd=tmp_path)  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
        generated = re.search(r"(\d+) generated, (\d+) passed", proc.stdout)
        assert generated and int(generated[1]) >= 100 and generated[1] == generated[2], proc.stdout[-2000:]
        assert f"Tested: {len(HTTP_ENDPOINTS)}" in proc.stdout  # every HTTP endpoint was exercised


async def test_metrics_names_values_and_expiry(settings: Settings) -> None:
    cfg = http_settings(settings)
    async with aggregator(cfg) as agg, Publisher(cfg) as pub:
        await publish_cluster(pub, hardware_ttl=1.5, with_stragglers=False)
        # a rank of the job on node001's GPU 0: that GPU's series carry the job, the others none
        await pub.send("node001", "app", [AppRecord(event="heartbeat", job_id=JOB, rank=0, local_rank=0, pid=7, n=1,
                                                    client_ts=time.time_ns(), timeout_s=60.0)])  # fmt: skip
        await wait_for(lambda: len(agg.state.nodes.nodes) == 4 and _degraded(agg) and agg.state.app.ranks)
        assert (await get(agg, "/api/status"))[0] == 200
        status, headers, text = await get(agg, "/metrics")
        assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
        families = {f.name: f for f in text_string_to_metric_families(text)}
        for family in families.values():
            assert METRIC_NAME.match(family.name), family.name
            if family.type == "counter":
                assert all(
                    s.name.endswith("_total") for s in family.samples if not s.name.endswith("_created")
                )
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples
        }
        assert samples[("ranksight_nodes", (("cluster", "test"), ("state", "alive")))] == 4
        assert samples[("ranksight_node_up", (("cluster", "test"), ("node", "node002")))] == 1
        assert samples[("ranksight_ingest_messages_total", ())] >= 4 * 3 + 5
        # the process's own (this test's, where the aggregator runs): memory in bytes, CPU in seconds
        assert samples[("ranksight_process_resident_memory_bytes", ())] > 10 << 20
        assert samples[("ranksight_process_cpu_seconds_total", ())] > 0
        gpu = (
            ("cluster", "test"),
            ("gpu", "0"),
            ("job_id", JOB),
            ("model", "MI300X"),
            ("node", "node001"),
            ("uuid", "GPU-00000001"),
        )
        assert samples[("ranksight_gpu_power_watts", gpu)] == 600
        jobs = {
            dict(k[1])["node"]: dict(k[1])["job_id"] for k in samples if k[0] == "ranksight_gpu_power_watts"
        }
        # node000 polls the job's RAS endpoint: it runs the job, and no rank there names its GPUs
        assert jobs == {"node000": JOB, "node001": JOB, "node002": "", "node003": ""}
        nic_jobs = {dict(k[1])["node"]: dict(k[1])["job_id"] for k in samples if k[0] == "ranksight_nic_up"}
        assert nic_jobs["node001"] == JOB and nic_jobs["node002"] == ""
        up = {
            dict(k[1])["dst"]: v
            for k, v in samples.items()
            if k[0] == "ranksight_link_upload_bytes_per_second"
        }
        assert up[DEGRADED[1]] == 4e7 / 8 and up["node003"] == 1e10 / 8
        assert samples[("ranksight_alerts_firing", (("cluster", "test"), ("rule", "link_degraded"),
                                                    ("severity", "warning")))] == 1  # fmt: skip
        assert (
            samples[("ranksight_job_dead_processes", (("cluster", "test"), ("job", JOB), ("job_id", JOB)))]
            == 1
        )
        # After their TTL the GPU, NIC and link facts expire: their series are gone, the nodes' remain.

        async def expired() -> bool:
            text = (await get(agg, "/metrics"))[2]
            return "ranksight_gpu_power_watts{" not in text and "ranksight_link_rtt_seconds{" not in text

        await wait_for(expired, timeout=5)
        text = (await get(agg, "/metrics"))[2]
        assert (
            "ranksight_nic_up{" not in text and 'ranksight_node_up{cluster="test",node="node002"} 1.0' in text
        )
        hist = {f.name: f for f in text_string_to_metric_families(text)}["ranksight_query_duration_seconds"]
        count = [
            s.value for s in hist.samples if s.name.endswith("_count") and s.labels["endpoint"] == "status"
        ]
        assert count == [1.0]


async def test_metrics_cardinality_bound(settings: Settings) -> None:
    cfg = http_settings(settings, metrics_max_series=2)
    async with aggregator(cfg) as agg, Publisher(cfg) as pub:
        await publish_cluster(pub, with_stragglers=False)
        await wait_for(lambda: len(agg.state.nodes.nodes) == 4)
        families = {f.name: f for f in text_string_to_metric_families((await get(agg, "/metrics"))[2])}
        assert len(families["ranksight_node_up"].samples) == 2
        dropped = {s.labels["family"]: s.value for s in families["ranksight_metrics_series_dropped"].samples}
        assert dropped["ranksight_node_up"] == 2


async def test_events_stream_alerts_and_node_changes(settings: Settings) -> None:
    cfg = http_settings(settings)
    async with aggregator(cfg) as agg, Publisher(cfg) as pub, aiohttp.ClientSession() as http:
        async with http.get(f"{agg.http.url}/events") as resp:
            assert resp.headers["Content-Type"] == "text/event-stream"
            await publish_cluster(pub, with_stragglers=False)
            seen: list[tuple[str, dict[str, Any]]] = []
            event = None
            while not any(n == "alert" and d["rule"] == "link_degraded" for n, d in seen):
                line = (await asyncio.wait_for(resp.content.readline(), 10)).decode().rstrip("\n")
                if line.startswith("event: "):
                    event = line.removeprefix("event: ")
                elif line.startswith("data: ") and event:
                    seen.append((event, json.loads(line.removeprefix("data: "))))
            nodes = {d["node"]: d["state"] for n, d in seen if n == "node"}
            assert nodes == dict.fromkeys(NODES, "alive")
            assert agg.http.events.clients
        await wait_for(lambda: not agg.http.events.clients)  # a closed client is unsubscribed
