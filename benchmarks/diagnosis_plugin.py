"""Diagnosis quality of the straggler engine on what the real NCCL Inspector plugin writes, at the settings operators
use: plugin version x dump interval x fault class x seed.

Every run is a job of :mod:`ranksight.simulate.plugin_scenarios` (4 nodes x 4 GPUs, TP inside a node, PP Send/Recv
between nodes, EP and DP across node subsets, several collective types and sizes per communicator, steps of 50 ms to
2 s by seed) emitted through the unmodified plugin (:mod:`ranksight.simulate.plugin_job`: one OS process per rank, a
host name per node, the plugin's own dump thread and capture model), under libfaketime's clock speed-up. Its files
are read with the agent's parser (every line counted: bad lines are reported) and:

- the final findings are those of ``ranksight analyze inspector`` (:func:`analyze_records` on the whole run), scored
  against the truth: a finding is right when its process (or node, for a node-wide or network fault) and its kind
  (compute / communication) match a fault; precision, recall, slowdown error (against the fault's average slowdown over
  its time), false alarms on healthy runs;
- steady vs intermittent: the finding's ``pattern`` (``steady`` / ``intermittent`` / ``undetermined``, at its stated
  ``pattern_resolution_s``) where the engine states one, else ``intermittent`` when its duty cycle is under 0.75 (the
  engine's own rule) at the dump interval's resolution. A fault is judgeable when it lasts ``PoolPattern.MIN_POOLS``
  pools of that resolution and is steady, or slow in bursts whose bursts and gaps each last at least twice that
  resolution (:func:`benchmarks.diagnosis.pattern_judgeable`); ``undetermined`` is never wrong, nor right;
- time to alert: the same records replayed in dump-time order through the live engine (the aggregator's, evaluated
  every ``evaluate_every_s``; agent and bus delays not included), from the fault's onset to the first evaluation that
  names it.

    python benchmarks/diagnosis_plugin.py --quick     # a handful of cases (< 3 min)
    python benchmarks/diagnosis_plugin.py --full      # every version x interval x class, --seeds per cell
        [--versions 2.30.7,...] [--ring-ms 100,1000,2000] [--sampled-ms 100,1000,2000,5000] [--classes a,b]
        [--seeds 2 | --seeds 1,3] [--out benchmarks/results/diagnosis_plugin.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks.results

from benchmarks.diagnosis import pattern_judgeable
from benchmarks.results import write_result
from ranksight.agent.collectors.inspector.dumps import DumpReader
from ranksight.aggregator.models.engines import params_of
from ranksight.aggregator.models.straggler.engine import StragglerEngine, analyze_records
from ranksight.aggregator.models.straggler.findings import Finding
from ranksight.aggregator.models.straggler.settings import StragglerSettings
from ranksight.schemas.records import InspectorRecord
from ranksight.simulate.inspector import JobSpec, step_starts
from ranksight.simulate.inspector_plugin import PLUGIN_VERSIONS, SAMPLED_VERSIONS
from ranksight.simulate.plugin_job import PluginRun, run_job_through_plugin
from ranksight.simulate.plugin_scenarios import CLASSES, Capture, Truth, step_ms, truth

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {"precision": 0.97, "recall": 0.97, "pattern_accuracy": 0.95, "slowdown_error": 0.15}
TTA_TARGET_S = {"ring": 15.0, "sampled": 60.0}  # at 1 s dumps
QUICK = [  # (version, dump ms, class, seed): the seed sets the step length (1: 50 ms, 2: 120 ms, 3: 400 ms, 4: 2 s)
    ("2.30.7", 1000.0, "compute_1.5", 2),
    ("2.30.7", 1000.0, "healthy", 2),
    ("2.30.7", 1000.0, "nic", 3),
    ("2.30.7", 100.0, "bursty", 3),
    ("2.29.3", 1000.0, "compute_1.5", 3),
    ("2.28.9", 2000.0, "compute_1.2", 3),
    ("2.29.3", 1000.0, "noisy_healthy", 3),
]


@dataclasses.dataclass
class CaseResult:
    version: str
    dump_ms: float
    cls: str
    seed: int
    step_ms: float
    records: int
    bad_lines: int
    wall_s: float
    speedup: float
    late_p99_ms: (
        float  # how late the worst process handed the plugin its ops (job time): compare with dump_ms
    )
    findings: list[dict[str, Any]]
    truths: int
    right: int  # findings that name a fault
    found: int  # faults named
    false_alarm: bool  # a healthy run with any finding
    slowdown_errors: list[float]
    pattern_judgeable: int
    pattern_right: int
    pattern_wrong: int
    pattern_undetermined: int
    tta_s: list[float]
    missed_online: int


def _pattern(f: Finding) -> tuple[str, float | None]:
    """The finding's steady / intermittent / undetermined and its resolution (s), where the engine states them."""
    stated = getattr(f, "pattern", None)
    if isinstance(stated, str):
        return stated, float(getattr(f, "pattern_resolution_s", 0.0) or 0.0)
    return ("intermittent" if f.duty_cycle < 0.75 else "steady"), None


