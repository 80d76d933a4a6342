"""Agent footprint benchmark: the real agent's steady memory and CPU on a node producing a full Inspector rate.

Runs the real agent (``ranksight agent``, a child process) against a real nats-server, with every collector that applies
on this machine pointed at simulated sources: an Inspector dump directory written at ``--ranks`` x ``--rate``
collectives/s (8 x 100 by default: the v4.0 line format, one ``<hostname>-pid<pid>.log`` per rank), sysfs trees of 8
GPUs and one RDMA port, a RAS endpoint (NCCL 2.29 fake server: status polls and MONITOR), the heartbeat, the
training-side socket and the probe server. After ``--warmup`` seconds it samples the agent's resident memory and CPU
share over ``--seconds`` and prints them against the targets (<= 50 MiB RSS, <= 3 % of one core) and against a baseline
measured in the same run on the same dump directory: a bare python + nats-py publisher that tails the files, parses
each line with ``json`` and publishes msgpack batches to the same stream (no collectors, no typed records). It also
prints what reached the stream from each, so a figure is never that of an agent that fell behind. The figures go to
``benchmarks/results/agent_footprint.json``.

    python benchmarks/agent_footprint.py [--seconds 30] [--warmup 10] [--ranks 8] [--rate 100]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import msgpack

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.procmeter import MiB, Usage, measure

if TYPE_CHECKING:
    from ranksight.simulate.cluster import NodeSysfs

# The baseline runs this file too: what it needs is imported at module level, what only the measuring side needs is
# imported where it is used, so the baseline's memory holds nothing it does not use.

CLUSTER = "bench"
# 50 MiB, not 40: the agent process reads its settings as the pydantic models that declare them (pydantic and the
# settings classes: about 11 MiB) rather than a generated second form of them: one declaration per type is worth it.
TARGET_RSS = 50 * MiB
TARGET_CPU = 0.03
TICK_S = 0.1
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "ras"


class DumpWriter:
    """The Inspector plugin of one node's ranks: every tick, each rank appends its collectives of that tick, cycling
    through the rank's communicators (tensor, data and pipeline parallel) with per-communicator ``coll_sn``."""

    def __init__(self, directory: Path, ranks: int, rate: int) -> None:
        from ranksight.simulate.inspector import JobSpec, comms

        self.spec = JobSpec(
            nodes=4, gpus_per_node=ranks
        )  # node 0 of a 4-node job: comms inside and across nodes
        self.directory = directory
        self.per_tick = rate * TICK_S
        self.rng = random.Random(0)
        node0 = [[c for c in phase if any(m[0] == 0 for m in c.members)] for phase in comms(self.spec)]
        self.rank_comms = [
            [(c, c.members.index((0, gpu))) for phase in node0 for c in phase if (0, gpu) in c.members]
            for gpu in range(ranks)
        ]
        self.cycles = [itertools.cycle(rc) for rc in self.rank_comms]
        self.sn: dict[tuple[str, int], int] = {}
        self.owed = 0.0
        directory.mkdir(parents=True, exist_ok=True)

    def tick(self) -> int:
        """Append one tick's lines to every rank's file; the number of lines written."""
        self.owed += self.per_tick
        count, self.owed = int(self.owed), self.owed - int(self.owed)
        from ranksight.simulate.inspector import format_line

        now_us = time.time_ns() // 1000
        for gpu, cycle in enumerate(self.cycles):
            lines = []
            for _ in range(count):
                comm, rank = next(cycle)
                sn = self.sn[comm.comm_id, rank] = self.sn.get((comm.comm_id, rank), 0) + 1
                exec_us = int(self.rng.lognormvariate(7.6, 0.1))  # about 2 ms
                lines.append(format_line(self.spec, comm, rank, sn, exec_us, now_us) + "\n")
            path = self.directory / f"{self.spec.hostname(0)}-pid{self.spec.pid(0, gpu)}.log"
            with open(path, "a") as f:
                f.write("".join(lines))
        return count * len(self.cycles)


async def write_sources(writer: DumpWriter, sysfs: NodeSysfs, stop: asyncio.Event) -> None:
    """The node's sources as time passes: dump lines every tick, sysfs values every second (off the event loop)."""
    loop = asyncio.get_running_loop()
    next_tick, next_sysfs = loop.time(), loop.time()
    while not stop.is_set():
        await asyncio.to_thread(writer.tick)
        if loop.time() >= next_sysfs:
            await asyncio.to_thread(sysfs.write, time.time())
            next_sysfs += 1.0
        next_tick += TICK_S
        await asyncio.sleep(max(0.0, next_tick - loop.time()))


