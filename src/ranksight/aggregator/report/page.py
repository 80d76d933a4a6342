"""A :class:`~ranksight.aggregator.report.data.JobReport` as one self-contained HTML file: CSS and a few lines of
script inline, charts as inline SVG, the compute-share heatmap on a canvas drawn from an inline byte array (a
thousand nodes of eight GPUs are 8,192 bytes, not 8,192 SVG elements). Nothing is fetched: the file opens offline,
mailed or archived. Every value from the history is escaped."""

from __future__ import annotations

import base64
import datetime
import html
import json
import math
from collections.abc import Sequence

from ranksight.aggregator.report.data import CAUSES, JobReport
from ranksight.core.cliutil import human

HEATMAP_COLUMNS = 64  # ranks per heatmap row: eight nodes of eight GPUs
HEATMAP_WIDTH, HEATMAP_HEIGHT, MIN_CELL_PX = 640, 720, 3  # the heatmap's size at most, a cell's at least
W, H = 720, 220  # chart size


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def render(report: JobReport) -> str:
    cov = report.coverage
    sections = [
        _section("summary", "Summary", _summary(report)),
        _section("step-time", "Step time", _step_chart(report)),
        _section("compute-share", "Compute share per rank", _heatmap(report)),
        _section("busbw", "Bus bandwidth per communicator", _bars(report)),
        _section("timeline", "Findings", _timeline(report)),
        _section("gpu-hours", "GPU-hours lost per cause", _gpu_hours(report)),
        _section("hardware", "Hardware evidence", _hardware(report)),
        _section("links", "Link map", _links(report)),
        _section("coverage", "What the data covered", _coverage(report)),
    ]
    title = f"ranksight report: job {report.job}"
    return (f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{_e(title)}</title>"
            f"<meta name=\"generator\" content=\"ranksight\"><style>{_CSS}</style></head><body>"
            f"<header><h1>{_e(title)}</h1><p>cluster {_e(report.cluster)} · {_e(cov.since)} to {_e(cov.until)}"
            f" ({_e(human('d_s', cov.duration_s))}) · {'ended' if report.ended else 'running when written'} · "
            f"written {_e(report.generated)}</p></header><main>{''.join(sections)}</main>"
            f"<script>{_SCRIPT}</script></body></html>")  # fmt: skip


def _section(ident: str, title: str, body: str) -> str:
    return f'<section id="{ident}"><h2>{_e(title)}</h2>{body}</section>'


def _summary(r: JobReport) -> str:
    lost = min(
        sum(r.gpu_hours.values()), r.job_gpu_hours
    )  # causes that overlap in time do not lose more than all
    worst = max(r.gpu_hours.items(), key=lambda kv: kv[1], default=("", 0.0))
    cards = [("GPU-hours", f"{r.job_gpu_hours:.1f}"), ("lost", f"{lost:.1f} ({_share(lost, r.job_gpu_hours)})"),
             ("ranks seen", str(r.coverage.ranks_seen)), ("nodes", str(r.coverage.nodes_seen)),
             ("findings", str(len(r.findings) + r.findings_left_out)), ("RAS health", r.health or "-")]  # fmt: skip
    text = (f"<p>Most lost to <b>{_e(worst[0])}</b>.</p>" if worst[1] > 0 else "<p>No GPU-hours lost to a known "
            "cause.</p>")  # fmt: skip
    return (
        '<div class="cards">'
        + "".join(f"<div><b>{_e(v)}</b>{_e(k)}</div>" for k, v in cards)
        + "</div>"
        + text
    )


def _share(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f} %" if whole else "-"


def _scale(values: Sequence[float], lo: float, hi: float, size: float) -> list[float]:
    span = hi - lo or 1.0
    return [(v - lo) / span * size for v in values]


