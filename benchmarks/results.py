"""Where a benchmark's figures go: ``benchmarks/results/<name>.json``, one file per benchmark, rendered into
``docs/benchmarks.md`` by the docs generator (``python -m ranksight.docgen``). Each file holds the figures and
their targets, the commit and date of the run, and the machine: CPU model, cores, and a CPU calibration score measured
in the same run, so that figures taken on different machines can be compared (divide by the score's ratio), and the
load average when it ran.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
CALIBRATION_UNIT = "fixed pure-Python and hashing workloads per second, one core, best of 5"


def _workload() -> None:
    """A fixed mix of what the benchmarks spend CPU on: interpreted loops, dict and string work, hashing."""
    counts: dict[int, int] = {}
    for i in range(20_000):
        counts[i % 97] = counts.get(i % 97, 0) + len(str(i))
    hashlib.sha256(b"x" * 262_144).digest()


def calibration() -> float:
    """Workloads per second on one core: best of five runs of 0.1 s each (higher is a faster CPU)."""
    best = 0.0
    for _ in range(5):
        start, done = time.perf_counter(), 0
        while (elapsed := time.perf_counter() - start) < 0.1:
            _workload()
            done += 1
        best = max(best, done / elapsed)
    return round(best, 1)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def commit() -> str:
    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=RESULTS.parent, capture_output=True, text=True
    )
    return out.stdout.strip() or "unknown"


def write_result(name: str, figures: dict[str, Any], targets: dict[str, Any], command: str) -> Path:
    """Write ``benchmarks/results/<name>.json`` (calibrated now, on this machine) and return its path.

    ``figures``: what was measured, by name (units in the names: ``rss_mib``, ``wall_s``); ``targets``: the bound
    each figure is held to, by the same names (``{"rss_mib": {"max": 50}}``); ``command``: how to rerun it.
    """
    result = {
        "name": name,
        "command": command,
        "figures": figures,
        "targets": targets,
        "commit": commit(),
        "date": datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat(),
        "machine": {
            "cpu_model": cpu_model(),
            "cores": os.cpu_count() or 0,
            "calibration": calibration(),
            "calibration_unit": CALIBRATION_UNIT,
            "load_average_1m": round(os.getloadavg()[0], 2),  # other work beside: wall times stretch with it
        },
    }
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path