def _judge_pattern(
    t: Truth, pattern: str, resolution_s: float, step_s: float, fault_s: float
) -> tuple[bool, bool, bool]:
    """(judgeable, right, wrong) for a compute fault's pattern as stated at ``resolution_s``."""
    bursts = t.every_steps > 0 or t.duty < 1
    judgeable = pattern_judgeable(t, resolution_s, step_s, fault_s)
    right = judgeable and pattern == ("intermittent" if bursts else "steady")
    wrong = (pattern == "intermittent" and not bursts) or (pattern == "steady" and bursts and judgeable)
    return judgeable, right, wrong


class _Culprits:
    """Matches findings (host, pid) to the job's faults through the processes the plugin run had."""

    def __init__(self, spec: JobSpec, run: PluginRun) -> None:
        self.member = {proc: member for member, proc in run.processes.items()}
        self.node = {spec.hostname(n): n for n in range(spec.nodes)}

    def matches(self, f: Finding, t: Truth) -> bool:
        if f.kind != t.kind or self.node.get(f.hostname) != t.node:
            return False
        if t.gpu is None:
            return f.pid is None
        return f.pid is not None and self.member.get((f.hostname, f.pid)) == (t.node, t.gpu)


def run_case(version: str, dump_ms: float, cls: str, seed: int, work: Path) -> CaseResult:
    capture: Capture = "sampled" if version in SAMPLED_VERSIONS else "ring"
    spec = CLASSES[cls](capture, seed, dump_ms)
    directory = work / f"{version}-{dump_ms:g}ms-{cls}-{seed}"
    run = run_job_through_plugin(spec, version, directory)
    reader = DumpReader(directory)
    records = sorted(reader.records(), key=lambda r: r.dump_ts_us)
    truths = truth(spec)
    culprits = _Culprits(spec, run)
    shift_us = run.start_us - spec.start_us
    steps = step_starts(spec)
    onset_us = {t: steps[t.onset_step] + shift_us for t in truths}
    tta, missed = _online(records, truths, culprits, onset_us)
    shutil.rmtree(directory)  # a full sweep would fill the disk
    result = analyze_records(records)
    findings = result.stragglers
    step_s = step_ms(seed) / 1000
    right = sum(any(culprits.matches(f, t) for t in truths) for f in findings)
    found = sum(any(culprits.matches(f, t) for f in findings) for t in truths)
    errors: list[float] = []
    judgeable = right_pattern = wrong_pattern = undetermined = 0
    for f in findings:
        hit = [t for t in truths if culprits.matches(f, t)]
        if not hit:
            continue
        errors.append(abs(f.slowdown - hit[0].expected_slowdown) / hit[0].expected_slowdown)
        if hit[0].kind == "compute":
            pattern, stated = _pattern(f)
            fault_s = (len(steps) - hit[0].onset_step) * step_s
            can, ok, wrong = _judge_pattern(hit[0], pattern, stated or dump_ms / 1000, step_s, fault_s)
            judgeable, right_pattern, wrong_pattern = (
                judgeable + can,
                right_pattern + ok,
                wrong_pattern + wrong,
            )
            undetermined += pattern == "undetermined"
    return CaseResult(
        version, dump_ms, cls, seed, step_ms(seed), len(records), reader.bad_lines, run.wall_s, run.speedup,
        run.late_p99_us / 1000,
        [f.as_dict() | {"process": culprits.member.get((f.hostname, f.pid or -1))} for f in findings],
        len(truths), right, found, not truths and bool(findings), errors, judgeable, right_pattern, wrong_pattern,
        undetermined, tta, missed,
    )  # fmt: skip