def _step_chart(r: JobReport) -> str:
    if not r.step_t:
        return '<p class="muted">no step time in the data</p>'
    pad = 50
    xs = _scale(r.step_t, min(r.step_t), max(r.step_t), W - pad - 10)
    top = max(r.step_max) * 1.1 or 1.0
    ys = [[H - 25 - v / top * (H - 40) for v in line] for line in (r.step_median, r.step_max)]
    lines = "".join(
        f'<polyline class="{cls}" points="{" ".join(f"{pad + x:.1f},{y:.1f}" for x, y in zip(xs, line, strict=True))}"/>'
        for cls, line in zip(("max", "median"), ys[::-1], strict=True))  # fmt: skip
    ticks = "".join(f'<text x="{pad - 4}" y="{H - 25 - f * (H - 40):.0f}" class="tick" text-anchor="end">'
                    f"{_e(human('v_s', top * f))}</text>" for f in (0, 0.5, 1))  # fmt: skip
    source = {"client": "as the training processes report it (ranksight.client)",
              "inspector": "from each rank's collective cadence (Inspector)"}.get(r.coverage.step_source, "")  # fmt: skip
    return (f'<svg viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img">{ticks}{lines}'
            f'<text x="{pad}" y="{H - 5}" class="tick">{_e(r.coverage.since)}</text>'
            f'<text x="{W - 10}" y="{H - 5}" class="tick" text-anchor="end">{_e(r.coverage.until)}</text></svg>'
            f'<p class="legend"><span class="median"></span>median over ranks <span class="max"></span>slowest '
            f"rank; {_e(source)}</p>")  # fmt: skip


