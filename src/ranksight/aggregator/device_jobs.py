"""Which job runs on which device, from what the aggregator knows live, for the ``job_id`` label of ``/metrics``.

- a GPU is in use by a job when a rank of that job reports (``ranksight.client``) from its node with that local rank (the
  launchers' convention: one process per GPU, ``LOCAL_RANK`` = the GPU it drives), or when RAS lists a dead or missing
  process of the job with that GPU;
- a node runs a job when such a rank reports from it, when its agent polls the job's RAS endpoint, when RAS lists a
  process of the job on it, or when a process on it reports Inspector records of one of the job's communicators (every
  node of a job, without any training-side client). A NIC serves every process of its node, so it is labelled only
  when the node runs exactly one job; so are the GPUs of such a node whose ranks do not say which GPU each drives (a
  job that runs alone on a node, seen through RAS or Inspector only, has its GPUs).

A rank counts while its heartbeat is not overdue (or for ``HOLD_S`` after its last message when it sends none); RAS facts
while the job is running. Each device gets at most one job, so the label adds no series. Pure: reads state only.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ranksight.aggregator.models.hangs import comm_hash
from ranksight.aggregator.state import NS

if TYPE_CHECKING:
    from ranksight.aggregator.state import LiveState

HOLD_S = 300  # a rank that sends no heartbeats keeps its GPU labelled this long after its last message


@dataclass
class DeviceJobs:
    gpus: dict[tuple[str, str, int], str] = field(default_factory=dict)
    nodes: defaultdict[tuple[str, str], set[str]] = field(default_factory=lambda: defaultdict(set))
    processes: dict[tuple[str, str, int], str] = field(default_factory=dict)  # (cluster, node, pid) -> job
    # nodes whose ranks say which GPU each drives: a GPU none of them names runs nothing
    ranked: set[tuple[str, str]] = field(default_factory=set)

    def gpu(self, cluster: str, node: str, index: int) -> str:
        if (cluster, node, index) in self.gpus:
            return self.gpus[(cluster, node, index)]
        return "" if (cluster, node) in self.ranked else self.node(cluster, node)

    def node(self, cluster: str, node: str) -> str:
        """The job of a node that runs exactly one; "" (no label) otherwise."""
        jobs = self.nodes.get((cluster, node), set())
        return next(iter(jobs)) if len(jobs) == 1 else ""

    def process(self, cluster: str, node: str, pid: int | None) -> str:
        return self.processes.get((cluster, node, pid or 0), "") or self.node(cluster, node)


def device_jobs(state: LiveState) -> DeviceJobs:
    found = DeviceJobs()
    now = state.now_ns
    for rank in sorted(state.app.ranks.values(), key=lambda r: r.last_seen_ns):  # the newest fact wins
        expected = rank.heartbeat_deadline()
        deadline = expected.at_ns if expected is not None else rank.last_seen_ns + HOLD_S * NS
        if rank.job is None or now > deadline:
            continue
        found.nodes[(rank.cluster, rank.node)].add(rank.job)
        found.processes[(rank.cluster, rank.node, rank.pid)] = rank.job
        if rank.local_rank is not None:
            found.gpus[(rank.cluster, rank.node, rank.local_rank)] = rank.job
            found.ranked.add((rank.cluster, rank.node))
    tracker = state.stragglers
    for job in state.jobs.live():
        found.nodes[(job.cluster, job.node)].add(job.job_id)
        hashes = {comm_hash(h) for h in job.comms}
        for (comm_id, _, host, _), seen_ns in tracker.followed_ranks.get(job.cluster, {}).items():
            if now - seen_ns <= HOLD_S * NS and comm_hash(comm_id) in hashes:
                node = tracker.host_nodes.get((job.cluster, host), (host, 0))[0]
                found.nodes[(job.cluster, node)].add(job.job_id)
        for proc in [*job.dead_processes, *job.missing_processes]:
            found.nodes[(job.cluster, proc.host)].add(job.job_id)
            if proc.pid is not None:
                found.processes[(job.cluster, proc.host, proc.pid)] = job.job_id
            for gpu in proc.gpus:
                found.gpus[(job.cluster, proc.host, gpu)] = job.job_id
    return found