def _online(
    records: list[InspectorRecord], truths: list[Truth], culprits: _Culprits, onset_us: dict[Truth, int]
) -> tuple[list[float], int]:
    """The live engine fed the records in dump-time order, evaluated every ``evaluate_every_s``: the time from each
    fault's onset to the first evaluation naming it, and how many it never named."""
    if not records:
        return [], len(truths)
    settings = StragglerSettings.model_validate({})
    engine = StragglerEngine(params_of(settings))
    every_us = int(settings.evaluate_every_s * 1e6)
    next_eval = records[0].dump_ts_us + every_us
    alerted: dict[Truth, float] = {}

    def evaluate(at_us: int) -> None:
        for f in engine.evaluate():
            for t in truths:
                if t not in alerted and culprits.matches(f, t):
                    alerted[t] = max(0.0, (at_us - onset_us[t]) / 1e6)

    for rec in records:
        while rec.dump_ts_us >= next_eval:
            evaluate(next_eval)
            next_eval += every_us
        engine.add(rec)
    evaluate(next_eval)
    return list(alerted.values()), len(truths) - len(alerted)


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def summarize(cases: list[CaseResult]) -> dict[str, Any]:
    findings = sum(len(c.findings) for c in cases)
    truths = sum(c.truths for c in cases)
    healthy = [c for c in cases if not c.truths]
    errors = [e for c in cases for e in c.slowdown_errors]
    judgeable = sum(c.pattern_judgeable for c in cases)
    tta = [s for c in cases for s in c.tta_s]
    return {
        "runs": len(cases),
        "precision": sum(c.right for c in cases) / findings if findings else 1.0,
        "recall": sum(c.found for c in cases) / truths if truths else 1.0,
        "pattern_accuracy": sum(c.pattern_right for c in cases) / judgeable if judgeable else None,
        "pattern_judgeable": judgeable,
        "pattern_wrong": sum(c.pattern_wrong for c in cases),
        "pattern_undetermined": sum(c.pattern_undetermined for c in cases),
        "slowdown_error_mean": statistics.mean(errors) if errors else None,
        "slowdown_error_max": max(errors) if errors else None,
        "false_alarms": sum(c.false_alarm for c in healthy),
        "healthy_runs": len(healthy),
        "tta_p50_s": _pct(tta, 0.5) if tta else None,
        "tta_p90_s": _pct(tta, 0.9) if tta else None,
        "not_alerted_online": sum(c.missed_online for c in cases),
        # runs whose ops reached the plugin late by over a quarter of the dump interval (a CPU-starved machine)
        "late_runs": sum(c.late_p99_ms > 0.25 * c.dump_ms for c in cases),
    }


