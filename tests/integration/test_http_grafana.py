"""The Grafana dashboard (deploy/grafana/ranksight.json) only uses metric names that /metrics exposes."""

from __future__ import annotations

import json
import re
from pathlib import Path

from ranksight.config import Settings
from tests.http_cluster import Publisher, http_settings, publish_cluster
from tests.integration.test_http_api import get
from tests.support import aggregator, wait_for

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "ranksight.json"
NAME = re.compile(r"\branksight_[a-z0-9_]+")
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}


def exposed(text: str) -> set[str]:
    """Every sample name /metrics can carry: declared families (even while they have no series) and their suffixes."""
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            names.add(name)
            names.update(name.removesuffix("_total") + s for s in SUFFIXES.get(kind, ()))
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


async def test_every_dashboard_metric_is_exposed(settings: Settings) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in NAME.findall(e)}
    assert len(exprs) >= 20 and len(used) >= 20
    cfg = http_settings(settings)
    async with aggregator(cfg) as agg, Publisher(cfg) as pub:
        await publish_cluster(pub, with_stragglers=False)
        await wait_for(lambda: len(agg.state.nodes.nodes) == 4)
        assert (await get(agg, "/api/status"))[0] == 200
        names = exposed((await get(agg, "/metrics"))[2])
    assert used <= names, sorted(used - names)
    assert "ranksight_query_duration_seconds_bucket" in names and "ranksight_gpu_power_watts" in names
