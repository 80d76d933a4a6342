"""``ranksight demo``: a simulated cluster watched by real agents and a real aggregator (design §1), so a newcomer sees
findings and alerts within a minute.

Everything but the job is real: the embedded ``nats-server``, the aggregator (DuckDB, alerts, HTTP page), and one
agent per simulated node with its real collectors. The sources the agents read are simulated and faithful to what they
read on a real node (:mod:`ranksight.simulate.cluster`): Inspector dump files written as the job runs, a RAS endpoint per
node speaking the real protocol (:class:`~ranksight.simulate.ras_server.FakeRasServer`, NCCL 2.29 profile, JSON
status and MONITOR), and a sysfs tree per node with amdgpu cards and an RDMA port.

Injected faults: GPU 2 of node 1 computes 1.6x slower (``straggler``); node 2's RDMA port accumulates symbol errors
(``nic_errors_rising``); after ``--fault-after`` seconds, one rank on the last node stops answering (``rank_missing``, a
``PEER_DEAD`` MONITOR event). When the simulated job finishes, it restarts as a new job.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from ranksight.agent.runtime import AgentRuntime
from ranksight.aggregator.runtime import Aggregator
from ranksight.commands.up import command_name, first, http_line, with_embedded_nats
from ranksight.core.aio import cancel_all
from ranksight.core.cliutil import (
    EXIT_USAGE,
    add_config_flags,
    port_busy,
    port_number,
    settings_from_args,
)
from ranksight.schemas.records.ras import RasEvent
from ranksight.settings import Settings
from ranksight.simulate.cluster import (
    COUNTER_PERIOD_S,
    US,
    LiveJob,
    NodeSysfs,
    ras_status_json,
    ras_status_text,
)
from ranksight.simulate.inspector import Fault, JobSpec
from ranksight.simulate.ras_server import PROFILES, FakeRasServer

SLOW_GPU = (1, 2)  # node, GPU
NIC_ERRORS_NODE = 2
MISSING_GPU = 5  # on the last node
STEPS_PER_RUN = 600  # about four minutes a run
HOST_PREFIX = "demo-node"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "demo", help="a simulated cluster with injected faults, watched by real agents and an aggregator"
    )
    add_config_flags(p)
    p.add_argument(
        "--nodes", type=int, default=4, help="simulated nodes of 8 GPUs (even, 4 to 64; default 4)"
    )
    p.add_argument(
        "--state-dir",
        type=Path,
        help="where everything is kept (default: a temporary directory, removed at exit)",
    )
    p.add_argument("--nats-port", type=port_number, default=0, help="default: a free port")
    p.add_argument("--fault-after", type=float, default=40.0, metavar="S",
                   help="seconds until a rank stops answering (default 40)")  # fmt: skip
    p.add_argument("--duration", type=float, metavar="S", help="stop after S seconds (default: on Ctrl-C)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.nodes < 4 or args.nodes > 64 or args.nodes % 2:
        print("ranksight demo: --nodes must be even, from 4 to 64", file=sys.stderr)
        return EXIT_USAGE
    if args.state_dir is not None:
        return _run(args, args.state_dir)
    state_dir = Path(tempfile.mkdtemp(prefix="ranksight-demo-"))
    try:
        return _run(args, state_dir)
    finally:  # a state dir of our own making goes with the demo (--state-dir keeps it)
        shutil.rmtree(state_dir, ignore_errors=True)


def _run(args: argparse.Namespace, state_dir: Path) -> int:
    settings = settings_from_args(args, Settings, state_dir=state_dir, cluster="demo")
    if settings.aggregator.http.enabled and port_busy(settings.aggregator.http.port):
        print(
            f"ranksight demo: HTTP port {settings.aggregator.http.port} is in use; using a free one",
            file=sys.stderr,
        )
        http = settings.aggregator.http.model_copy(update={"port": 0})
        settings = settings.model_copy(
            update={"aggregator": settings.aggregator.model_copy(update={"http": http})}
        )
    return with_embedded_nats("demo", settings, args.nats_port,
                              lambda s, _, stop: Demo(s, args.nodes, args.fault_after).serve(stop, args.duration))  # fmt: skip


def _job_spec(nodes: int, run: int) -> JobSpec:
    return JobSpec(
        nodes=nodes, steps=STEPS_PER_RUN, compute_ms=200.0, hostname_prefix=HOST_PREFIX, pid_base=40000 + 1000 * run,
        run_tag=f"run{run}", start_us=time.time_ns() // 1000 + US, seed=run,
        faults=[Fault("gpu", node=SLOW_GPU[0], gpu=SLOW_GPU[1], factor=1.6)],
    )  # fmt: skip


class Demo:
    def __init__(self, settings: Settings, nodes: int, fault_after_s: float) -> None:
        self.settings = settings
        self.nodes = nodes
        self.fault_after_s = fault_after_s
        self.root = settings.state_dir / "demo"
        self.ras = [_endpoint() for _ in range(nodes)]
        naming = _job_spec(nodes, 0)
        self.hosts = [naming.hostname(i) for i in range(nodes)]
        self.sysfs = [NodeSysfs(self.root / "sys" / self.hosts[i],
                                slow_gpu=SLOW_GPU[1] if i == SLOW_GPU[0] else None,
                                nic_errors_per_s=5.0 if i == NIC_ERRORS_NODE else 0.0) for i in range(nodes)]  # fmt: skip
        self.missing: set[tuple[int, int]] = set()

    def agent_settings(self, node: int, job: LiveJob) -> Settings:
        """A real agent's settings, pointed at this node's simulated sources."""
        c = self.settings.agent.collectors
        collectors = c.model_copy(update={
            # a simulated node's /proc holds no job process: the job id comes from the communicators
            "ras": c.ras.model_copy(update={"addr": self.ras[node].address, "interval_s": 5.0,
                                            "proc_root": self.root / "proc"}),
            "inspector": c.inspector.model_copy(update={"dump_dir": job.dump_dir(node)}),
            "gpu": c.gpu.model_copy(update={"sources": ["sysfs"], "sysfs_root": self.sysfs[node].root}),
            "nic": c.nic.model_copy(update={"sysfs_root": self.sysfs[node].root, "tool_counters": False}),
            "probe": c.probe.model_copy(update={"port": 0, "listen_host": "127.0.0.1", "advertise": ["127.0.0.1"]}),
            "gpu_probe": c.gpu_probe.model_copy(update={"enabled": False}),
            "app": c.app.model_copy(update={"enabled": False}),  # one socket per host; no client in the demo
            # simulated AMD GPUs log no Xids, and the host's own kernel log is not the simulated node's
            "xid": c.xid.model_copy(update={"enabled": False}),
        })  # fmt: skip
        host = self.hosts[node]
        agent = self.settings.agent.model_copy(update={"node": host, "collectors": collectors})
        # each agent keeps its own state (Inspector offsets), as on its own node
        return self.settings.model_copy(update={"agent": agent, "state_dir": self.root / "agents" / host})

    async def serve(self, stop: asyncio.Event, duration_s: float | None) -> None:
        for ras in self.ras:
            await ras.start()
        run = 1
        job = await asyncio.to_thread(LiveJob, _job_spec(self.nodes, run), self.root / "inspector")
        await asyncio.to_thread(self._advance, job)
        aggregator = Aggregator(self.settings)
        agg_task = asyncio.create_task(aggregator.run(stop))
        tasks = [agg_task]
        counters_stop = threading.Event()
        counters = threading.Thread(target=advance_counters, args=(self.sysfs, counters_stop), name="demo-nic-counters",
                                    daemon=True)  # fmt: skip
        counters.start()
        try:
            await first(aggregator.ready.wait(), agg_task)
            agents = [AgentRuntime(self.agent_settings(i, job)) for i in range(self.nodes)]
            tasks += [asyncio.create_task(a.run(stop)) for a in agents]
            for agent, task in zip(agents, tasks[1:], strict=True):
                await first(agent.ready.wait(), task)
            self._banner(aggregator)
            if duration_s is not None:
                tasks.append(asyncio.create_task(_stop_after(stop, duration_s)))
            run_started = time.monotonic()
            services = tasks[: self.nodes + 1]
            while not stop.is_set():
                for task in services:
                    if task.done():  # the aggregator or an agent failed: stop and report why
                        stop.set()
                        task.result()
                if job.done:  # the job finished: its endpoints close, and it restarts as a new job
                    await self._restart_endpoints()
                    run += 1
                    job = await asyncio.to_thread(
                        LiveJob, _job_spec(self.nodes, run), self.root / "inspector"
                    )
                    self.missing.clear()
                    run_started = time.monotonic()
                    print(
                        f"ranksight demo: the job finished and restarts as a new job (run {run})", flush=True
                    )
                elif not self.missing and time.monotonic() - run_started >= self.fault_after_s:
                    await self._lose_rank(job)
                await asyncio.to_thread(self._advance, job)  # file writes, off the event loop
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=1.0)
            await asyncio.gather(*services)
        finally:
            counters_stop.set()
            await cancel_all(tasks)
            for ras in self.ras:
                await ras.stop()
            await asyncio.to_thread(counters.join)

    async def _restart_endpoints(self) -> None:
        """The job's processes exit (their RAS endpoints close); the next job's processes listen on the same ports."""
        for ras in self.ras:
            await ras.stop()
        await asyncio.sleep(2.0)  # long enough for the agents to see the endpoints gone
        self.ras = [_endpoint(old.port) for old in self.ras]
        for ras in self.ras:
            await ras.start()

    def _advance(self, job: LiveJob) -> None:
        """Bring every source up to now: the job's dump lines, the RAS status, the sysfs trees."""
        job.release(time.time_ns() // 1000)
        self._set_status(job)
        now = time.time()
        for sysfs in self.sysfs:
            sysfs.write(now)

    def _set_status(self, job: LiveJob) -> None:
        status, text = ras_status_json(job, self.missing), ras_status_text(job, self.missing)
        for ras in self.ras:
            ras.status_json, ras.status_text = status, text

    async def _lose_rank(self, job: LiveJob) -> None:
        node, gpu = self.nodes - 1, MISSING_GPU
        self.missing.add((node, gpu))
        # as with NCCL, the status says so by the time PEER_DEAD is sent
        await asyncio.to_thread(self._set_status, job)
        event = RasEvent(time=time.strftime("%Y-%m-%d %H:%M:%S"), event_group="LIFECYCLE", event="PEER_DEAD",
                         host=job.spec.hostname(node), pid=job.spec.pid(node, gpu), gpus=[gpu])  # fmt: skip
        for ras in self.ras:
            await ras.push_event(event)
        print(f"ranksight demo: rank on {self.hosts[node]} GPU {gpu} stopped answering (expect rank_missing)",
              flush=True)  # fmt: skip

    def _banner(self, aggregator: Aggregator) -> None:
        url = self.settings.nats.url
        hosts = self.hosts
        me = command_name()
        print(
            f"ranksight demo: {self.nodes} simulated nodes x 8 GPUs ({hosts[0]}..{hosts[-1]}), "
            f"cluster demo\n"
            f"  state       {self.settings.state_dir}\n"
            f"  nats        {url}\n"
            f"  http        {http_line(aggregator)}\n"
            f"  faults      GPU {SLOW_GPU[1]} of {hosts[SLOW_GPU[0]]} is 1.6x slow (straggler, ~20 s); "
            f"{hosts[NIC_ERRORS_NODE]}'s RDMA port counts symbol errors (nic_errors_rising); a rank on "
            f"{hosts[-1]} stops answering after {self.fault_after_s:g} s (rank_missing)\n"
            f"  try         {me} alerts --follow --nats {url}\n"
            f"              {me} stragglers --nats {url}\n"
            f"              {me} jobs --nats {url}\n"
            f'  history     {me} sql --db {self.settings.db_path()} "SELECT ..." (once the demo has stopped; '
            f"with --state-dir, which keeps it)\n"
            f"Ctrl-C stops everything.",
            flush=True,
        )


def _endpoint(port: int = 0) -> FakeRasServer:
    """One process's RAS endpoint, NCCL 2.29 (text and JSON status, MONITOR)."""
    return FakeRasServer(PROFILES["2.29"], status_text=b"", port=port)


def advance_counters(trees: list[NodeSysfs], stop: threading.Event) -> None:
    """Keep the simulated NIC counters moving every ``COUNTER_PERIOD_S`` until ``stop``: on a thread of its own, apart
    from the job's loop and the event loop, either of which can be busy longer than the NIC collector's interval on a
    loaded machine (a reader would then see counters stand still)."""
    while not stop.is_set():
        now = time.time()
        for tree in trees:
            tree.write_counters(now)
        stop.wait(COUNTER_PERIOD_S)


async def _stop_after(stop: asyncio.Event, seconds: float) -> None:
    await asyncio.sleep(seconds)
    stop.set()
