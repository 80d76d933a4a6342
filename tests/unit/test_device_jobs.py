"""The job of each device (``job_id`` in /metrics): from ranks' local rank, RAS processes, and a node's only job."""

from __future__ import annotations

from ranksight.aggregator.device_jobs import HOLD_S, device_jobs
from ranksight.aggregator.state import NS, LiveState
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import AppRecord, RasRecord
from ranksight.schemas.records.ras import RasProcess
from ranksight.schemas.wire import event_type


def envelope(kind: str, node: str, seq: int, records: list, ttl: float = 30.0) -> Envelope:  # type: ignore[type-arg]
    return Envelope(type=event_type(kind), cluster="c", node=node, agent="a" + node, seq=seq, ts=0, ttl=ttl,
                    records=records)  # fmt: skip


def beat(job: str, rank: int, local_rank: int | None, pid: int, timeout_s: float | None = 30.0) -> AppRecord:
    return AppRecord(event="heartbeat", job_id=job, rank=rank, local_rank=local_rank, pid=pid, n=1, client_ts=0,
                     timeout_s=timeout_s)  # fmt: skip


def test_gpus_by_local_rank_nics_by_the_nodes_only_job_and_staleness() -> None:
    state = LiveState()
    state.observe(envelope("app", "n1", 1, [beat("slurm-1", 0, 0, 100), beat("slurm-1", 1, 1, 101)]), 1 * NS)
    state.observe(envelope("app", "n2", 1, [beat("slurm-1", 2, 0, 200), beat("slurm-2", 0, 3, 201)]), 1 * NS)
    state.tick(2 * NS)
    jobs = device_jobs(state)
    assert [jobs.gpu("c", "n1", g) for g in range(3)] == ["slurm-1", "slurm-1", ""]  # GPU 2 runs nothing
    assert jobs.gpu("c", "n2", 3) == "slurm-2"
    assert (
        jobs.node("c", "n1") == "slurm-1" and jobs.node("c", "n2") == ""
    )  # two jobs share n2's NICs: no label
    assert jobs.process("c", "n2", 201) == "slurm-2" and jobs.process("c", "n1", 999) == "slurm-1"
    state.tick(40 * NS)  # heartbeats overdue: the ranks no longer hold their GPUs
    assert device_jobs(state).gpus == {}


def test_ras_processes_and_the_polling_node() -> None:
    state = LiveState()
    dead = RasProcess(host="n3", pid=300, gpus=[5])
    rec = RasRecord(
        job_id="slurm-9", endpoint="localhost:28028", format="json", health="failed", dead_processes=[dead]
    )
    state.observe(envelope("ras", "n1", 1, [rec]), 1 * NS)
    state.observe(envelope("app", "n4", 1, [beat("slurm-9", 7, None, 400, timeout_s=None)]), 1 * NS)
    state.tick(2 * NS)
    jobs = device_jobs(state)
    assert jobs.gpu("c", "n3", 5) == "slurm-9" and jobs.gpu("c", "n3", 4) == "slurm-9"  # n3's only job
    assert jobs.node("c", "n1") == jobs.node("c", "n3") == jobs.node("c", "n4") == "slurm-9"
    assert jobs.gpus.keys() == {("c", "n3", 5)}  # no local rank: no GPU claimed
    state.tick(
        (HOLD_S + 2) * NS
    )  # no heartbeat timeout: held HOLD_S after its last message; the RAS job went stale
    assert device_jobs(state).nodes == {}


def test_every_gpu_of_a_node_that_runs_one_job_seen_through_inspector() -> None:
    """Issue 47: in the demo (no training-side client) 1 of 64 GPUs carried ``job_id``: only RAS's polling node was
    known to run the job. A node whose processes report the job's communicators runs it, and so do its GPUs."""
    from ranksight.schemas.records import InspectorSummaryRecord
    from ranksight.schemas.records.ras import RasCommunicator

    state = LiveState()
    rec = RasRecord(job_id="slurm-9", endpoint="localhost:28028", format="json", health="ok",
                    communicators=[RasCommunicator(hash="0x00ab", size=16)])  # fmt: skip
    state.observe(envelope("ras", "n1", 1, [rec]), 1 * NS)
    for node in ("n1", "n2"):
        summary = InspectorSummaryRecord(comm_id="0xab", rank=0, n_ranks=16, hostname=node, pid=7, op_kind="coll",
                                         op="AllReduce", window_start_us=0, window_us=1_000_000, slice_us=100_000,
                                         size_bucket=20, count=10, bytes=10 << 20, sn_first=0, sn_last=9,
                                         last_dump_ts_us=1_000_000)  # fmt: skip
        state.observe(envelope("inspector_summary", node, 2, [summary]), 1 * NS)
    state.tick(2 * NS)
    jobs = device_jobs(state)
    assert [jobs.gpu("c", n, g) for n in ("n1", "n2") for g in (0, 7)] == ["slurm-9"] * 4