def _heatmap(r: JobReport) -> str:
    if not r.ranks:
        return '<p class="muted">no per-rank collective data</p>'
    shares = [s for *_, s in r.ranks]
    lo, hi = min(shares), max(shares)
    cells = bytes(round(255 * (s - lo) / (hi - lo)) if hi > lo else 0 for s in shares)
    hosts = list(dict.fromkeys(h for h, *_ in r.ranks))
    index = {h: i for i, h in enumerate(hosts)}
    data: dict[str, object] = {"cells": base64.b64encode(cells).decode(), "hosts": hosts, "host": [index[h] for h, *_ in r.ranks],
            "pid": [p for _, p, _, _ in r.ranks], "rank": [k for _, _, k, _ in r.ranks],
            "share": [round(s, 4) for s in shares], "cols": HEATMAP_COLUMNS}  # fmt: skip
    top = sorted(r.ranks, key=lambda x: -x[3])[:5]
    cols = min(HEATMAP_COLUMNS, len(r.ranks))
    rows = math.ceil(len(r.ranks) / HEATMAP_COLUMNS)
    px = max(MIN_CELL_PX, min(HEATMAP_WIDTH // cols, HEATMAP_HEIGHT // rows))
    data["px"] = px
    return (f'<canvas id="heatmap" width="{cols * px}" height="{rows * px}"></canvas>'
            f'<p id="heat-tip" class="muted">ranks in order, {HEATMAP_COLUMNS} a row; share of time outside '
            f"collectives from {lo:.1%} (light) to {hi:.1%} (dark red): a compute straggler waits least, so it "
            "computes the largest share</p>"
            + (f'<p class="muted">{r.ranks_left_out} more ranks not drawn (aggregator.report.max_ranks)</p>'
               if r.ranks_left_out else "")
            + _table(["rank", "host", "pid", "compute share"],
                     [[str(k), h, str(p), f"{s:.1%}"] for h, p, k, s in top], "top-ranks")
            + f'<script type="application/json" id="heatmap-data">{_json(data)}</script>')  # fmt: skip


def _json(data: object) -> str:
    return json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")  # never ends the script element


def _bars(r: JobReport) -> str:
    if not r.comms:
        return '<p class="muted">no bus bandwidth in the data</p>'
    top = max(c[3] for c in r.comms) or 1.0
    bar_h, label_w = 16, 220
    height = bar_h * len(r.comms) + 10
    bars = "".join(
        f'<g><title>{_e(cid)}: mean {mean:.1f} GB/s, lowest {low:.1f} GB/s, {n} ranks</title>'
        f'<text x="{label_w - 6}" y="{i * bar_h + 12}" class="tick" text-anchor="end">{_e(label[:32])}</text>'
        f'<rect x="{label_w}" y="{i * bar_h + 2}" width="{max(1.0, mean / top * (W - label_w - 80)):.1f}" height="12"/>'
        f'<text x="{label_w + mean / top * (W - label_w - 80) + 4:.1f}" y="{i * bar_h + 12}" class="tick">'
        f"{mean:.1f} GB/s</text></g>"
        for i, (label, cid, n, mean, low) in enumerate(r.comms))  # fmt: skip
    more = (
        f'<p class="muted">{r.comms_left_out} faster communicators not shown</p>' if r.comms_left_out else ""
    )
    return f'<svg viewBox="0 0 {W} {height}" width="{W}" height="{height}" role="img">{bars}</svg>' + more


def _timeline(r: JobReport) -> str:
    if not r.findings:
        return '<p class="muted">no alert and no straggler in the job\'s window</p>'
    start = min(f[6] for f in r.findings)
    end = max(f[7] for f in r.findings)
    lanes = list(dict.fromkeys(f[1] for f in r.findings))
    label_w, lane_h = 150, 18
    xs = lambda t: label_w + (t - start) / ((end - start) or 1.0) * (W - label_w - 10)  # noqa: E731
    marks = "".join(
        f'<g class="sev-{_e(sev)}"><title>{_e(summary)}</title><rect x="{xs(a):.1f}" '
        f'y="{lanes.index(rule) * lane_h + 3}" width="{max(2.0, xs(b) - xs(a)):.1f}" height="12"/></g>'
        for _, rule, sev, _, _, summary, a, b in r.findings)  # fmt: skip
    labels = "".join(f'<text x="{label_w - 6}" y="{i * lane_h + 13}" class="tick" text-anchor="end">{_e(rule)}</text>'
                     for i, rule in enumerate(lanes))  # fmt: skip
    height = lane_h * len(lanes) + 6
    rows = [[f[1], f[2], f[3], "-" if f[4] is None else str(f[4]), _clock(f[6]), _clock(f[7]), f[5]]
            for f in r.findings]  # fmt: skip
    more = (f'<p class="muted">{r.findings_left_out} more (aggregator.report.max_findings)</p>'
            if r.findings_left_out else "")  # fmt: skip
    return (
        f'<svg viewBox="0 0 {W} {height}" width="{W}" height="{height}" role="img">{labels}{marks}</svg>'
        + _table(["what", "severity", "node", "rank", "from", "to", "summary"], rows, "findings")
        + more
    )


def _clock(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%H:%M:%S")


def _gpu_hours(r: JobReport) -> str:
    top = max(r.gpu_hours.values(), default=0.0) or 1.0
    rows = "".join(
        f'<tr data-cause="{_e(c)}"><td>{_e(c)}</td><td class="num">{r.gpu_hours.get(c, 0.0):.2f}</td>'
        f"<td>{_e(_share(r.gpu_hours.get(c, 0.0), r.job_gpu_hours))}</td>"
        f'<td><svg width="200" height="12"><rect width="{200 * r.gpu_hours.get(c, 0.0) / top:.1f}" height="12"/>'
        f"</svg></td></tr>"
        for c in CAUSES)  # fmt: skip
    return (f'<table id="gpu-hours-table"><tr><th>cause</th><th>GPU-hours</th><th>of the job\'s '
            f"{r.job_gpu_hours:.1f}</th><th></th></tr>{rows}</table><p class=\"muted\">straggler and degraded link: "
            "the job's GPUs times the worst finding's cost (share of job time spent waiting) over its evaluations; "
            "hang: the job's GPUs while the alert fired; dead rank: the process's own GPUs while its alert fired. "
            "Causes can overlap in time: the total lost is at most the job's GPU-hours</p>")  # fmt: skip


def _hardware(r: JobReport) -> str:
    if not r.hardware:
        return (
            '<p class="muted">the GPU and NIC samples of the nodes named by findings stand out in nothing</p>'
        )
    rows = [[n, d, m, _unit(v, u), _unit(t, u)] for n, d, m, v, t, u in r.hardware]
    return _table(["node", "device", "metric", "value", "typical (job median)"], rows, "hardware-table")


def _unit(value: float, unit: str) -> str:
    return human({"Hz": "v_hz", "W": "v_w", "C": "v_c", "/s": "v_per_s"}.get(unit, "v"), value)


def _links(r: JobReport) -> str:
    if not r.links:
        return '<p class="muted">no link probe between the job\'s nodes in its window</p>'
    if r.link_median_gbps is None:
        head = (f"<p>{r.links_total} links measured for RTT only: heavy (bandwidth) probes skip nodes that run a "
                "job.</p>")  # fmt: skip
    else:
        head = (f"<p>{r.links_total} links measured, median {r.link_median_gbps:.1f} Gbit/s; "
                f"{'all of them' if r.link_nodes else f'the {len(r.links)} slowest'} below.</p>")  # fmt: skip
    if r.link_nodes and r.link_median_gbps is not None:
        by = {(s, d): b for s, d, b, _ in r.links}
        top = max((b for b in by.values() if b), default=1.0)
        cell = max(8, min(24, 560 // len(r.link_nodes)))
        rects = "".join(
            f'<rect x="{j * cell}" y="{i * cell}" width="{cell - 1}" height="{cell - 1}" '
            f'style="fill:hsl({120 * b / top:.0f},70%,45%)"><title>{_e(s)} -&gt; {_e(d)}: {b:.2f} Gbit/s</title></rect>'
            for i, s in enumerate(r.link_nodes) for j, d in enumerate(r.link_nodes)
            if (b := by.get((s, d))) is not None)  # fmt: skip
        size = cell * len(r.link_nodes)
        head += f'<svg id="link-matrix" width="{size}" height="{size}" role="img">{rects}</svg>'
    rows = [[s, d, "-" if b is None else f"{b:.2f} Gbit/s", "-" if t is None else human("rtt_us", t)]
            for s, d, b, t in r.links[:50]]  # fmt: skip
    return head + _table(["src", "dst", "rate", "RTT"], rows, "link-table")


def _coverage(r: JobReport) -> str:
    c = r.coverage
    rows = [["window", f"{c.since} to {c.until}"], ["RAS polls", str(c.ras_polls)],
            ["ranks (RAS)", "-" if c.ras_gpus is None else str(c.ras_gpus)],
            ["ranks with Inspector data", str(c.ranks_seen)], ["nodes", str(c.nodes_seen)],
            ["summary windows", str(c.summary_windows)], ["collective operations", str(c.operations)],
            ["capture model", ", ".join(c.capture_models) or "-"], ["step time from", c.step_source],
            ["GPU samples", str(c.gpu_samples)], ["NIC samples", str(c.nic_samples)],
            ["link probes", str(c.probes)]]  # fmt: skip
    notes = "".join(f"<li>{_e(n)}</li>" for n in c.notes)
    return _table(["", ""], rows, "coverage-table") + (f"<ul>{notes}</ul>" if notes else "")


def _table(headers: list[str], rows: list[list[str]], ident: str) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_e(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f'<table id="{ident}"><tr>{head}</tr>{body}</table>'


_CSS = """body{font:14px system-ui,sans-serif;margin:0;color:#222}header{background:#1d2b3a;color:#fff;padding:10px 18px}
header h1{margin:0;font-size:20px}header p{margin:4px 0 0;color:#cfe0f5}main{padding:8px 18px;max-width:1100px}
section{margin:14px 0}h2{font-size:16px;border-bottom:1px solid #ddd;padding-bottom:3px}
table{border-collapse:collapse;margin:6px 0}th,td{border:1px solid #ddd;padding:2px 8px;text-align:left}th{background:#f3f5f7}
.num{text-align:right}.muted{color:#777}.cards{display:flex;gap:12px;flex-wrap:wrap}
.cards div{border:1px solid #ddd;border-radius:6px;padding:6px 14px;min-width:90px}.cards b{display:block;font-size:20px}
svg .tick{font-size:11px;fill:#555}polyline{fill:none;stroke-width:1.5}polyline.median{stroke:#2a6fb0}
polyline.max{stroke:#d7263d}.legend span{display:inline-block;width:14px;height:3px;margin:0 4px 3px 10px}
.legend .median{background:#2a6fb0}.legend .max{background:#d7263d}#busbw rect,#gpu-hours rect{fill:#2a6fb0}
.sev-critical rect{fill:#d7263d}.sev-warning rect{fill:#f08c00}.sev-info rect{fill:#8aa}
#heatmap{image-rendering:pixelated;border:1px solid #ddd;cursor:crosshair}"""

# Draws the heatmap from its inline bytes; a pointer over a cell names its rank.
_SCRIPT = """(() => {
  const el = document.getElementById("heatmap-data"), canvas = document.getElementById("heatmap");
  if (!el || !canvas) return;
  const d = JSON.parse(el.textContent), cells = Uint8Array.from(atob(d.cells), c => c.charCodeAt(0));
  const g = canvas.getContext("2d"), px = d.px;
  cells.forEach((v, i) => {
    g.fillStyle = `hsl(${Math.round(50 - v * 50 / 255)}, 90%, ${Math.round(92 - v * 50 / 255)}%)`;
    g.fillRect((i % d.cols) * px, Math.floor(i / d.cols) * px, px, px);
  });
  const tip = document.getElementById("heat-tip"), text = tip.textContent;
  canvas.onmousemove = e => {
    const r = canvas.getBoundingClientRect(), i = Math.floor((e.clientY - r.top) / px) * d.cols + Math.floor((e.clientX - r.left) / px);
    tip.textContent = i < cells.length ? `rank ${d.rank[i]}: ${d.hosts[d.host[i]]} pid ${d.pid[i]}, ${(100 * d.share[i]).toFixed(1)} % computing` : text;
  };
  document.body.dataset.drawn = "1";
})();"""
