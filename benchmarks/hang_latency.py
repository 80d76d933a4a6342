"""Hang start -> ``flight_recorder_hang`` alert naming the rank, through the real path: a real PyTorch job (gloo, CPU,
three processes, ``ranksight.client`` heartbeats), a real agent (the ``app`` collector and its dump connections), a
real nats-server and a real aggregator. The faulty rank writes the time its hang starts; the alert is timed when it
arrives on the alert subject. The hang threshold is the heartbeat timeout (``--timeout``, the client's
``rank_heartbeat_overdue``), included in the figure; what follows it (the alert, the agents' dumps, the match) is
reported apart as ``after_threshold_s``. Target: the whole within 30 s.

Writes ``benchmarks/results/hang_latency.json``.

    .venv/bin/python benchmarks/hang_latency.py [--rounds 1] [--timeout 10] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import nats

from ranksight.agent.runtime import AgentRuntime
from ranksight.aggregator.runtime import Aggregator
from ranksight.core.natsserver import NatsServer
from ranksight.schemas.subjects import Subjects
from ranksight.settings import load_settings

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from benchmarks.results import write_result  # noqa: E402
from tests.fr_job import FAULTY, start_ranks  # noqa: E402  (the job the tests run)

SCENARIOS = ("stopped", "python_stuck", "mismatch", "killed", "subgroup")


async def started(component: Aggregator | AgentRuntime, stop: asyncio.Event) -> asyncio.Task[None]:
    task = asyncio.create_task(component.run(stop))
    ready = asyncio.create_task(component.ready.wait())
    await asyncio.wait([task, ready], return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()
    return task


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def one_round(root: Path, scenario: str, timeout_s: float) -> dict[str, object]:
    nats_server = NatsServer(root / "nats").start()
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    procs = []
    try:
        settings = load_settings(None, cluster="bench", state_dir=root, nats={"url": nats_server.url},
                                 aggregator={"http": {"enabled": False}})  # fmt: skip
        app = settings.agent.collectors.app
        app.socket_path = root / "app.sock"
        app.heartbeat_timeout_s, app.heartbeat_initial_timeout_s = timeout_s, 300.0
        agg = Aggregator(settings)
        tasks.append(await started(agg, stop))
        tasks.append(await started(AgentRuntime(settings, only=["app"]), stop))
        nc = await nats.connect(nats_server.url)
        alerts: asyncio.Queue[tuple[float, dict[str, object]]] = asyncio.Queue()

        async def on_alert(msg: nats.aio.msg.Msg) -> None:
            await alerts.put((time.time(), json.loads(msg.data)))

        await nc.subscribe(Subjects(settings.subject_prefix).alerts_filter("bench"), cb=on_alert)
        mark = root / "hang-start"
        argv = ["--scenario", scenario, "--port", str(free_port()), "--socket", str(app.socket_path), "--job", "B1",
                "--mark", str(mark)]  # fmt: skip
        procs = start_ranks(argv, 3, "B1")
        fired: dict[str, float] = {}
        deadline = time.monotonic() + 300
        while "flight_recorder_hang" not in fired:
            at, alert = await asyncio.wait_for(alerts.get(), timeout=max(1.0, deadline - time.monotonic()))
            if alert["state"] == "firing" and alert["rule"] in (
                "rank_heartbeat_overdue",
                "flight_recorder_hang",
            ):
                if alert["rule"] == "rank_heartbeat_overdue" or alert.get("rank") == FAULTY[scenario]:
                    fired.setdefault(str(alert["rule"]), at)
                    found = alert
        start = int(mark.read_text()) / 1e9
        await nc.close()
        return {
            "scenario": scenario,
            "latency_s": round(fired["flight_recorder_hang"] - start, 3),
            "threshold_s": timeout_s,
            "after_threshold_s": round(fired["flight_recorder_hang"] - start - timeout_s, 3),
            "heartbeat_alert_s": round(fired["rank_heartbeat_overdue"] - start, 3),
            "named": {k: found.get(k) for k in ("rank", "node")} | {
                k: (found.get("evidence") or {}).get(k) for k in ("kind", "process_group", "seq", "where")},  # type: ignore[union-attr]
        }  # fmt: skip
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=10)
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        nats_server.stop()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="rounds per failure shape (default 1)")
    parser.add_argument(
        "--timeout", type=float, default=10.0, help="heartbeat timeout: the hang threshold (s)"
    )
    parser.add_argument("--quick", action="store_true", help="one round of one shape (python_stuck), for CI")
    args = parser.parse_args()
    scenarios = ("python_stuck",) if args.quick else SCENARIOS
    rounds = []
    for scenario in scenarios:
        for _ in range(1 if args.quick else args.rounds):
            with tempfile.TemporaryDirectory(prefix="rs-hl-") as d:  # short: Unix socket paths are limited
                rounds.append(await one_round(Path(d), scenario, args.timeout))
            print(json.dumps(rounds[-1]), flush=True)
    latencies = [float(r["latency_s"]) for r in rounds]  # type: ignore[arg-type]
    after = [float(r["after_threshold_s"]) for r in rounds]  # type: ignore[arg-type]
    figures = {
        "threshold_s": args.timeout,
        "latency_p50_s": round(statistics.median(latencies), 3),
        "latency_max_s": round(max(latencies), 3),
        "after_threshold_p50_s": round(statistics.median(after), 3),
        "after_threshold_max_s": round(max(after), 3),
        "rounds": rounds,
    }
    path = write_result("hang_latency", figures, {"latency_max_s": {"max": 30.0}},
                        "python benchmarks/hang_latency.py" + (" --quick" if args.quick else ""))  # fmt: skip
    print(f"hang start -> flight_recorder_hang: p50 {figures['latency_p50_s']} s, max {figures['latency_max_s']} s "
          f"(threshold {args.timeout:g} s included); wrote {path.relative_to(REPO)}")  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
