"""Command-line latency: the wall time of ``ranksight --version`` and of query commands against a running aggregator.

Starts a real nats-server and a real aggregator (``ranksight aggregator``, a child process, its HTTP API on a free
port), waits until it answers, then runs each command ``--runs`` times as a fresh process (``python -m ranksight.cli
...``, what the console script does) and reports the median and the slowest wall time, with the CPU time the command
used. Each query command runs twice: over NATS, and with setting ``api_url`` naming the HTTP API (``*_http``: no NATS
client to load). Targets: ``--version`` <= 0.3 s, a query command <= 0.5 s. Baseline, measured in the same run: a bare
``python -c pass`` (the interpreter's own start-up). Figures go to ``benchmarks/results/cli.json``.

    python benchmarks/cli.py [--runs 7] [--quick]
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.results import write_result
from ranksight.core.natsserver import NatsServer

QUERIES = {
    "status": ["-m", "ranksight.cli", "status", "--json"],
    "alerts": ["-m", "ranksight.cli", "alerts"],
    "sql": ["-m", "ranksight.cli", "sql", "SELECT 1 AS one"],
}
COMMANDS = {
    "baseline": ["-c", "pass"],
    "version": ["-m", "ranksight.cli", "--version"],
    **QUERIES,
    **{f"{name}_http": argv for name, argv in QUERIES.items()},
}
TARGETS = {"version": 0.3, **{name: 0.5 for name in COMMANDS if name not in ("baseline", "version")}}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system) of one run of ``python <argv>``; exits on failure."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True, timeout=60)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def wait_answering(env: dict[str, str], aggregator: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if aggregator.poll() is not None:
            raise SystemExit(f"the aggregator exited {aggregator.returncode}: {log.read_text()[-2000:]}")
        probe = subprocess.run(
            [sys.executable, *COMMANDS["status"]], env=env, capture_output=True, timeout=60
        )
        if probe.returncode == 0:
            return
        time.sleep(0.5)
    raise SystemExit(f"the aggregator did not answer within 120 s: {log.read_text()[-2000:]}")


def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="ranksight-cli-bench-") as tmp:
        root = Path(tmp)
        server = NatsServer(root / "nats").start()
        port = free_port()
        env = {**os.environ, "RANKSIGHT_NATS__URL": server.url, "RANKSIGHT_STATE_DIR": str(root / "state"),
               "RANKSIGHT_AGGREGATOR__HTTP__PORT": str(port), "RANKSIGHT_CLUSTER": "bench"}  # fmt: skip
        http_env = {**env, "RANKSIGHT_API_URL": f"http://127.0.0.1:{port}"}
        log = root / "aggregator.log"
        with open(log, "wb") as out:
            aggregator = subprocess.Popen(
                [sys.executable, "-m", "ranksight.cli", "aggregator"], env=env, stdout=out, stderr=out
            )
        try:
            for each in (env, http_env):  # the NATS service, then the HTTP API
                wait_answering(each, aggregator, log)
            figures: dict[str, float] = {}
            for name, argv in COMMANDS.items():
                runs = [timed(argv, http_env if name.endswith("_http") else env) for _ in range(args.runs)]
                walls, cpus = [w for w, _ in runs], [c for _, c in runs]
                figures[f"{name}_wall_s"] = round(statistics.median(walls), 3)
                figures[f"{name}_wall_max_s"] = round(max(walls), 3)
                figures[f"{name}_cpu_s"] = round(statistics.median(cpus), 3)
                target = TARGETS.get(name)
                verdict = "" if target is None else f"  target <= {target} s: " + (
                    "met" if statistics.median(walls) <= target else "NOT met")  # fmt: skip
                print(f"{name:9} wall median {statistics.median(walls):.3f} s (max {max(walls):.3f}), "
                      f"CPU {statistics.median(cpus):.3f} s{verdict}", flush=True)  # fmt: skip
        finally:
            aggregator.terminate()
            try:
                aggregator.wait(30)
            except subprocess.TimeoutExpired:
                aggregator.kill()
                aggregator.wait()
            server.stop()
    figures["runs"] = args.runs
    path = write_result(
        "cli",
        figures,
        {f"{name}_wall_s": {"max": target} for name, target in TARGETS.items()},
        f"python benchmarks/cli.py --runs {args.runs}",
    )
    print(f"written to {path}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=7, help="runs of each command (the median is reported)")
    parser.add_argument("--quick", action="store_true", help="3 runs of each command (CI)")
    options = parser.parse_args()
    if options.quick:
        options.runs = 3
    main(options)
