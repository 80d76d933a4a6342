"""The web page in real headless Chromium (Debian ``chromium``, installed by ``.ci/run``) against a running aggregator fed
a simulated cluster with one dead rank, one straggler and one degraded link: every view is loaded with live updates on,
screenshotted, and checked on what it drew (the rendered DOM, canvas pixels that are not background) and on the
browser's console (no error, no uncaught exception, no failed load); at 4 and at 1,000 nodes."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from ranksight.aggregator.runtime import Aggregator
from ranksight.schemas.records import GpuRecord, HeartbeatRecord, NicRecord, ProbeRecord
from ranksight.settings import Settings
from tests.browser import CHROMIUM, Browser
from tests.http_cluster import (
    DEAD_PID,
    DEGRADED,
    SLOW,
    STRAGGLER_JOB,
    Publisher,
    http_settings,
    publish_cluster,
)
from tests.integration.test_http_api import get
from tests.support import aggregator, wait_for

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="Debian chromium is not installed (.ci/run installs it)"
)
RTT_ONLY = ("node001", "node002")  # measured while a job runs: heavy probes skipped, so no bandwidth


async def sparks_without_points(browser: Browser, metric: str) -> int:
    """How many sparklines of ``metric`` drew no sample (the devices' values must reach every sparkline)."""
    return int(await browser.js(f"document.querySelectorAll('canvas[data-metric=\"{metric}\"]:not([data-points]), "
                                f"canvas[data-metric=\"{metric}\"][data-points=\"0\"]').length"))  # fmt: skip


def inked(ink: list[dict[str, object]], minimum: int = 20) -> list[dict[str, object]]:
    """The canvases that drew less than ``minimum`` non-background pixels (none, when every chart is drawn)."""
    return [c for c in ink if int(c["ink"]) < minimum]  # type: ignore[call-overload]


async def show(browser: Browser, agg: Aggregator, view: str, tmp: Path, name: str = "") -> str:
    """``view`` with live updates on; screenshot into ``tmp``; its HTML once drawn."""
    name = view.split("/")[0]
    html = await browser.view(f"{agg.http.url}/#{view}", name)
    await browser.screenshot(tmp / f"{view.replace('/', '-')}.png")
    assert await browser.js("document.body.dataset.errors") is None, browser.errors
    return html


async def test_every_view_shows_the_trouble(settings: Settings, tmp_path: Path) -> None:
    cfg = http_settings(settings)
    async with aggregator(cfg) as agg, Publisher(cfg) as pub, Browser(tmp_path / "profile") as browser:
        await publish_cluster(pub)
        src, dst = RTT_ONLY
        await pub.send(
            src, "probe", [ProbeRecord(src=src, dst=dst, dst_addr="10.0.0.3", rtt_us=60.0, jitter_us=4.0)]
        )
        slow_host = f"node{SLOW[0]:03d}"
        await wait_for(lambda: any(a.rule == "link_degraded" for a in agg.engine.active.values()), timeout=15)
        await wait_for(lambda: any(f.hostname == slow_host for r in agg.state.stragglers.clusters.values()
                                   for f in r.findings), timeout=20)  # fmt: skip
        await wait_for(
            lambda: list(agg.store.rows("SELECT 1 FROM straggler_finding_history LIMIT 1")), timeout=10
        )
        await wait_for(lambda: list(agg.store.rows("SELECT 1 FROM app LIMIT 1")), timeout=10)

        overview = await show(browser, agg, "overview", tmp_path)
        assert 'data-state="alive"><b>4</b>' in overview
        assert "job_started" not in overview  # a lifecycle event, not an active alert
        assert 'class="report" href="reports/' in overview  # alerts link their job's report
        # live updates: a node that appears shows up without a reload
        await browser.wait_js("document.getElementById('live').textContent === 'live: on'")
        await pub.send("node004", "heartbeat", [HeartbeatRecord(hostname="node004", version="sim", pid=9,
                                                                started_ns=time.time_ns())])  # fmt: skip
        await browser.wait_js("""document.querySelector('[data-state="alive"] b').textContent === '5'""")
        assert "link_degraded" in overview and "process_dead" in overview
        known = {node for _, node in agg.state.nodes.nodes}
        alerted = {a.node for a in agg.engine.active.values() if a.severity != "info" and a.node in known}
        assert alerted
        for node in alerted:  # a node with a firing alert is never shown healthy
            row = re.search(rf'<tr><td><a href="#node/{node}">{node}</a></td>.*?</tr>', overview)
            assert row and 'class="health-ok"' not in row[0] and "health-" in row[0], (node, row)

        cluster_map = await show(browser, agg, "map", tmp_path)
        assert 'data-nodes="5"' in cluster_map and not inked(await browser.canvas_ink(), 400)
        assert f'data-health="ok"><b>{5 - len(alerted)}</b>' in cluster_map
        words = re.findall(r'class="card health-(\w+)" data-health="(\w+)"', cluster_map)
        assert (
            {w for w, _ in words} == {w for _, w in words} == {"ok", "warning", "critical"}
        )  # the one vocabulary
        # zoom to a node: a click on its cell opens its GPUs and NICs
        await browser.js("""(() => { const c = document.getElementById('map-canvas'), r = c.getBoundingClientRect();
            c.dispatchEvent(new MouseEvent('click', {clientX: r.left + 125, clientY: r.top + 22 + 5})); })()""")
        await browser.wait_js("document.getElementById('view').dataset.view === 'node'")
        assert await browser.js("location.hash") == "#node/node001"

        # where exactly: the straggler's alert names its rank and GPU (learnt once the training clients' heartbeats,
        # published after the Inspector records, are in); the map and node page mark that GPU alone
        straggler = await wait_for(lambda: next((a for a in agg.engine.active.values() if a.rule == "straggler"
                                                 and a.node == slow_host and a.evidence.get("gpu") is not None),
                                                None), timeout=30)  # fmt: skip
        assert straggler.rank is not None and straggler.evidence["gpu"] == SLOW[1]
        await pub.send(slow_host, "gpu", [GpuRecord(index=g, name="MI300X", utilization_pct=90.0, sclk_hz=2.1e9, power_w=600.0,
                                                    memory_used_bytes=1 << 34, temperature_edge_c=55.0,
                                                    uuid=f"GPU-slow-{g}") for g in range(1, 4)], ttl=60.0)  # fmt: skip
        await wait_for(lambda: sum(n == slow_host for _, n, _ in agg.state.gpus.devices) == 4)
        _, _, mapped = await get(agg, "/api/cluster_map")
        row = next(r for r in mapped["rows"] if r["node"] == slow_host)
        by_gpu = {g["gpu"]: g for g in row["gpus"]}
        assert by_gpu[SLOW[1]]["health"] == straggler.severity and by_gpu[0]["health"] == "ok"
        colours = [
            await browser.js(f"cellColour({json.dumps(row)}, {json.dumps(by_gpu[g])})") for g in (SLOW[1], 0)
        ]
        assert colours[0] == await browser.js(f"HEALTH_COLOUR[{json.dumps(straggler.severity)}]")
        assert colours[1].startswith("hsl(140"), colours  # its neighbour stays green
        node = await show(browser, agg, f"node/{slow_host}", tmp_path)
        assert f'data-gpu="{SLOW[1]}" data-health="{straggler.severity}"' in node
        assert 'data-gpu="0" data-health="ok"' in node
        assert f"<td>straggler</td><td>{SLOW[1]}</td><td>{straggler.rank}</td>" in node
        assert node.count('data-metric="gpu_power_w"') == 4 and node.count('data-metric="nic_rate_bps"') == 1
        assert not inked(await browser.canvas_ink())
        for metric in (
            "gpu_power_w",
            "gpu_clock_hz",
            "gpu_utilization_pct",
            "nic_rate_bps",
            "nic_link_flaps",
        ):
            assert await sparks_without_points(browser, metric) == 0, metric

        jobs = await show(browser, agg, "jobs", tmp_path)
        assert f"pid {DEAD_PID}" in jobs and 'class="bad"' in jobs and f'href="#job/{STRAGGLER_JOB}"' in jobs

        job = await show(browser, agg, f"job/{STRAGGLER_JOB}", tmp_path)
        assert "no data in the range" not in job
        assert f'class="report" href="reports/{STRAGGLER_JOB}.html"' in job  # the job's report, linked
        ink = await browser.canvas_ink()
        assert {c["id"] for c in ink} == {"chart-step_time_s", "chart-busbw_gbs", "chart-lateness_us"}
        assert not inked(ink, 2000), ink
        assert re.search(rf"<td[^>]*>straggler</td>.*{slow_host} pid", job), job[-3000:]

        # the same process found again through another of its communicators, where it has another rank
        slow = next(
            f for r in agg.state.stragglers.clusters.values() for f in r.findings if f.hostname == slow_host
        )
        await agg.store.call(lambda: agg.store.con.execute(
            "INSERT INTO straggler_finding_history (evaluated_at, cluster, hostname, pid, kind, comm, rank, slowdown, "
            "confidence) SELECT now()::TIMESTAMP, ?, ?, ?, 'compute', 'dp-s1-g2', ?, 1.7, 0.9",
            [cfg.cluster, slow_host, slow.pid, (slow.rank or 0) + 3]))  # fmt: skip
        stragglers = await show(browser, agg, "stragglers", tmp_path)
        assert slow_host in stragglers and 'id="heatmap"' in stragglers and 'class="heat"' in stragglers
        assert "compute" in stragglers
        findings = stragglers[
            stragglers.index('id="findings"') : stragglers.index(
                "</table>", stragglers.index('id="findings"')
            )
        ]
        rows = re.findall(r'<tr><td><a href="#node/([^"]+)">[^<]*</a></td><td>(\d+)</td>', findings)
        assert rows and len(rows) == len(set(rows)), rows  # one row per process, whatever its communicators
        heat_rows = re.findall(r"<tr><th>([^<]+ pid \d+)</th>", stragglers)
        assert heat_rows and len(heat_rows) == len(set(heat_rows)), heat_rows

        for view, table_id, devices in (("gpus", "gpu-table", 7), ("nics", "nic-table", 4)):
            page = await show(browser, agg, view, tmp_path)
            assert f'id="{table_id}"' in page and f"({devices})" in page
            assert not inked(await browser.canvas_ink())

        links = await show(browser, agg, "links", tmp_path)
        src, dst = DEGRADED
        assert f'class="cell degraded" data-src="{src}" data-dst="{dst}"' in links
        assert links.count('degraded" data-src') == 1  # only that one link is highlighted
        assert "0.04 Gbit/s" in links and "10.00 Gbit/s" in links
        assert "Infinity" not in links and "RTT only" in links
        assert browser.errors == []


async def test_headless_screenshot_with_live_updates_on(settings: Settings, tmp_path: Path) -> None:
    """The plain ``chromium --headless --screenshot`` an operator would run finishes with the event stream open."""
    cfg = http_settings(settings)
    async with aggregator(cfg) as agg, Publisher(cfg) as pub:
        await publish_cluster(pub, with_stragglers=False)
        await wait_for(lambda: len(agg.state.nodes.nodes) == 4, timeout=10)
        shot = tmp_path / "live.png"
        assert CHROMIUM
        cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
               f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=4000", "--window-size=1400,1000",
               f"--screenshot={shot}", f"{agg.http.url}/#map"]  # fmt: skip
        started = time.monotonic()
        proc = await asyncio.to_thread(subprocess.run, cmd, capture_output=True, text=True, timeout=60)
        assert shot.exists() and shot.stat().st_size > 5000, proc.stderr[-2000:]
        assert time.monotonic() - started < 45
        # what that screenshot shows: the badge says when its data is from, never a "connecting" that never ends
        dump = [*cmd[:-2], "--dump-dom", cmd[-1]]
        dom = (
            await asyncio.to_thread(subprocess.run, dump, capture_output=True, text=True, timeout=60)
        ).stdout
        badge = re.search(r'<span id="live">([^<]*)</span>', dom)
        assert badge and re.fullmatch(r"(as of \d\d:\d\d:\d\d UTC|live: on)", badge[1]), dom[:2000]