def _fmt(value: object, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def print_group(title: str, rows: dict[str, dict[str, Any]]) -> None:
    print(title)
    for cls, m in rows.items():
        fa = f"{m['false_alarms']}/{m['healthy_runs']}" if m["healthy_runs"] else "-"
        pattern = (f"{_fmt(m['pattern_accuracy'])} ({m['pattern_judgeable']} judgeable, {m['pattern_wrong']} wrong, "
                   f"{m['pattern_undetermined']} undetermined)")  # fmt: skip
        print(f"  {cls:<15} runs {m['runs']:2d}  precision {m['precision']:.3f}  recall {m['recall']:.3f}  "
              f"steady/intermittent {pattern}  slowdown err mean {_fmt(m['slowdown_error_mean'], '.1%')} "
              f"max {_fmt(m['slowdown_error_max'], '.1%')}  false alarms {fa:>5}  "
              f"time-to-alert p90 {_fmt(m['tta_p90_s'], '.1f')} s (not alerted {m['not_alerted_online']})"
              + (f"  [{m['late_runs']} run(s) with ops late > 1/4 dump interval]" if m["late_runs"] else ""))  # fmt: skip


def plan(args: argparse.Namespace) -> list[tuple[str, float, str, int]]:
    if args.quick:
        return QUICK
    versions = args.versions.split(",")
    classes = args.classes.split(",")
    listed = [int(x) for x in args.seeds.split(",") if x]
    seeds = listed if "," in args.seeds else list(range(1, listed[0] + 1))
    cases = []
    for version in versions:
        intervals = args.sampled_ms if version in SAMPLED_VERSIONS else args.ring_ms
        for dump_ms in (float(x) for x in intervals.split(",")):
            for cls in classes:
                cases += [(version, dump_ms, cls, seed) for seed in seeds]
    # the settings operators use first (1 s, then 2 s), so that an interrupted sweep has measured them
    first = {1000.0: 0, 2000.0: 1}
    return sorted(cases, key=lambda c: (first.get(c[1], 2), c[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--quick", action="store_true", help=f"{len(QUICK)} cases (a few minutes at most)")
    mode.add_argument("--full", action="store_true", help="every version x interval x class x seed")
    ap.add_argument("--versions", default=",".join(PLUGIN_VERSIONS))
    ap.add_argument("--ring-ms", default="100,1000,2000", help="dump intervals of the ring plugin (2.30)")
    ap.add_argument(
        "--sampled-ms", default="100,1000,2000,5000", help="dump intervals of the sampled plugins"
    )
    ap.add_argument(
        "--classes", default=",".join(CLASSES), help="comma-separated subset of: " + ", ".join(CLASSES)
    )
    ap.add_argument("--seeds", default="2", help="N (seeds 1..N) or a comma-separated list, per cell; a seed sets "
                    "the step length too (1: 50 ms, 2: 120 ms, 3: 400 ms, 4: 2 s, then again)")  # fmt: skip
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "diagnosis_plugin.json")
    args = ap.parse_args()
    cases = plan(args)
    started = time.perf_counter()
    results: list[CaseResult] = []
    with tempfile.TemporaryDirectory(prefix="ranksight-plugin-") as work:
        for i, (version, dump_ms, cls, seed) in enumerate(cases, 1):
            c = run_case(version, dump_ms, cls, seed, Path(work))
            results.append(c)
            print(f"[{i}/{len(cases)}] {version} {dump_ms:g} ms {cls} seed {seed} (step {c.step_ms:g} ms): "
                  f"{c.records} records, {c.bad_lines} bad lines, {c.wall_s:.0f} s at x{c.speedup:.1f} (ops late p99 "
                  f"{c.late_p99_ms:.0f} ms); findings "
                  + (", ".join(f"{f['process'] or f['hostname']} {f['kind']} {f['slowdown']}x "
                               f"{f.get('pattern', 'duty ' + str(f['duty_cycle']))}" for f in c.findings) or "none")
                  + f"; faults named {c.found}/{c.truths}", flush=True)  # fmt: skip
            write_figures(results, args, len(cases))  # what is done so far survives an interrupted sweep
    write_figures(results, args, len(cases), echo=True)
    print(f"{len(results)} runs in {time.perf_counter() - started:.0f} s; figures written to {args.out}")


def write_figures(
    results: list[CaseResult], args: argparse.Namespace, planned: int, echo: bool = False
) -> None:
    """The figures of the runs so far, per version x interval x class, to ``args.out`` (and stdout with ``echo``)."""
    groups: dict[str, dict[str, list[CaseResult]]] = defaultdict(lambda: defaultdict(list))
    for c in results:
        groups[f"{c.version} at {c.dump_ms:g} ms"][c.cls].append(c)
    report: dict[str, Any] = {}
    for name in sorted(groups, key=lambda g: (g.split()[0], float(g.split()[2]))):
        report[name] = {cls: summarize(cs) for cls, cs in groups[name].items()}
        report[name]["overall"] = summarize([c for cs in groups[name].values() for c in cs])
        if echo:
            print_group(name, report[name])
    tta = {}
    for capture, versions in (("ring", ["2.30.7"]), ("sampled", sorted(SAMPLED_VERSIONS))):
        at_1s = [s for c in results if c.version in versions and c.dump_ms == 1000 for s in c.tta_s]
        tta[capture] = _pct(at_1s, 0.9) if at_1s else None
        if echo:
            print(f"time-to-alert p90 at 1 s dumps, {capture}: {_fmt(tta[capture], '.1f')} s (target "
                  f"<= {TTA_TARGET_S[capture]:g} s; live engine fed in dump-time order)")  # fmt: skip
    overall = summarize(results)
    if echo:
        print_group("all runs", {"overall": overall})
    mode = "quick" if args.quick else "full"
    flat: dict[str, Any] = {"runs": overall["runs"], "complete": len(results) == planned}
    for key in ("precision", "recall", "pattern_accuracy", "slowdown_error_max", "false_alarms", "tta_p90_s"):
        flat[f"overall.{key}"] = overall[key]
    for capture, value in tta.items():
        flat[f"{capture} 1 s dumps.tta_p90_s"] = value
    targets = {"overall.precision": {"min": TARGETS["precision"]}, "overall.recall": {"min": TARGETS["recall"]},
               "overall.pattern_accuracy": {"min": TARGETS["pattern_accuracy"]}, "overall.false_alarms": {"max": 0},
               "overall.slowdown_error_max": {"max": TARGETS["slowdown_error"]},
               **{f"{c} 1 s dumps.tta_p90_s": {"max": s} for c, s in TTA_TARGET_S.items()}}  # fmt: skip
    written = write_result(args.out.stem, flat, targets, f"python benchmarks/diagnosis_plugin.py --{mode}")
    result = json.loads(written.read_text())
    written.write_text(json.dumps(result | {
        "time_to_alert": "live engine fed the records in dump-time order (agent and bus delays not included)",
        "groups": report, "cases": [dataclasses.asdict(c) for c in results],
    }, indent=1, default=str) + "\n")  # fmt: skip


if __name__ == "__main__":
    main()
