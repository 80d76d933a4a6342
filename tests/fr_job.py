"""A small real PyTorch job (gloo, CPU, several processes) that hangs in one of the shapes hang forensics names.

``python tests/fr_job.py --scenario S --world 3 --port P [--out DIR --form F] [--socket PATH]`` starts every rank.
Each rank runs ``STEPS`` steps of an all_reduce on the default group plus a broadcast on a two-rank subgroup; at
``FAULT_STEP`` the faulty rank (``FAULTY``) departs from the others:

* ``healthy``: no fault; every rank finishes and idles;
* ``stopped``: the faulty rank leaves the loop early and waits for a result queue that never fills;
* ``mismatch``: rank 1 calls broadcast where the others call all_reduce (another collective at the same seq id);
  ``size_mismatch``, ``dtype_mismatch``: its all_reduce has twice the elements, or float64 elements;
* ``python_stuck``: the faulty rank's data loader sleeps;
* ``killed``: the faulty rank kills itself (SIGKILL); its peers' collective fails or waits;
* ``subgroup``: the faulty rank (1) stops before the subgroup's broadcast: rank 0 waits in it, held up there, while
  the others wait for ranks 0 and 1 in the default group's next all_reduce;
* ``crossed``: rank 1 calls the subgroup's broadcast before the default group's all_reduce, rank 0 the other way
  round: each waits for the other (a deadlock across groups).

With ``--out`` each rank writes its own dump after ``--dump-after`` seconds past the fault step from a thread of its own, in the ``--form``
torch gives (``pickle``: ``_dump_fr_trace()``; ``json``: ``_dump_fr_trace_json()``) or ranksight's (``ranksight``: the
client's reply as the agent files it), then exits: this is how ``fixtures/flight_recorder/`` was captured. With
``--socket`` the ranks use ``ranksight.client`` (heartbeats every step) and stay stuck until killed: the live tests.
With ``--worker-sockets DIR`` each rank serves torch's own worker server (``_WorkerServer``) on ``DIR/worker<rank>.sock``
and never uses ranksight: the torch-only sources.
"""

from __future__ import annotations

import argparse
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

STEPS = 6
FAULT_STEP = 3
FAULTY = {
    "stopped": 2,
    "python_stuck": 2,
    "killed": 2,
    "mismatch": 1,
    "subgroup": 1,
    "crossed": 1,
    "size_mismatch": 1,
    "dtype_mismatch": 1,
}
STEP_S = 0.2  # live: seconds between steps
REACHED_FAULT_STEP = threading.Event()  # the dump waits for it: startup time varies a lot on a busy machine


def next_batch(scenario: str, rank: int, step: int) -> list[float]:
    """The job's data loader."""
    if scenario == "python_stuck" and rank == FAULTY[scenario] and step == FAULT_STEP:
        time.sleep(3600)  # a loader stuck on storage
    return [float(rank + step)] * 4


def wait_for_results(results: queue.Queue[int]) -> None:
    results.get()  # nobody ever puts: the rank has stopped entering collectives


