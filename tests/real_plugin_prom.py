"""The real Inspector plugin's Prometheus textfiles (``fixtures/inspector/real-plugin-<version>-prom``): a small
simulated job run through the unmodified plugin (``ranksight.simulate.plugin_job``) with ``NCCL_INSPECTOR_PROM_DUMP=1``.

The plugin truncates its textfile at every dump and the last dump of a finished job writes nothing, so the file is
copied while the job runs: each complete version seen (ending in a newline) is kept, and the second dump's is the
fixture. Needs root (a UTS namespace per node) and libfaketime, as the plugin's other fixtures do.

``python tests/real_plugin_prom.py 2.29.3 2.30.7`` rewrites those fixtures.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from ranksight.simulate.inspector import JobSpec
from ranksight.simulate.inspector_plugin import SAMPLED_VERSIONS
from ranksight.simulate.plugin_job import run_job_through_plugin

ROOT = Path(__file__).resolve().parents[1]
DUMP_MS = 30_000.0  # the plugin's minimum interval in this mode
SPEEDUP = 20.0


def spec(version: str) -> JobSpec:
    return JobSpec(nodes=2, gpus_per_node=1, steps=200, compute_ms=200.0, seed=3,
                   capture="sampled" if version in SAMPLED_VERSIONS else "ring", dump_interval_ms=DUMP_MS,
                   noise=0.02)  # fmt: skip


def versions_written(version: str) -> dict[str, list[bytes]]:
    """Every complete version of each textfile the plugin wrote, in order, by file name."""
    os.environ["NCCL_INSPECTOR_PROM_DUMP"] = "1"
    seen: dict[str, list[bytes]] = {}
    done = threading.Event()
    with tempfile.TemporaryDirectory() as tmp:
        dumps = Path(tmp) / "dumps"

        def watch() -> None:
            while not done.is_set():
                for path in dumps.glob("*.prom") if dumps.is_dir() else []:
                    data = path.read_bytes()
                    kept = seen.setdefault(path.name, [])
                    if data.endswith(b"\n") and (not kept or kept[-1] != data):
                        kept.append(data)
                time.sleep(0.01)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            run_job_through_plugin(spec(version), version, dumps, speedup=SPEEDUP)
        finally:
            done.set()
            watcher.join()
    return seen


def main(versions: list[str]) -> None:
    for version in versions:
        target = ROOT / f"fixtures/inspector/real-plugin-{version}-prom"
        target.mkdir(parents=True, exist_ok=True)
        for name, datas in versions_written(version).items():
            (target / name).write_bytes(datas[1])


if __name__ == "__main__":
    main(sys.argv[1:])