def agent_config(root: Path, url: str, dump_dir: Path, sysfs: Path, ras_addr: str) -> Path:
    """The agent's config file: every collector on, pointed at this node's simulated sources."""
    config = {
        "cluster": CLUSTER,
        "state_dir": str(root / "agent-state"),
        "nats": {"url": url},
        "agent": {
            "node": "node000",
            "collectors": {
                "heartbeat": {"jobs_dir": str(root / "jobs")},
                "ras": {"addr": ras_addr},
                "inspector": {"dump_dir": str(dump_dir)},
                "gpu": {"sources": ["sysfs"], "sysfs_root": str(sysfs)},
                "nic": {"sysfs_root": str(sysfs), "tool_counters": False},
                "probe": {"port": 0, "listen_host": "127.0.0.1", "advertise": ["127.0.0.1"]},
            },
        },
    }
    import tomli_w

    path = root / "agent.toml"
    path.write_text(tomli_w.dumps(config))
    return path


async def stream_counts(url: str, stream: str) -> dict[str, int]:
    """Messages in the stream per subject."""
    import nats

    nc = await nats.connect(url)
    try:
        info = await nc.jetstream().stream_info(stream, subjects_filter=">")
        return dict(info.state.subjects or {})
    finally:
        await nc.close()


def spawn(command: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RANKSIGHT_")}
    with open(log, "w") as stderr:
        return subprocess.Popen(command, env=env, stderr=stderr)


@dataclass
class Measured:
    """Runs a measured process on a node of its own: a fresh dump directory written while it runs."""

    url: str
    stream: str
    sysfs: NodeSysfs
    args: argparse.Namespace

    async def run(self, root: Path, command: Callable[[Path], list[str]]) -> tuple[Usage, dict[str, int]]:
        """Start ``command(dump dir)``, let it warm up, measure it over the window: its usage and the messages it
        published meanwhile."""
        args = self.args
        writer = DumpWriter(root / "dumps", args.ranks, args.rate)
        stop = asyncio.Event()
        sources = asyncio.create_task(write_sources(writer, self.sysfs, stop))
        await asyncio.sleep(1.0)  # the sources exist before the process starts, as on a node running a job
        log = root / "stderr.log"
        proc = spawn(command(writer.directory), log)
        try:
            await asyncio.sleep(args.warmup)
            if proc.poll() is not None:
                raise SystemExit(f"{command} exited with {proc.returncode}: {log.read_text()[-2000:]}")
            before = await stream_counts(self.url, self.stream)
            usage = await measure(proc.pid, args.seconds)
            after = await stream_counts(self.url, self.stream)
            return usage, {s: n - before.get(s, 0) for s, n in after.items() if n > before.get(s, 0)}
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            stop.set()
            await sources


def report(
    label: str, usage: Usage, published: dict[str, int], seconds: float, baseline: Usage | None
) -> None:
    kinds = (
        ", ".join(f"{s.rsplit('.', 1)[1]} {n / seconds:.1f}/s" for s, n in sorted(published.items()))
        or "nothing"
    )
    line = (f"{label}: RSS {usage.rss_median / MiB:.1f} MiB (max {usage.rss_max / MiB:.1f}, peak {usage.peak_rss / MiB:.1f}),"
            f" CPU {usage.cpu_share * 100:.2f} % of a core; messages {kinds}")  # fmt: skip
    if baseline is not None:
        line += (f"\n  against target: RSS {usage.rss_median / TARGET_RSS:.2f} x {TARGET_RSS / MiB:.0f} MiB, CPU {usage.cpu_share / TARGET_CPU:.2f}"
                 f" x 3 %: {'met' if usage.rss_median <= TARGET_RSS and usage.cpu_share <= TARGET_CPU else 'NOT met'}"
                 f"\n  against the bare publisher: RSS {usage.rss_median / baseline.rss_median:.2f} x, "
                 f"+{(usage.rss_median - baseline.rss_median) / MiB:.1f} MiB; CPU {usage.cpu_share / baseline.cpu_share:.2f} x")  # fmt: skip
    print(line, flush=True)


def save(args: argparse.Namespace, usage: Usage, baseline: Usage) -> None:
    from benchmarks.results import write_result

    path = write_result(
        "agent_footprint",
        {"rss_mib": round(usage.rss_median / MiB, 1), "peak_rss_mib": round(usage.peak_rss / MiB, 1),
         "cpu_pct_of_core": round(usage.cpu_share * 100, 2),
         "baseline_rss_mib": round(baseline.rss_median / MiB, 1),
         "baseline_cpu_pct_of_core": round(baseline.cpu_share * 100, 2),
         "inspector_records_per_s": args.ranks * args.rate, "window_s": args.seconds},
        {"rss_mib": {"max": TARGET_RSS / MiB}, "cpu_pct_of_core": {"max": TARGET_CPU * 100}},
        f"python benchmarks/agent_footprint.py --seconds {args.seconds:g} --warmup {args.warmup:g} "
        f"--ranks {args.ranks} --rate {args.rate}",
    )  # fmt: skip
    print(f"written to {path}", flush=True)


async def main(args: argparse.Namespace) -> None:
    import nats

    from ranksight.aggregator.runtime import ensure_stream
    from ranksight.core.natsserver import NatsServer
    from ranksight.schemas.subjects import Subjects
    from ranksight.settings import load_settings
    from ranksight.simulate.cluster import NodeSysfs
    from ranksight.simulate.ras_server import PROFILES, FakeRasServer

    with tempfile.TemporaryDirectory(prefix="ranksight-footprint-") as tmp:
        root = Path(tmp)
        server = NatsServer(root / "nats").start()
        ras = await FakeRasServer(
            PROFILES["2.29"],
            status_text=(FIXTURES / "rccl_2.28.3_text_status_healthy_1node_8gpu.txt").read_bytes(),
            status_json=(FIXTURES / "nccl_2.28.9_json_status_healthy_2rank.json").read_bytes(),
        ).start()
        try:
            settings = load_settings(None, cluster=CLUSTER, nats={"url": server.url})
            nc = await nats.connect(server.url)
            await ensure_stream(nc.jetstream(), settings)
            await nc.close()
            print(f"node: {args.ranks} ranks x {args.rate} collectives/s = {args.ranks * args.rate} Inspector "
                  f"records/s; window {args.seconds:g} s after {args.warmup:g} s of warm-up", flush=True)  # fmt: skip
            sysfs = NodeSysfs(root / "sys")
            bare_subject = Subjects(settings.subject_prefix).event(CLUSTER, "bare", "inspector")
            measured = Measured(server.url, settings.aggregator.stream, sysfs, args)
            bare, bare_published = await measured.run(
                root / "bare",
                lambda dumps: [sys.executable, __file__, "--bare", server.url, str(dumps), bare_subject],
            )
            report("bare python + nats-py publisher (baseline)", bare, bare_published, args.seconds, None)
            usage, published = await measured.run(
                root / "agent",
                lambda dumps: [sys.executable, "-m", "ranksight.cli", "agent", "--config",
                               str(agent_config(root / "agent", server.url, dumps, sysfs.root, ras.address))],
            )  # fmt: skip
            report("ranksight agent", usage, published, args.seconds, bare)
            save(args, usage, bare)
        finally:
            await ras.stop()
            server.stop()


def read_new_lines(directory: Path, offsets: dict[Path, int]) -> list[dict]:
    """The complete lines appended to the dump files since ``offsets`` (advanced), parsed."""
    records = []
    for path in directory.glob("*.log"):
        with open(path, "rb") as f:
            f.seek(offsets.get(path, 0))
            data = f.read()
        end = data.rfind(b"\n") + 1
        offsets[path] = offsets.get(path, 0) + end
        records += [json.loads(line) for line in data[:end].splitlines()]
    return records


async def bare_publisher(url: str, directory: Path, subject: str) -> None:
    """The baseline: tail every dump file, ``json``-parse the new lines, publish them as msgpack batches."""
    import nats

    nc = await nats.connect(url)
    js = nc.jetstream()
    offsets: dict[Path, int] = {}
    while True:
        records = await asyncio.to_thread(read_new_lines, directory, offsets)
        for first in range(0, len(records), 2000):
            await js.publish(subject, msgpack.packb(records[first : first + 2000]))
        await asyncio.sleep(0.25)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=30.0, help="measurement window")
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds before the window")
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--rate", type=int, default=100, help="collectives per second per rank")
    parser.add_argument("--bare", nargs=3, metavar=("URL", "DIR", "SUBJECT"), help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.bare:
        asyncio.run(bare_publisher(options.bare[0], Path(options.bare[1]), options.bare[2]))
    else:
        asyncio.run(main(options))
