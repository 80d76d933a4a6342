"""Each declared endpoint is served by a running aggregator: a NATS micro endpoint (listed in ``$SRV.INFO``) on the
shared subject and on the aggregator's own shard subject, an HTTP route for the read-only ones (404 for those that stay
on NATS), and the same 400 for a bad parameter on every face."""

from __future__ import annotations

import json

import aiohttp

from ranksight.aggregator.api.endpoints import ENDPOINTS
from ranksight.aggregator.api.service import SERVICE_NAME, SHARD_SERVICE_NAME
from ranksight.core.natsconn import connect
from ranksight.settings import Settings
from tests.http_cluster import http_settings
from tests.support import aggregator


async def test_every_endpoint_is_served_over_nats_and_http_with_one_error_code(settings: Settings) -> None:
    cfg = http_settings(settings)
    async with aggregator(cfg) as agg:
        nc = await connect(cfg.nats, "test")
        try:
            info = json.loads((await nc.request(f"$SRV.INFO.{SERVICE_NAME}", b"", timeout=5)).data)
            assert {e["name"] for e in info["endpoints"]} == set(ENDPOINTS)
            shard_id = cfg.aggregator.shards.name()
            info = json.loads((await nc.request(f"$SRV.INFO.{SHARD_SERVICE_NAME}", b"", timeout=5)).data)
            assert info["metadata"]["shard_id"] == shard_id
            shard_subjects = {agg.subjects.shard_api(shard_id, name) for name in ENDPOINTS}
            assert {e["subject"] for e in info["endpoints"]} == shard_subjects
            for name in ENDPOINTS:
                for subject in (agg.subjects.api(name), agg.subjects.shard_api(shard_id, name)):
                    msg = await nc.request(subject, b'{"no_such_param": 1}', timeout=10)
                    assert msg.headers and msg.headers["Nats-Service-Error-Code"] == "400", subject
                    assert "unknown parameter 'no_such_param'" in json.loads(msg.data)["error"], subject
        finally:
            await nc.close()
        async with aiohttp.ClientSession() as http:
            for name, endpoint in ENDPOINTS.items():
                url = f"{agg.http.url}/api/{name}"
                async with http.get(url, params={"no_such_param": "1"}) as resp:
                    assert resp.status == (400 if endpoint.http else 404), name
                    if endpoint.http:
                        assert "unknown parameter 'no_such_param'" in (await resp.json())["error"], name