async def test_every_view_at_1000_nodes(settings: Settings, tmp_path: Path) -> None:
    cfg = http_settings(settings)
    async with aggregator(cfg) as agg, Publisher(cfg) as pub, Browser(tmp_path / "profile") as browser:

        async def node(
            i: int,
        ) -> None:  # facts that outlive the test, however slowly a loaded machine runs it
            name, dst = f"gpu{i:04d}", f"gpu{(i + 1) % 1000:04d}"
            gpus = [GpuRecord(index=g, name="MI300X", utilization_pct=(i * 8 + g) % 100, power_w=500.0 + g,
                              throttled=(i, g) == (42, 3)) for g in range(8)]  # fmt: skip
            nic = NicRecord(name="mlx5_0/1", kind="rdma", state="ACTIVE", speed_bps=4e11, tx_bps=1e9 * (i % 7),
                            rx_bps=1e9, errors_per_s=0.0)  # fmt: skip
            probe = ProbeRecord(
                src=name, dst=dst, dst_addr="10.1.0.1", rtt_us=50.0, upload_bps=1e10, download_bps=1e10
            )
            beat = HeartbeatRecord(hostname=name, version="sim", pid=1, started_ns=time.time_ns())
            for kind, records in (("gpu", gpus), ("nic", [nic]), ("probe", [probe]), ("heartbeat", [beat])):
                await pub.send(name, kind, records, ttl=3600.0)

        for first in range(0, 1000, 50):
            await asyncio.gather(*(node(i) for i in range(first, first + 50)))
        await wait_for(lambda: len(agg.state.nodes.nodes) == 1000, timeout=30)
        await wait_for(
            lambda: next(iter(agg.store.rows("SELECT count(*) AS n FROM gpu")))["n"] == 8000, timeout=30
        )

        page = await show(browser, agg, "overview", tmp_path)
        assert "page 1 of 20 (1000 nodes)" in page
        assert page.count('<td><a href="#node/gpu') == 50
        assert (
            '<a href="#node/gpu0042">gpu0042</a></td><td class="state-alive">alive</td><td class="health-warning">'
            in page
        )

        cluster_map = await show(browser, agg, "map", tmp_path)
        assert 'data-nodes="1000"' in cluster_map and 'data-health="warning"><b>1</b>' in cluster_map
        assert not inked(await browser.canvas_ink(), 8000)
        # search, then Enter zooms to the one node found
        await browser.js("""(() => { const s = document.getElementById('search'); s.value = 'gpu0042';
            s.dispatchEvent(new Event('input')); })()""")
        await browser.wait_js(
            "(document.getElementById('matches') || {}).textContent === '1 of 1000 nodes match'"
        )
        await browser.js(
            """document.getElementById('search').dispatchEvent(new KeyboardEvent('keydown', {key: 'Enter'}))"""
        )
        await browser.wait_js("document.getElementById('view').dataset.view === 'node'")
        node = await browser.js("document.getElementById('view').outerHTML")
        assert "gpu0042" in node and node.count('data-metric="gpu_utilization_pct"') == 8
        assert not inked(await browser.canvas_ink())

        gpus = await show(browser, agg, "gpus", tmp_path)
        assert "page 1 of 160 (8000)" in gpus and gpus.count('data-metric="gpu_power_w"') == 50
        assert (
            not inked(await browser.canvas_ink()) and await sparks_without_points(browser, "gpu_power_w") == 0
        )
        nics = await show(browser, agg, "nics", tmp_path)
        assert "page 1 of 20 (1000)" in nics and nics.count('data-metric="nic_rate_bps"') == 50
        assert (
            not inked(await browser.canvas_ink())
            and await sparks_without_points(browser, "nic_rate_bps") == 0
        )
        links = await show(browser, agg, "links", tmp_path)
        assert "rows 1 of 34" in links and links.count("10.00 Gbit/s") == 30
        for view in ("jobs", "stragglers"):  # nothing running: the views say so, without errors
            await show(browser, agg, view, tmp_path)
        assert browser.errors == []
