"""The Grafana dashboard (deploy/grafana/ranksight.json) only uses metric names that /metrics exposes, and only labels
those metrics carry (selectors, ``by``/``on`` clauses, legends, the variables' ``label_values``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from ranksight.settings import Settings
from tests.http_cluster import SLOW, STRAGGLER_JOB, Publisher, http_settings, publish_cluster
from tests.integration.test_http_api import get
from tests.support import aggregator, wait_for

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "ranksight.json"
NAME = re.compile(r"\branksight_[a-z0-9_]+")
SELECTOR = re.compile(r"(ranksight_[a-z0-9_]+)\{([^}]*)\}")
GROUPING = re.compile(r"\b(?:by|on|without|ignoring)\s*\(([^)]*)\)")
LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")
LABEL_VALUES = re.compile(r"label_values\((ranksight_[a-z0-9_]+)(?:\{([^}]*)\})?,\s*(\w+)\)")
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


def label_names(text: str) -> dict[str, set[str]]:
    """The label names each sample name carries in ``text``."""
    found: dict[str, set[str]] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, rest = line.partition("{")
            found.setdefault(name.split()[0], set()).update(re.findall(r'(\w+)="', rest.partition("}")[0]))
    return found


def matchers(selector: str) -> set[str]:
    return set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", selector or ""))


async def test_every_dashboard_metric_and_label_is_exposed(settings: Settings) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in NAME.findall(e)}
    assert len(exprs) >= 20 and len(used) >= 20
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert {"datasource", "cluster", "job", "node", "gpu"} <= variables.keys()
    titles = " ".join(p["title"] for p in dashboard["panels"]).lower()
    assert "straggler cost" in titles and "incidents" in titles
    assert all(t.get("legendFormat") for p in dashboard["panels"] for t in p["targets"])
    cfg = http_settings(settings)
    async with aggregator(cfg) as agg, Publisher(cfg) as pub:
        await publish_cluster(pub)  # with a straggler: every family the dashboard reads has series
        slow_host = f"node{SLOW[0]:03d}"
        await wait_for(lambda: any(f.hostname == slow_host for r in agg.state.stragglers.clusters.values()
                                   for f in r.findings), timeout=20)  # fmt: skip
        # and the job's ranks and RAS poll, published after its Inspector records: they label the devices
        await wait_for(
            lambda: len(agg.state.app.ranks) == 16 and ("test", STRAGGLER_JOB) in agg.state.jobs.jobs
        )
        assert (await get(agg, "/api/status"))[0] == 200
        text = (await get(agg, "/metrics"))[2]
    names, labels = exposed(text), label_names(text)
    assert used <= names, sorted(used - names)
    assert "ranksight_query_duration_seconds_bucket" in names and "ranksight_gpu_power_watts" in names
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            carried = set().union(*(labels.get(m, set()) for m in NAME.findall(expr)))
            for metric, selector in SELECTOR.findall(expr):
                assert matchers(selector) <= labels.get(metric, set()), (panel["title"], metric, selector)
            grouped = {g.strip() for clause in GROUPING.findall(expr) for g in clause.split(",") if g.strip()}
            assert grouped <= carried, (panel["title"], grouped - carried)
            assert set(LEGEND.findall(target["legendFormat"])) <= carried, (
                panel["title"],
                target["legendFormat"],
            )
    for var in variables.values():
        if var["type"] == "query":
            metric, selector, label = LABEL_VALUES.fullmatch(var["query"]["query"]).groups()  # type: ignore[union-attr]
            assert matchers(selector) | {label} <= labels.get(metric, set()), var["name"]
    assert any(
        re.findall(r'ranksight_gpu_power_watts\{[^}]*job_id="([^"]+)"', text)
    )  # GPUs in use carry their job
