"""RAS and Inspector corroborate or contradict the rank a Flight Recorder finding names (``corroborate``), from the
live state the aggregator keeps anyway."""

from __future__ import annotations

from pathlib import Path

from ranksight.aggregator.hang_forensics import corroborate
from ranksight.aggregator.models.hangs import HangFinder, _CommOp
from ranksight.aggregator.state import LiveState
from ranksight.aggregator.state.jobs import JobState
from ranksight.core.flightrec import RankDump, read_directory
from ranksight.schemas.records.ras import RasProcess

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "flight_recorder"


def dumps() -> list[RankDump]:
    return read_directory(FIXTURES / "python_stuck", 1 << 20, 100).dumps


def named(rank: int = 2) -> RankDump:
    return next(d for d in dumps() if d.rank == rank)


def test_no_ras_no_inspector_says_so() -> None:
    seen = corroborate(LiveState(), "c", "J", 2, dumps())
    assert seen["verdict"] == "no corroborating data" and seen["pid"] == named().pid and seen["gpu"] is None


def test_ras_listing_the_process_dead_corroborates_and_names_its_gpus() -> None:
    state = LiveState()
    dump = named()
    job = JobState(cluster="c", job_id="nccl-1", endpoint="e", node="n2", first_seen_ns=1)
    job.dead_processes = [RasProcess(host=str(dump.host), pid=dump.pid, gpus=[3])]
    state.jobs.jobs[("c", "nccl-1")] = job
    seen = corroborate(state, "c", "J", 2, dumps())
    assert seen["verdict"] == "corroborated by ras" and seen["gpu"] == [3] and "dead" in seen["ras"]


def test_inspector_behind_corroborates_level_contradicts() -> None:
    dump = named()
    for own_sn, verdict in ((7, "corroborated by inspector"), (9, "contradicted: Inspector shows the process level "
                                                                  "with its peers")):  # fmt: skip
        state = LiveState()
        finder = state.stragglers.hang_finders["c"] = HangFinder(quiet_s=10)
        op = finder.comm_ops[("0xabc", "AllReduce")] = _CommOp("0xabc", 3)
        op.last = {0: (9, ("other", 1)), 2: (own_sn, (str(dump.host), int(dump.pid or 0)))}
        op.top = 9
        seen = corroborate(state, "c", "J", 2, dumps())
        assert seen["verdict"] == verdict
        assert seen["inspector"] == [{"comm": "0xabc", "last_coll_sn": own_sn, "comm_top_coll_sn": 9}]
