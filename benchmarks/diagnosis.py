"""Diagnosis quality of the straggler engine: fault class x capture model x seed, against the naive rule, fed raw
records and fed the agents' summaries side by side.

Every run is a simulated job (``ranksight.simulate.scenarios``: noisy healthy runs, stragglers from 1.1x to 2x, late
onset, a slow node, a NIC at 40 % bandwidth, an intermittent straggler, two stragglers at once), each class in every
``--layouts`` job shape (``moe``: TP, EP, EDP and DP collectives; ``hybrid``: TP collectives of several types and sizes,
PP Send/Recv between nodes, EP, DP gradient buckets of three sizes; ``dense_straggler`` keeps its TP/DP/PP one),
written as real Inspector lines and parsed by the agent's parser. The records are replayed in dump-time order through
the live engine, evaluated every ``evaluate_every_s`` as the aggregator does: the first evaluation that reports a true
culprit gives the time to alert (from the fault's onset; agent and bus delays not included). At the end the same
engine's findings over the whole run (what ``ranksight analyze inspector`` prints) are scored against the truth: a
finding is right when host, process (None for a node) and kind (compute / communication) match.

Hangs (class ``hang``: one rank's process stops, every rank then blocks) are scored apart, on the hang finder
(:mod:`aggregator.models.hangs`, Inspector silence) fed the same replay, evaluated on for 25 s of silence after the
last record: the ranks it names against the truth (recall, precision per capture model), the time from the hang (the
step the process stopped) to the first evaluation naming the culprit, and false hangs on every other run (healthy job
ends included); the summaries' figures go to the result file as ``hang (<capture>).<figure>`` and ``false_hang_runs``.

Every run is replayed twice through a fresh engine: fed the raw records at their dump time, and fed the
``inspector_summary`` records the agents would publish for them (through the agent's own summarizer, defaults of
``agent.collectors.inspector``: 5 s windows published in parts every ``summary_publish_s``, each node's agent at its
own phase of that period; the wait for the next part is in the time to alert).

The naive rule, measured on the same records: "the process with the lowest bus bandwidth is the straggler" (lowest
median busbw relative to its comms' medians), one finding per run.

Dump intervals: each run is made at every ``--dump-ms`` (ring) and ``--sampled-dump-ms`` (sampled) interval, each
process's dump thread at its own phase. Longer intervals get longer jobs (a sampled job at 1 s and beyond runs some
130 s past the onset: a weak straggler needs many single-slot samples). Steady vs intermittent is scored where the
finding's stated resolution can tell (the fault lasts ``PoolPattern.MIN_POOLS`` pools of that resolution, and a burst
and the gap after it each at least twice the resolution): right when it says so; "undetermined" is never wrong but not
right either. A finding's resolution is its own claim: the report prints how many compute findings it left unscored.

    python benchmarks/diagnosis.py [--seeds 10] [--quick] [--classes a,b] [--layouts moe,hybrid] [--jobs 2]
        [--dump-ms 100,1000,2000] [--sampled-dump-ms 1000,2000,5000] [--out benchmarks/results/diagnosis.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks.results

from benchmarks.results import write_result
from ranksight.agent.collectors.inspector.settings import InspectorSettings
from ranksight.aggregator.models.engines import params_of
from ranksight.aggregator.models.hangs import HangFinder
from ranksight.aggregator.models.straggler.compute import PoolPattern
from ranksight.aggregator.models.straggler.engine import StragglerEngine
from ranksight.aggregator.models.straggler.findings import Finding
from ranksight.aggregator.models.straggler.settings import StragglerSettings
from ranksight.formats.inspector import parse_op
from ranksight.schemas.records import InspectorRecord, InspectorSummaryRecord
from ranksight.simulate.inspector import JobSpec, run_job, summarize
from ranksight.simulate.plugin_scenarios import Truth as PluginTruth
from ranksight.simulate.scenarios import CLASSES, ONSET_STEP, Capture, Truth, truth

TARGETS = {"precision": 0.97, "recall": 0.97, "slowdown_error": 0.15, "tta_p90_s": 15.0}
TTA_TARGET_S = {"ring": 15.0, "sampled": 60.0}  # time to alert p90 at 1 s dumps
PATTERN_TARGET = 0.95
FEEDS = (
    "raw",
    "summary",
)  # what the live engine is fed: raw records, or the agents' inspector_summary records
FEED_NAMES = {"raw": "raw records", "summary": "summaries"}


@dataclass
class Score:
    findings: int = 0
    right: int = 0  # findings that name a culprit
    truths: int = 0
    found: int = 0  # culprits named
    attributed: int = 0  # findings on a culprit's host with the right kind (compute / communication)
    on_culprit_host: int = 0
    false_alarm_runs: int = 0  # healthy runs with any finding
    healthy_runs: int = 0
    slowdown_errors: list[float] = field(default_factory=list)
    tta_s: list[float] = field(default_factory=list)
    missed_online: int = 0
    hang_runs: int = 0
    hang_named: int = 0  # lagging ranks named (distinct processes)
    hang_right: int = 0  # of them, hung ones
    hang_found: int = 0  # hung processes named
    hang_truths: int = 0
    hang_tta_s: list[float] = field(default_factory=list)
    false_hang_runs: int = 0  # runs without a hang where a hang was named
    pattern_named: int = 0  # compute culprits named (a pattern scored or not)
    pattern_judgeable: int = 0  # of them, where the stated resolution can tell steady from intermittent
    pattern_right: int = 0
    pattern_wrong: int = 0  # said steady for a fault in resolvable bursts, or intermittent for a steady one
    pattern_undetermined: int = 0

    def merge(self, other: Score) -> None:
        for name, value in vars(other).items():
            mine = getattr(self, name)
            setattr(self, name, mine + value)


def _matches(f: tuple[str, int | None, str], t: Truth) -> bool:
    return f == (t.hostname, t.pid, t.kind)


def score_hangs(named: set[tuple[str, int]], hung: list[Truth], s: Score) -> None:
    s.hang_runs, s.hang_truths, s.hang_named = int(bool(hung)), len(hung), len(named)
    s.hang_right = sum(any((t.hostname, t.pid) == proc for t in hung) for proc in named)
    s.hang_found = sum((t.hostname, t.pid) in named for t in hung)
    s.false_hang_runs = int(not hung and bool(named))


Row = tuple[str, int | None, str, float, str, float]  # host, pid, kind, slowdown, pattern, its resolution (s)


def score(findings: list[Row], truths: list[Truth], step_s: float = 0.0, steps: int = 0) -> Score:
    s = Score(findings=len(findings), truths=len(truths), healthy_runs=0 if truths else 1)
    s.false_alarm_runs = int(not truths and bool(findings))
    for host, pid, kind, slowdown, pattern, resolution_s in findings:
        hit = [t for t in truths if _matches((host, pid, kind), t)]
        s.right += bool(hit)
        on_host = [t for t in truths if t.hostname == host]
        s.on_culprit_host += bool(on_host)
        s.attributed += any(t.kind == kind for t in on_host)
        if hit:
            expected = 1 + hit[0].duty * (hit[0].factor - 1)  # average over the fault's time
            s.slowdown_errors.append(abs(slowdown - expected) / expected)
            if hit[0].kind == "compute" and step_s:
                score_pattern(s, hit[0], pattern, resolution_s, step_s, (steps - hit[0].onset_step) * step_s)
    s.found = sum(any(_matches(f[:3], t) for f in findings) for t in truths)
    return s


def pattern_judgeable(t: Truth | PluginTruth, resolution_s: float, step_s: float, fault_s: float) -> bool:
    """Whether a finding's pattern stated at ``resolution_s`` can tell steady from intermittent for this fault: it
    lasts (``fault_s``, to the job's end) ``PoolPattern.MIN_POOLS`` pools of that resolution, and each of its bursts
    and pauses two (random single slow steps: never, no dump tick resolves them)."""
    if t.every_steps:
        shortest = min(t.burst_steps, t.every_steps - t.burst_steps) * step_s
        resolvable = shortest >= 2 * resolution_s
    else:
        resolvable = t.duty >= 1
    return resolvable and fault_s >= PoolPattern.MIN_POOLS * resolution_s


def score_pattern(
    s: Score, t: Truth, pattern: str, resolution_s: float, step_s: float, fault_s: float
) -> None:
    """Steady vs intermittent against the truth, where the finding's resolution can tell them apart."""
    bursts = t.every_steps > 0 or t.duty < 1
    judgeable = pattern_judgeable(t, resolution_s, step_s, fault_s)
    s.pattern_named += 1
    s.pattern_undetermined += pattern == "undetermined"
    if judgeable:
        s.pattern_judgeable += 1
        s.pattern_right += pattern == ("intermittent" if bursts else "steady")
    s.pattern_wrong += (pattern == "intermittent" and not bursts) or (
        pattern == "steady" and bursts and judgeable
    )


def naive(records: list[InspectorRecord]) -> list[Row]:
    """The process whose bus bandwidth is lowest against its comms' medians."""
    per: dict[tuple[str, tuple[str, int]], list[float]] = defaultdict(list)
    for r in records:
        if r.busbw_gbs:
            per[(r.comm_id, (r.hostname, r.pid))].append(r.busbw_gbs)
    medians = {key: statistics.median(v) for key, v in per.items()}
    by_comm: dict[str, list[float]] = defaultdict(list)
    for (comm, _), m in medians.items():
        by_comm[comm].append(m)
    relative: dict[tuple[str, int], list[float]] = defaultdict(list)
    for (comm, proc), m in medians.items():
        relative[proc].append(m / statistics.median(by_comm[comm]))
    host, pid = min(relative, key=lambda proc: statistics.mean(relative[proc]))
    return [(host, pid, "compute", 1.0, "undetermined", 0.0)]


def job_spec(cls: str, capture: Capture, seed: int, dump_ms: float, layout: str = "") -> JobSpec:
    """The class's job at this dump interval (in ``layout`` when given, else the class's own), long enough to judge
    at it: ~40 s past the onset, and a sampled job at 1 s dumps and beyond ~130 s, at 5 s ~260 s (a weak straggler
    shows only in the statistics of many single-slot samples)."""
    spec = CLASSES[cls](capture, seed)
    # sampled: the horizon holds 48 ticks (48 s at 1 s dumps, 240 s at 5 s), and a weak finding must stay flagged over
    # half of one before it alerts (at 5 s most are found by the end of the run, not yet online)
    past_onset = round(2600 * max(1.0, dump_ms / 2500)) if capture == "sampled" and dump_ms >= 1000 else (
        800 if dump_ms >= 1000 else 0)  # fmt: skip
    steps = max(spec.steps, ONSET_STEP + past_onset) if cls != "late_onset" else spec.steps + past_onset
    return dataclasses.replace(spec, dump_interval_ms=dump_ms, steps=steps, layout=layout or spec.layout)


def run_one(
    cls: str, capture: Capture, dump_ms: float, seed: int, layout: str = ""
) -> tuple[str, dict[str, Score], Score, float]:
    spec = job_spec(cls, capture, seed, dump_ms, layout)
    timed, step_us = run_job(spec)
    records = sorted(
        (parse_op(line) for lines in timed.values() for _, line in lines), key=lambda r: r.dump_ts_us
    )
    started = time.perf_counter()
    scores = {feed: replay(spec, records, step_us, feed) for feed in FEEDS}
    engine_s = time.perf_counter() - started
    hung = [t for t in truth(spec) if t.kind == "hang"]
    label = f"{cls} ({capture})" if hung else cls
    return label, scores, score(naive(records), [t for t in truth(spec) if t.kind != "hang"]), engine_s


def replay(spec: JobSpec, records: list[InspectorRecord], step_us: list[int], feed: str) -> Score:
    """The live engine and hang finder fed ``raw`` records at their dump time or the agents' ``summary`` records when
    they are published (a part per node every ``summary_publish_s``, defaults of ``agent.collectors.inspector``)."""
    hung = [t for t in truth(spec) if t.kind == "hang"]
    truths = [t for t in truth(spec) if t.kind != "hang"]
    settings = StragglerSettings.model_validate({})
    engine = StragglerEngine(params_of(settings))
    hangs = HangFinder(settings.hang_quiet_s)
    every_us = int(settings.evaluate_every_s * 1e6)
    arrivals: list[tuple[int, InspectorRecord | InspectorSummaryRecord]]
    if feed == "raw":
        arrivals = [(rec.dump_ts_us, rec) for rec in records]
    else:
        agent = InspectorSettings.model_validate({})
        window_s, slice_s, publish_s = agent.summary_window_s, agent.summary_slice_s, agent.summary_publish_s
        arrivals = list(summarize(records, window_s, slice_s, publish_s))
    next_eval = records[0].dump_ts_us + every_us
    onset = {t: step_us[t.onset_step] for t in truths + hung}
    alerted: dict[Truth, float] = {}
    named: set[tuple[str, int]] = set()

    def evaluate_hangs(at_us: int) -> None:
        for h in hangs.hangs(at_us * 1000):
            for r in h.lagging:
                named.add((r.hostname, r.pid))
                for t in hung:
                    if t not in alerted and (t.hostname, t.pid) == (r.hostname, r.pid):
                        alerted[t] = max(0.0, (at_us - onset[t]) / 1e6)

    for at_us, x in arrivals:
        while at_us >= next_eval:
            for f in engine.evaluate():
                for t in truths:
                    if t not in alerted and _matches(f.key, t):
                        alerted[t] = max(0.0, (next_eval - onset[t]) / 1e6)
            evaluate_hangs(next_eval)
            next_eval += every_us
        if isinstance(x, InspectorSummaryRecord):
            engine.add_summary(x)
            hangs.add_summary(x, at_us * 1000, x.hostname)
        else:
            engine.add(x)
            hangs.add(x, at_us * 1000, x.hostname)
    for _ in range(int(25 / settings.evaluate_every_s)):  # the silence after the last record (and one window)
        evaluate_hangs(next_eval)
        next_eval += every_us
    result = engine.analyze()
    step_s = (step_us[-1] - step_us[0]) / max(1, len(step_us) - 1) / 1e6
    ours = score([_row(f) for f in result.stragglers], truths, step_s, len(step_us))
    ours.tta_s = [s for t, s in alerted.items() if t.kind != "hang"]
    ours.missed_online = len(truths) - sum(t.kind != "hang" for t in alerted)
    score_hangs(named, hung, ours)
    ours.hang_tta_s = [s for t, s in alerted.items() if t.kind == "hang"]
    return ours


def _row(f: Finding) -> Row:
    return f.hostname, f.pid, f.kind, f.slowdown, f.pattern, f.pattern_resolution_s


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def report(name: str, s: Score) -> dict[str, float]:
    precision = s.right / s.findings if s.findings else 1.0
    recall = s.found / s.truths if s.truths else 1.0
    attribution = (
        s.attributed / s.on_culprit_host if s.on_culprit_host else float("nan")
    )  # nan: none on a culprit
    err = max(s.slowdown_errors) if s.slowdown_errors else float("nan")  # nan: no culprit named
    mean_err = statistics.mean(s.slowdown_errors) if s.slowdown_errors else float("nan")
    pattern = s.pattern_right / s.pattern_judgeable if s.pattern_judgeable else float("nan")
    fa = f"{s.false_alarm_runs}/{s.healthy_runs}" if s.healthy_runs else "-"
    print(f"  {name:<22} precision {precision:5.3f}  recall {recall:5.3f}  attribution {attribution:5.3f}  "
          f"slowdown err mean {mean_err:5.1%} max {err:5.1%}  false alarms {fa:>5}"
          + (f"  steady/intermittent right {s.pattern_right}/{s.pattern_judgeable} (of {s.pattern_named} named), "
             f"wrong {s.pattern_wrong}, undetermined {s.pattern_undetermined}" if s.pattern_judgeable or s.pattern_wrong
             or s.pattern_undetermined else "")
          + (f"  time-to-alert p50 {_pct(s.tta_s, 0.5):4.1f}s p90 {_pct(s.tta_s, 0.9):4.1f}s" if s.tta_s else "")
          + (f" (not alerted online: {s.missed_online})" if s.missed_online else ""))  # fmt: skip
    return {"precision": precision, "recall": recall, "slowdown_error": err, "tta_p90_s": _pct(s.tta_s, 0.9),
            "tta_p50_s": _pct(s.tta_s, 0.5), "false_alarms": s.false_alarm_runs, "healthy_runs": s.healthy_runs,
            "pattern_right": pattern, "pattern_judgeable": s.pattern_judgeable, "pattern_named": s.pattern_named,
            "pattern_wrong": s.pattern_wrong,
            "pattern_undetermined": s.pattern_undetermined, "slowdown_error_mean": mean_err}  # fmt: skip


def report_hangs(name: str, s: Score) -> dict[str, float]:
    precision = s.hang_right / s.hang_named if s.hang_named else float("nan")
    recall = s.hang_found / s.hang_truths if s.hang_truths else float("nan")
    tta = f"p50 {_pct(s.hang_tta_s, 0.5):4.1f}s p90 {_pct(s.hang_tta_s, 0.9):4.1f}s" if s.hang_tta_s else "-"
    print(
        f"  {name:<16} runs {s.hang_runs:3d}  hung ranks named {s.hang_found}/{s.hang_truths} (recall "
        f"{recall:5.3f})  ranks named {s.hang_named} (precision {precision:5.3f})  time from hang to alert {tta}"
    )
    return {"runs": s.hang_runs, "recall": recall, "precision": precision, "tta_p50_s": _pct(s.hang_tta_s, 0.5),
            "tta_p90_s": _pct(s.hang_tta_s, 0.9)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10, help="seeds 1..N per class, capture model and interval")
    ap.add_argument("--quick", action="store_true", help="seeds 1..2, 1 s dumps only (what CI can afford)")
    ap.add_argument(
        "--classes", default=",".join(CLASSES), help="comma-separated subset of: " + ", ".join(CLASSES)
    )
    ap.add_argument("--dump-ms", default="100,1000,2000", help="ring dump intervals (ms), comma-separated")
    ap.add_argument("--sampled-dump-ms", default="1000,2000,5000", help="sampled dump intervals (ms)")
    ap.add_argument(
        "--layouts",
        default="moe,hybrid",
        help="job layouts, comma-separated: moe (TP, EP, EDP, DP), hybrid (TP, PP Send/Recv, EP, DP buckets); "
        "dense_straggler runs once, in its own (TP, DP, PP)",
    )
    ap.add_argument("--jobs", type=int, default=2, help="worker processes")
    ap.add_argument(
        "--out", default="", help="write the figures as JSON here (benchmarks/results/diagnosis.json)"
    )
    args = ap.parse_args()
    seeds = range(1, (2 if args.quick else args.seeds) + 1)
    classes = args.classes.split(",")
    ring_ms = [1000.0] if args.quick else [float(x) for x in args.dump_ms.split(",") if x]
    sampled_ms = [1000.0] if args.quick else [float(x) for x in args.sampled_dump_ms.split(",") if x]
    settings = [("ring", ms) for ms in ring_ms] + [("sampled", ms) for ms in sampled_ms]
    layouts = [x for x in args.layouts.split(",") if x]
    runs = [
        (cls, cap, ms, seed, "dense" if cls == "dense_straggler" else layout)
        for i, layout in enumerate(layouts)
        for cls in classes
        for cap, ms in settings
        for seed in seeds
        if cls != "dense_straggler" or i == 0  # its own layout, once
    ]
    started = time.perf_counter()
    ours: dict[str, dict[str, Score]] = {feed: defaultdict(Score) for feed in FEEDS}
    per_setting: dict[str, dict[str, Score]] = {feed: defaultdict(Score) for feed in FEEDS}
    base: dict[str, Score] = defaultdict(Score)
    engine_s = 0.0
    hang_scores: dict[str, dict[str, Score]] = {feed: defaultdict(Score) for feed in FEEDS}
    false_hangs = {feed: Score() for feed in FEEDS}
    with ProcessPoolExecutor(args.jobs) as pool:
        for (_, cap, ms, _, layout), (label, mine, theirs, seconds) in zip(
            runs, pool.map(run_one, *zip(*runs, strict=True)), strict=True
        ):
            for feed in FEEDS:
                if mine[feed].hang_runs:
                    hang_scores[feed][label].merge(mine[feed])
                else:
                    ours[feed][label].merge(mine[feed])
                    per_setting[feed][f"{cap} {ms / 1000:g} s dumps"].merge(mine[feed])
                    per_setting[feed][f"{layout} {cap} {ms / 1000:g} s dumps"].merge(mine[feed])
                    false_hangs[feed].merge(mine[feed])
            if not mine["raw"].hang_runs:
                base[label].merge(theirs)
            engine_s += seconds
    print(f"{len(runs)} runs ({len(classes)} classes x {', '.join(f'{c} {ms / 1000:g} s' for c, ms in settings)} x "
          f"seeds {seeds[0]}..{seeds[-1]}) in {time.perf_counter() - started:.0f}s; engine (replays + final analyses, "
          f"both feeds) {engine_s:.1f}s in all")  # fmt: skip
    classes = [cls for cls in classes if cls in ours["raw"]]  # hang runs are scored apart, below
    overall: dict[str, dict[str, float]] = {}
    figures: dict[str, object] = {
        "runs": len(runs),
        "seeds": len(seeds),
        "settings": [list(x) for x in settings],
    }
    for feed in FEEDS:
        total = Score()
        print(f"ranksight engine on {FEED_NAMES[feed]}, per fault class (every setting):")
        figures[feed] = {"classes": {cls: report(cls, ours[feed][cls]) for cls in classes}}
        for cls in classes:
            total.merge(ours[feed][cls])
        print(f"ranksight engine on {FEED_NAMES[feed]}, per capture model and dump interval (every class):")
        figures[feed]["settings"] = {name: report(name, score) for name, score in per_setting[feed].items()}  # type: ignore[index]
        overall[feed] = report("overall", total)
        figures[feed]["overall"] = overall[feed]  # type: ignore[index]
    if classes:
        print_targets(figures, overall, base, classes)
    for feed in FEEDS:
        hang_figures: dict[str, object] = {}
        if hang_scores[feed]:
            print(f"hang localization from Inspector silence, {FEED_NAMES[feed]} (the ranks that went silent behind "
                  "their peers):")  # fmt: skip
            hang_figures = {
                label: report_hangs(label, hang_scores[feed][label]) for label in sorted(hang_scores[feed])
            }
        without = len(runs) - sum(s.hang_runs for s in hang_scores[feed].values())
        print(f"  false hangs on runs without one, {FEED_NAMES[feed]}: {false_hangs[feed].false_hang_runs}/{without} "
              "(target 0)")  # fmt: skip
        figures.setdefault(feed, {})["hangs"] = hang_figures | {  # type: ignore[index]
            "false_hang_runs": false_hangs[feed].false_hang_runs,
            "runs_without_hang": without,
        }
    if args.out:
        write_figures(Path(args.out), figures, classes, " ".join(sys.argv[1:]))


def print_targets(
    figures: dict[str, Any], overall: dict[str, dict[str, float]], base: dict[str, Score], classes: list[str]
) -> None:
    """The naive rule's figures and the straggler targets (on summaries, the online path)."""
    naive_total = Score()
    print("naive rule (lowest bus bandwidth is the straggler, raw records):")
    for cls in classes:
        report(cls, base[cls])
        naive_total.merge(base[cls])
    naive_overall = report("overall", naive_total)
    print("targets (on summaries, the online path):")
    for key, target in TARGETS.items():
        value = overall["summary"][key]
        if key == "tta_p90_s":
            continue
        ok = value <= target if key == "slowdown_error" else value >= target
        print(f"  {key:<15} {value:6.3f} target {'<=' if key == 'slowdown_error' else '>='} {target}: "
              f"{'met' if ok else 'MISSED'} (raw {overall['raw'][key]:.3f}, naive {naive_overall[key]:.3f})")  # fmt: skip
    worst = min((figures["summary"]["classes"][cls][m], cls, m) for cls in classes  # type: ignore[index]
                for m in ("precision", "recall"))  # fmt: skip
    print(f"  worst class: {worst[2]} {worst[0]:.3f} ({worst[1]}), target >= {TARGETS['recall']}")
    pattern = overall["summary"]["pattern_right"]
    print(
        f"  steady vs intermittent right where resolvable {pattern:.3f} target >= {PATTERN_TARGET} "
        f"(wrong {overall['summary']['pattern_wrong']:.0f}, undetermined {overall['summary']['pattern_undetermined']:.0f}; "
        f"resolvable {overall['summary']['pattern_judgeable']:.0f} of {overall['summary']['pattern_named']:.0f} compute "
        "culprits named)"
    )
    for cap, target in TTA_TARGET_S.items():
        at_1s = figures["summary"]["settings"].get(f"{cap} 1 s dumps")  # type: ignore[index]
        if at_1s:
            print(
                f"  time-to-alert p90 {cap} 1 s dumps {at_1s['tta_p90_s']:.1f}s target <= {target:g}s: "
                f"{'met' if at_1s['tta_p90_s'] <= target else 'MISSED'}"
            )
    for feed in FEEDS:
        print(f"  false alarms on healthy runs, {FEED_NAMES[feed]}: {overall[feed]['false_alarms']:.0f} (target 0; "
              f"naive {naive_overall['false_alarms']:.0f})")  # fmt: skip


def write_figures(path: Path, figures: dict[str, object], classes: list[str], argv: str) -> None:
    """The summary feed's figures by class and setting, against the issue's targets, in the common result format
    (``benchmarks/results.py``); every figure of both feeds in its ``detail``."""
    summary: dict[str, Any] = figures["summary"]  # type: ignore[assignment]
    flat: dict[str, Any] = {"runs": figures["runs"], "seeds": figures["seeds"]}
    targets: dict[str, Any] = {}
    for key in ("precision", "recall", "pattern_right", "slowdown_error", "false_alarms"):
        flat[f"overall.{key}"] = summary["overall"][key]
    targets |= {"overall.precision": {"min": TARGETS["precision"]}, "overall.recall": {"min": TARGETS["recall"]},
                "overall.pattern_right": {"min": PATTERN_TARGET}, "overall.false_alarms": {"max": 0},
                "overall.slowdown_error": {"max": TARGETS["slowdown_error"]}}  # fmt: skip
    for cls in classes:
        for key in ("precision", "recall"):
            flat[f"{cls}.{key}"] = summary["classes"][cls][key]
            targets[f"{cls}.{key}"] = {"min": TARGETS[key]}
    for name, cell in summary["settings"].items():
        flat[f"{name}.tta_p90_s"] = cell["tta_p90_s"]
    for cap, target in TTA_TARGET_S.items():
        if f"{cap} 1 s dumps.tta_p90_s" in flat:
            targets[f"{cap} 1 s dumps.tta_p90_s"] = {"max": target}
    hangs: dict[str, Any] = summary["hangs"]
    for label, cell in hangs.items():
        if isinstance(cell, dict):  # a capture model's hang runs: "hang (ring)", "hang (sampled)"
            for key in ("recall", "precision", "tta_p90_s"):
                flat[f"{label}.{key}"] = cell[key]
    flat["false_hang_runs"] = hangs["false_hang_runs"]
    targets["false_hang_runs"] = {"max": 0}
    written = write_result(
        path.stem, _finite(flat), targets, f"python benchmarks/diagnosis.py {argv}".strip()
    )  # type: ignore[arg-type]
    result = json.loads(written.read_text())
    written.write_text(json.dumps(result | {"detail": _finite(figures)}, indent=1) + "\n")


def _finite(value: object) -> object:
    """NaN (no figure: nothing to measure it on) as JSON null."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(x) for key, x in value.items()}
    return value


if __name__ == "__main__":
    main()
