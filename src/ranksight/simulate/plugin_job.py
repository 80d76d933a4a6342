"""A simulated job emitted through the real NCCL Inspector plugin: one OS process per rank, each in its own UTS
namespace with its node's host name, the plugin's real dump thread at the job's dump interval (unaligned across
processes, as in a real job), the plugin's own capture model (ring in 2.30 with Send/Recv and its size filter; one slot
per communicator in 2.28/2.29). The operations come from :func:`ranksight.simulate.inspector.job_ops`, the same job
the pure-Python simulator writes directly; the driver of the plugin is :mod:`ranksight.simulate.inspector_plugin`.

The plugin's dump thread runs on the wall clock. ``speedup`` > 1 runs every process under Debian's libfaketime
(``FAKETIME="@<job start> x<speedup>"``, preloaded): the plugin's ``gettimeofday`` and its dump thread's sleep, and the
driver's own clock and sleeps, all run that much faster, so a 30 s job takes 30 / speedup s, and every process's clock
starts at the job's start whenever the process itself starts. Each process replays its own operations on its own
clock, so processes need no synchronisation with each other.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ranksight.simulate.inspector import JobSpec, RankOp, comms_of, job_ops
from ranksight.simulate.inspector_plugin import DEFAULT_PLUGIN_DIR, PluginError, plugin_path

FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1")
# real seconds a rank process may take to start (Python, the plugin, its communicators) on a busy 2-core machine
_START_S_PER_PROCESS = 0.15


@dataclass
class PluginRun:
    """What a job through the plugin produced: its files and which OS process each simulated rank was."""

    directory: Path
    files: list[Path]
    processes: dict[tuple[int, int], tuple[str, int]]  # (node, gpu) -> (hostname, pid)
    wall_s: float
    start_us: int  # the job's start on the processes' clocks (its first step begins here)
    speedup: float
    # how late the processes handed the plugin their ops (µs of job time): the median process's median, the worst
    # process's 99th percentile and maximum; compare with the dump interval
    late_p50_us: int
    late_p99_us: int
    late_max_us: int


def default_speedup(
    spec: JobSpec, ops: dict[tuple[int, int], list[RankOp]] | None = None, ops_per_s: float = 12_000.0
) -> float:
    """A clock speed-up for ``spec``: the plugin's dump ticks at least 20 ms of real time apart, all rank processes
    together handing the plugin at most ``ops_per_s`` ops per real second (a process starved of CPU hands its ops
    late, and a few ms of real time are that many times more of job time), at most x10."""
    ops = job_ops(spec) if ops is None else ops
    count = sum(len(mine) for mine in ops.values())
    span_s = max((op.end_us for mine in ops.values() for op in mine), default=spec.start_us) - spec.start_us
    rate = count / max(1e-6, span_s / 1e6)  # ops per second of job time, all ranks
    return max(1.0, min(10.0, spec.dump_interval_ms / 20.0, ops_per_s / max(rate, 1.0)))


def run_job_through_plugin(
    spec: JobSpec,
    version: str,
    directory: Path,
    *,
    speedup: float | None = None,
    plugin_dir: Path = DEFAULT_PLUGIN_DIR,
    timeout_s: float = 900.0,
) -> PluginRun:
    """Run ``spec`` through the real plugin ``version``, its dump files in ``directory`` (created).
    ``spec.dump_interval_ms`` is the plugin's dump interval; ``speedup`` > 1 runs every process under libfaketime
    (default: :func:`default_speedup`)."""
    path = plugin_path(version, plugin_dir)
    if not path.is_file():
        raise PluginError(f"no plugin at {path}")
    timeline = job_ops(spec)
    speedup = default_speedup(spec, timeline) if speedup is None else speedup
    if not speedup > 0:
        raise PluginError(f"a clock speed-up must be positive, not {speedup}")
    if speedup != 1.0 and not FAKETIME_LIB.is_file():
        raise PluginError(f"a clock speed-up needs libfaketime ({FAKETIME_LIB}: Debian package libfaketime)")
    directory.mkdir(parents=True, exist_ok=True)
    plans = directory.parent / f".{directory.name}.plans"
    plans.mkdir(exist_ok=True)
    interval_s = spec.dump_interval_ms / 1000
    lead_real_s = 1.0 + _START_S_PER_PROCESS * len(timeline)  # every process is ready before the first op
    env = dict(os.environ)
    env.update({
        "NCCL_INSPECTOR_ENABLE": "1",
        "NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS": str(round(spec.dump_interval_ms * 1000)),
        "NCCL_INSPECTOR_DUMP_DIR": str(directory),
        "LD_LIBRARY_PATH": str(path.parent / "stubs"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]),
                                                    env.get("PYTHONPATH")])),
    })  # fmt: skip
    if speedup != 1.0:
        # each process's clock starts at the job's start; the job's first op comes after every process is up
        start_us = spec.start_us + round(lead_real_s * speedup * 1e6)
        env["LD_PRELOAD"] = str(FAKETIME_LIB)
        env["FAKETIME"] = (
            f"@{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(spec.start_us // 1_000_000))} x{speedup:g}"
        )
        env["TZ"] = "UTC"
    else:
        start_us = round((time.time() + lead_real_s) * 1e6)
    shift_us = start_us - spec.start_us
    end_us = max((op.end_us for ops in timeline.values() for op in ops), default=spec.start_us)
    drain_s = 2 * interval_s + 0.2  # the plugin does not drain at finalize
    job_real_s = ((end_us - spec.start_us) / 1e6 + drain_s) / speedup + lead_real_s
    hung = {
        (f.node, f.gpu) for f in spec.faults if f.kind == "hang"
    }  # the process stops, its dump thread with it
    procs: dict[tuple[int, int], subprocess.Popen[bytes]] = {}
    started = time.perf_counter()
    try:
        for member, ops in timeline.items():
            node, gpu = member
            plan = plans / f"n{node}g{gpu}.json"
            plan.write_text(json.dumps({
                "hostname": spec.hostname(node), "plugin": str(path), "device": gpu,
                "drain_s": 0.0 if member in hung else drain_s,
                "comms": _comm_inits(spec, member), "ops": [_plan_op(op, shift_us) for op in ops],
            }))  # fmt: skip
            procs[member] = subprocess.Popen(
                [sys.executable, "-X", "faulthandler", "-m", "ranksight.simulate.inspector_plugin", str(plan)],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )  # fmt: skip
        deadline = time.monotonic() + min(timeout_s, 3 * job_real_s + 30)
        lateness = []
        for member, proc in procs.items():
            try:
                out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired as exc:
                raise PluginError(f"rank process {member} did not finish in time") from exc
            if proc.returncode != 0:
                raise PluginError(f"rank process {member} failed ({proc.returncode}): {err.decode()[-2000:]}")
            lateness.append(json.loads(out.decode().splitlines()[-1]))
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        shutil.rmtree(plans, ignore_errors=True)
    processes = {member: (spec.hostname(member[0]), proc.pid) for member, proc in procs.items()}
    medians = sorted(x["late_p50_us"] for x in lateness)
    return PluginRun(
        directory, sorted(directory.glob("*.log")), processes, time.perf_counter() - started, start_us, speedup,
        medians[len(medians) // 2] if medians else 0, max((x["late_p99_us"] for x in lateness), default=0),
        max((x["late_max_us"] for x in lateness), default=0),
    )  # fmt: skip


def _comm_inits(spec: JobSpec, member: tuple[int, int]) -> list[dict[str, Any]]:
    """The communicators this rank's process creates: what NCCL passes the plugin's ``init``."""
    return [
        {"hash": comm.comm_id, "name": comm.name if spec.named_comms else None, "nranks": len(comm.members),
         "nnodes": len({m[0] for m in comm.members}), "rank": comm.members.index(member)}
        for comm in comms_of(spec) if member in comm.members
    ]  # fmt: skip


def _plan_op(op: RankOp, shift_us: int) -> list[Any]:
    """The driver's op: [comm hash, rank, func, size, seqNumber, peer, exec µs, end µs on the process's clock]."""
    return [op.comm_hash, op.rank, op.func, op.size, op.sn, op.peer, op.exec_us, op.end_us + shift_us]


def main(argv: list[str] | None = None) -> int:
    """``python -m ranksight.simulate.plugin_job``: one job of :mod:`~ranksight.simulate.plugin_scenarios` through
    the real plugin, its dump files in ``--out``."""
    import argparse
    import dataclasses

    from ranksight.simulate.inspector_plugin import PLUGIN_VERSIONS, SAMPLED_VERSIONS
    from ranksight.simulate.plugin_scenarios import CLASSES, Capture

    ap = argparse.ArgumentParser(description="run a simulated job through the real NCCL Inspector plugin")
    ap.add_argument("--version", choices=PLUGIN_VERSIONS, required=True)
    ap.add_argument("--class", dest="cls", choices=list(CLASSES), required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dump-ms", type=float, default=1000.0)
    ap.add_argument("--gpus", type=int, help="GPUs per node")
    ap.add_argument("--steps", type=int, help="steps (default: the class's)")
    ap.add_argument(
        "--speedup",
        type=float,
        help="clock speed-up under libfaketime (default: by dump interval and ops rate)",
    )
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    capture: Capture = "sampled" if args.version in SAMPLED_VERSIONS else "ring"
    spec = CLASSES[args.cls](capture, args.seed, args.dump_ms)
    changes = {k: v for k, v in (("gpus_per_node", args.gpus), ("steps", args.steps)) if v}
    spec = dataclasses.replace(spec, **changes)  # type: ignore[arg-type]
    run = run_job_through_plugin(spec, args.version, args.out, speedup=args.speedup)
    print(json.dumps({"files": [p.name for p in run.files], "wall_s": round(run.wall_s, 1), "speedup": run.speedup,
                      "late_us": {"p50": run.late_p50_us, "p99": run.late_p99_us, "max": run.late_max_us},
                      "processes": {f"{n}/{g}": f"{h}-pid{p}" for (n, g), (h, p) in run.processes.items()},
                      "faults": [dataclasses.asdict(f) for f in spec.faults], "steps": spec.steps,
                      "compute_ms": spec.compute_ms}))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
