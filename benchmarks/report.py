"""Per-job report at scale: how long ``ranksight report`` takes to read and render a job's history, how big the one
HTML file is, and how long headless Chromium takes from load to every panel drawn.

A job of ``--nodes`` x ``--gpus`` ranks is written into a DuckDB file (:mod:`ranksight.simulate.history`: Inspector
summaries per window and rank, RAS polls, GPU, NIC and probe samples, alerts, straggler evaluations). The baseline,
measured in the same run, is one plain scan of the job's summaries (``count(*)``, ``sum(exec_sum_us)``) on the same
file: the ratio is what the report's queries and rendering add. Writes ``benchmarks/results/report.json``;
``--screenshot FILE`` also saves the top of a 16-node job's report (docs/report.png).

    .venv/bin/python benchmarks/report.py [--nodes 1024] [--quick] [--screenshot docs/report.png]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.browser drives Chromium

from benchmarks.results import write_result
from ranksight.aggregator.api.offline import OfflineHistory
from ranksight.aggregator.report import job_report
from ranksight.settings import load_settings
from ranksight.simulate.history import write_job_history
from tests.browser import CHROMIUM, Browser

JOB = "slurm-4242"


async def _render(db: Path) -> tuple[str, float]:
    settings = load_settings(None)
    history = OfflineHistory(settings, db)
    await history.open()
    try:
        started = time.perf_counter()
        text = await job_report(history.sandbox, settings.aggregator.report, JOB)
        return text, time.perf_counter() - started
    finally:
        await history.close()


def _scan(db: Path) -> float:
    con = duckdb.connect(str(db), read_only=True)
    started = time.perf_counter()
    con.execute("SELECT count(*), sum(exec_sum_us) FROM inspector_summary").fetchall()
    elapsed = time.perf_counter() - started
    con.close()
    return elapsed


async def _chromium(html: Path, profile: Path, runs: int, shot: Path | None = None) -> list[float]:
    times = []
    async with Browser(profile) as browser:
        for _ in range(runs):
            started = time.perf_counter()
            await browser.goto(html.as_uri())
            await browser.wait_js("document.body.dataset.drawn === '1'")
            times.append(time.perf_counter() - started)
        if shot is not None:
            await browser.send("Emulation.setDeviceMetricsOverride", width=1100, height=1500, deviceScaleFactor=1,
                               mobile=False)  # fmt: skip
            await browser.goto(html.as_uri())
            await browser.wait_js("document.body.dataset.drawn === '1'")
            await browser.screenshot(shot)
    return times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=1024)
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--windows", type=int, default=30, help="10 s summary windows of the job")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="128 nodes, 10 windows, one run (CI)")
    p.add_argument("--screenshot", type=Path, help="save the top of a 16-node job's report here")
    args = p.parse_args()
    if args.quick:
        args.nodes, args.windows, args.runs = 128, 10, 1
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        db = root / "history.duckdb"
        started = time.perf_counter()
        write_job_history(db, JOB, nodes=args.nodes, gpus=args.gpus, windows=args.windows)
        written_s = time.perf_counter() - started
        scans = [_scan(db) for _ in range(args.runs)]
        renders = []
        for _ in range(args.runs):
            text, elapsed = asyncio.run(_render(db))
            renders.append(elapsed)
        html = root / "report.html"
        html.write_text(text)
        drawn = asyncio.run(_chromium(html, root / "profile", args.runs)) if CHROMIUM else []
        if args.screenshot is not None and CHROMIUM:
            small = root / "small.duckdb"
            write_job_history(small, JOB, nodes=16, gpus=args.gpus, windows=30)
            small_html = root / "small.html"
            small_html.write_text(asyncio.run(_render(small))[0])
            asyncio.run(_chromium(small_html, root / "profile", 1, args.screenshot))
    result = {
        "nodes": args.nodes, "gpus_per_node": args.gpus, "ranks": args.nodes * args.gpus, "windows": args.windows,
        "runs": args.runs, "history_write_s": round(written_s, 2),
        "report_s_median": round(statistics.median(renders), 3),
        "baseline_scan_s_median": round(statistics.median(scans), 4),
        "report_vs_scan": round(statistics.median(renders) / max(statistics.median(scans), 1e-6), 1),
        "html_bytes": len(text.encode()),
        "chromium_drawn_s_median": round(statistics.median(drawn), 3) if drawn else None,
    }  # fmt: skip
    if not args.quick:
        write_result("report", result, {"html_bytes": {"max": 1 << 20}, "report_s_median": {"max": 5.0}},
                     "python benchmarks/report.py")  # fmt: skip
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
