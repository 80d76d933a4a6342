"""Dead process -> ``rank_missing`` alert latency, through the real path: a running job's RAS endpoints (the fake
server, NCCL 2.29: text and JSON status, MONITOR), one real agent per node (the ``ras`` collector), a real nats-server
and a real aggregator. Each injection makes one more process stop answering (the status lists it, and every endpoint
sends a ``PEER_DEAD`` MONITOR event, as NCCL does) and times the ``rank_missing`` alert naming it on the alert subject.

Two rounds in the same run: with MONITOR (the ``PEER_DEAD`` fast path) and the baseline without it (status polls
only, what the alert took before). Prints p50 / max per round and the ratio. Targets: p50 <= 3 s, max <= 10 s.

    .venv/bin/python benchmarks/ras_alert_latency.py [--nodes 4] [--injections 10] [--interval 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

import nats

from ranksight.agent.runtime import AgentRuntime
from ranksight.aggregator.runtime import Aggregator
from ranksight.core.natsserver import NatsServer
from ranksight.schemas.records.ras import RasEvent
from ranksight.schemas.subjects import Subjects
from ranksight.settings import Settings, load_settings
from ranksight.simulate.cluster import LiveJob, ras_status_json, ras_status_text
from ranksight.simulate.inspector import JobSpec
from ranksight.simulate.ras_server import PROFILES, FakeRasServer

GPUS = 8


def agent_settings(settings: Settings, node: str, server: FakeRasServer, interval_s: float, monitor: bool,
                   proc_root: Path) -> Settings:  # fmt: skip
    s = settings.model_copy(deep=True)
    s.agent.node = node
    s.state_dir = settings.state_dir / "agents" / node
    s.agent.collectors.ras = s.agent.collectors.ras.model_copy(update={
        "addr": server.address, "interval_s": interval_s, "monitor": monitor, "proc_root": proc_root})  # fmt: skip
    return s


async def started(component: Aggregator | AgentRuntime, stop: asyncio.Event) -> asyncio.Task[None]:
    task = asyncio.create_task(component.run(stop))
    ready = asyncio.create_task(component.ready.wait())
    await asyncio.wait([task, ready], return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()
    return task


async def one_round(root: Path, args: argparse.Namespace, monitor: bool) -> list[float]:
    """Latencies (s) of ``args.injections`` dead processes, one after another."""
    nats_server = NatsServer(root / "nats").start()
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    servers: list[FakeRasServer] = []
    try:
        settings = load_settings(None, cluster="bench", state_dir=root, nats={"url": nats_server.url},
                                 aggregator={"http": {"enabled": False}})  # fmt: skip
        spec = JobSpec(nodes=args.nodes, gpus_per_node=GPUS, steps=10, hostname_prefix="bench-node")
        job = LiveJob(spec, root / "inspector")
        missing: set[tuple[int, int]] = set()
        servers = [await FakeRasServer(PROFILES["2.29"], ras_status_text(job, missing),
                                       ras_status_json(job, missing)).start() for _ in range(args.nodes)]  # fmt: skip
        tasks.append(await started(Aggregator(settings), stop))
        for i, server in enumerate(servers):
            s = agent_settings(settings, spec.hostname(i), server, args.interval, monitor, root / "proc")
            tasks.append(await started(AgentRuntime(s, only=["ras"]), stop))
        nc = await nats.connect(nats_server.url)
        alerts: asyncio.Queue[tuple[float, dict[str, object]]] = asyncio.Queue()

        async def on_alert(msg: nats.aio.msg.Msg) -> None:
            await alerts.put((time.monotonic(), json.loads(msg.data)))

        await nc.subscribe(Subjects(settings.subject_prefix).alerts_filter("bench"), cb=on_alert)
        await asyncio.sleep(2 * args.interval)  # every agent has polled: the job is known, MONITORs are open
        latencies = []
        for n in range(args.injections):
            node, gpu = n % args.nodes, (n // args.nodes) % GPUS
            pid = spec.pid(node, gpu)
            missing.add((node, gpu))
            text, body = ras_status_text(job, missing), ras_status_json(job, missing)
            dead = RasEvent(time=time.strftime("%Y-%m-%d %H:%M:%S"), event_group="LIFECYCLE", event="PEER_DEAD",
                            host=spec.hostname(node), pid=pid, gpus=[gpu])  # fmt: skip
            injected = time.monotonic()
            for server in servers:
                server.status_text, server.status_json = text, body
                await server.push_event(dead)
            while True:
                at, alert = await asyncio.wait_for(alerts.get(), timeout=60)
                evidence = alert.get("evidence") or {}
                if (
                    alert["rule"] == "rank_missing"
                    and alert["state"] == "firing"
                    and evidence.get("pid") == pid
                ):
                    latencies.append(at - injected)
                    break
            await asyncio.sleep(1.0)
        await nc.close()
        return latencies
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        for server in servers:
            await server.stop()
        nats_server.stop()


def summary(name: str, samples: list[float]) -> str:
    return (f"{name:<34}{statistics.median(samples):>8.2f}{max(samples):>8.2f}   "
            + " ".join(f"{s:.1f}" for s in samples))  # fmt: skip


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--injections", type=int, default=10)
    parser.add_argument(
        "--interval", type=float, default=10.0, help="the agents' status poll period (default 10)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        for name in ("monitor", "polls"):
            (Path(d) / name / "proc").mkdir(
                parents=True
            )  # an empty /proc: no scheduler id, ids from the comms
        fast = await one_round(Path(d) / "monitor", args, monitor=True)
        base = await one_round(Path(d) / "polls", args, monitor=False)
    print(
        f"{args.nodes} nodes x {GPUS} GPUs, status poll every {args.interval:g} s, {args.injections} dead processes"
    )
    print(f"{'path':<34}{'p50 s':>8}{'max s':>8}   each")
    print(summary("PEER_DEAD fast path (MONITOR)", fast))
    print(summary("status polls only (baseline)", base))
    print(f"fast / baseline: p50 {statistics.median(fast) / statistics.median(base):.2f}x, "
          f"max {max(fast) / max(base):.2f}x; target p50 <= 3 s, max <= 10 s: "
          f"{'met' if statistics.median(fast) <= 3 and max(fast) <= 10 else 'NOT met'}")  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
