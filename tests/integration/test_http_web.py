"""The web page in headless Chromium (Debian ``chromium``, installed by ``.ci/run``) against a running aggregator fed
a simulated cluster with one dead rank, one straggler and one degraded link: each view is loaded, screenshotted, and
what it shows is asserted on the rendered DOM."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from aggregator.runtime import Aggregator
from ranksight.config import Settings
from schemas.records import HeartbeatRecord
from tests.http_cluster import DEAD_PID, DEGRADED, SLOW, Publisher, http_settings, publish_cluster
from tests.support import aggregator, wait_for

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="Debian chromium is not installed (.ci/run installs it)"
)


def chromium(url: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-dev-shm-usage", f"--user-data-dir={profile}",
           "--virtual-time-budget=4000", "--window-size=1400,1000", *args, url]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


async def load(agg: Aggregator, view: str, tmp: Path, query: str = "live=0") -> str:
    """The rendered DOM of ``view``, after a screenshot of it into ``tmp``."""
    url = f"{agg.http.url}/?{query}#{view}"
    shot = tmp / f"{view}.png"
    proc = await asyncio.to_thread(chromium, url, tmp / "profile", f"--screenshot={shot}")
    assert shot.exists() and shot.stat().st_size > 5000, proc.stderr[-2000:]
    dom = await asyncio.to_thread(chromium, url, tmp / "profile", "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    main = dom.stdout[dom.stdout.index('<main id="view"') : dom.stdout.index("</main>")]
    assert f'data-view="{view}"' in main, main  # rendered, not an error message
    return main


async def test_every_view_shows_the_trouble(settings: Settings, tmp_path: Path) -> None:
    cfg = http_settings(settings)
    async with aggregator(cfg) as agg, Publisher(cfg) as pub:
        await publish_cluster(pub)
        slow_host = f"node{SLOW[0]:03d}"
        await wait_for(lambda: any(a.rule == "link_degraded" for a in agg.engine.active.values()), timeout=15)
        await wait_for(lambda: any(f.hostname == slow_host for r in agg.state.stragglers.clusters.values()
                                   for f in r.findings), timeout=20)  # fmt: skip
        await wait_for(lambda: agg.store.rows("SELECT 1 FROM straggler_finding_history LIMIT 1"), timeout=10)
        overview = await load(agg, "overview", tmp_path)
        assert 'data-state="alive"><b>4</b>' in overview
        assert "link_degraded" in overview and "process_dead" in overview
        jobs = await load(agg, "jobs", tmp_path)
        assert f"pid {DEAD_PID}" in jobs and 'class="bad"' in jobs
        stragglers = await load(agg, "stragglers", tmp_path)
        assert slow_host in stragglers and 'id="heatmap"' in stragglers and 'class="heat"' in stragglers
        assert "compute" in stragglers
        links = await load(agg, "links", tmp_path)
        src, dst = DEGRADED
        assert f'class="cell degraded" data-src="{src}" data-dst="{dst}"' in links
        assert links.count('degraded" data-src') == 1  # only that one link is highlighted
        assert "0.04 Gbit/s" in links and "10.00 Gbit/s" in links


async def test_overview_pages_and_searches_1000_nodes(settings: Settings, tmp_path: Path) -> None:
    cfg = http_settings(settings)
    async with aggregator(cfg) as agg, Publisher(cfg) as pub:
        for i in range(1000):
            beat_node = f"gpu{i:04d}"
            await pub.send(beat_node, "heartbeat", [HeartbeatRecord(hostname=beat_node, version="sim", pid=1,
                                                                    started_ns=time.time_ns())])  # fmt: skip
        await wait_for(lambda: len(agg.state.nodes.nodes) == 1000, timeout=20)
        page = await load(agg, "overview", tmp_path)
        assert "page 1 of 20 (1000 nodes)" in page
        assert page.count("<td>gpu") == 50
        found = await load(agg, "overview", tmp_path, query="live=0&search=gpu0042")
        assert "(1 nodes)" in found and "<td>gpu0042</td>" in found