def train(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    rank, world = args.rank, args.world
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank, world_size=world)
    pair = dist.new_group([0, 1])
    if args.worker_sockets:
        from torch._C._distributed_c10d import _WorkerServer

        server = _WorkerServer(str(Path(args.worker_sockets) / f"worker{rank}.sock"))  # noqa: F841 (serves while alive)
    client = None
    if args.socket:
        from ranksight import client as ranksight_client

        client = ranksight_client.configure(args.socket, heartbeat_interval_s=0)
        client.start()
    steps = STEPS if args.out else 1 << 30  # live: a job that keeps training until it hangs or is killed
    for step in range(steps):
        if step == FAULT_STEP:
            REACHED_FAULT_STEP.set()
            if args.mark and rank == FAULTY.get(args.scenario):
                Path(args.mark).write_text(str(time.time_ns()))  # when the hang starts, for latency figures
        if args.scenario == "stopped" and rank == FAULTY["stopped"] and step == FAULT_STEP:
            wait_for_results(queue.Queue())
        if args.scenario == "killed" and rank == FAULTY["killed"] and step == FAULT_STEP:
            os.kill(os.getpid(), signal.SIGKILL)
        tensor = torch.tensor(next_batch(args.scenario, rank, step))
        try:
            if args.scenario == "crossed" and rank == FAULTY["crossed"] and step == FAULT_STEP:
                dist.broadcast(tensor, src=0, group=pair)  # before the all_reduce rank 0 waits in: a deadlock
            odd = rank == FAULTY.get(args.scenario) and step == FAULT_STEP
            if odd and args.scenario == "mismatch":
                dist.broadcast(tensor, src=0)
            elif odd and args.scenario == "size_mismatch":
                dist.all_reduce(torch.cat([tensor, tensor]))
            elif odd and args.scenario == "dtype_mismatch":
                dist.all_reduce(tensor.double())
            else:
                dist.all_reduce(tensor)
            if args.scenario == "subgroup" and rank == FAULTY["subgroup"] and step == FAULT_STEP:
                wait_for_results(queue.Queue())
            if rank in (0, 1):
                dist.broadcast(tensor, src=0, group=pair)
        except RuntimeError:  # a dead peer: gloo fails the op, NCCL would wait; idle like a hung rank
            time.sleep(3600)
        if client is not None:
            client.heartbeat(step=step)
        if not args.out:
            time.sleep(STEP_S)
    time.sleep(3600)  # finished: idle until dumped or killed


def dump_later(args: argparse.Namespace) -> None:
    REACHED_FAULT_STEP.wait(300)
    time.sleep(args.dump_after)
    import torch

    out = Path(args.out)
    if args.form == "pickle":
        (out / f"trace_rank_{args.rank}").write_bytes(
            torch._C._distributed_c10d._dump_fr_trace()
        )  # with frames
    elif args.form == "json":
        (out / f"fr-{args.rank}.json").write_bytes(
            torch._C._distributed_c10d._dump_fr_trace_json(includeCollectives=True)
        )
    else:
        import socket

        from ranksight.client import identity
        from ranksight.client.dumps import build_dump
        from ranksight.core.flightrec.bundle import bundle_from_reply

        ident = {**identity(), "host": socket.gethostname()}
        data, _ = bundle_from_reply(ident, build_dump(1 << 26, collective_frames=True), f"rank {args.rank}")
        (out / f"rank{args.rank}.ranksight.json").write_bytes(data)
    os._exit(0)


def start_ranks(argv: list[str], world: int, job: str) -> list[subprocess.Popen[bytes]]:
    """Every rank of the job as its own process (``argv``: this script's flags, without ``--rank``)."""
    procs = []
    for rank in range(world):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
               "TORCH_FR_BUFFER_SIZE": "64", "SLURM_JOB_ID": job}  # fmt: skip
        cmd = [sys.executable, __file__, *argv, "--rank", str(rank)]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return procs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenario", required=True, choices=["healthy", *FAULTY])
    parser.add_argument("--world", type=int, default=3)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--out")
    parser.add_argument("--form", choices=["pickle", "json", "ranksight"], default="pickle")
    parser.add_argument("--dump-after", type=float, default=3.0)
    parser.add_argument("--socket")
    parser.add_argument("--job", default="fr-test")
    parser.add_argument("--worker-sockets", help="serve torch's worker server in this directory")
    parser.add_argument("--mark", help="live: the faulty rank writes the time its hang starts here (ns)")
    parser.add_argument("--rank", type=int)
    args = parser.parse_args()
    if args.rank is None:
        for proc in start_ranks(sys.argv[1:], args.world, args.job):
            proc.wait(timeout=300)
        return
    if args.out:
        threading.Thread(target=dump_later, args=(args,), daemon=True).start()
    train(args)


if __name__ == "__main__":
    main()
