"""A real NCCL 2.28.9 job's RAS statuses (``fixtures/ras/nccl-2.28.9-h100``, 4 ranks on one H100), served in the order
they were read, to a real agent and aggregator: the alerts the live aggregator raised on the real machine, in the
same order. Healthy, then rank 2 stops issuing collectives (the others block one step ahead), then it is killed.

On the device (``fixtures/capture/README.md``): ``job_started``; ``comm_mismatch`` and ``comm_hang`` 10 s into the hung
rank; ``rank_missing`` and ``comm_error`` 4 s after the kill; ``job_ended`` once every process was gone."""

from __future__ import annotations

from pathlib import Path

from ranksight.settings import Settings
from ranksight.simulate.ras_server import PROFILES, FakeRasServer
from tests.conftest import FIXTURES
from tests.ras_support import fake_proc
from tests.support import agent, aggregator, wait_for

REAL = FIXTURES / "ras/nccl-2.28.9-h100"


def moment(name: str) -> tuple[bytes, bytes]:
    return (REAL / f"4rank_{name}_status.txt").read_bytes(), (REAL / f"4rank_{name}_status.json").read_bytes()


async def test_the_real_jobs_statuses_raise_what_the_live_aggregator_raised(
    settings: Settings, tmp_path: Path
) -> None:
    s = settings.model_copy(deep=True)
    s.aggregator.ras.hang_after_s = 60.0  # the ranks behind name the hang first (two polls), not the clock
    server = await FakeRasServer(PROFILES["2.28.9"], *moment("healthy")).start()
    s.agent.collectors.ras = s.agent.collectors.ras.model_copy(update={
        "addr": server.address, "interval_s": 0.2, "lease_ttl_s": 1.0, "timeout_s": 2.0, "detail_every": 1,
        "proc_root": fake_proc(tmp_path / "proc", server.port, {"SLURM_JOB_ID": "3027"})})  # fmt: skip
    try:
        async with aggregator(s) as agg, agent(s, only=["ras"]):

            def firing() -> dict[str, object]:
                return {a.rule: a for a in agg.engine.active.values()}

            await wait_for(lambda: "job_started" in firing(), timeout=10)
            served = server.statuses_served
            await wait_for(lambda: server.statuses_served >= served + 6, timeout=10)
            assert set(firing()) == {"job_started"}  # healthy polls raise nothing more

            server.status_text, server.status_json = moment("hang10")
            await wait_for(lambda: {"comm_mismatch", "comm_hang"} <= set(firing()), timeout=15)
            hang = firing()["comm_hang"]
            assert [(r["rank"], r["pid"]) for r in hang.evidence["lagging_ranks"]] == [(2, 3030), (2, 3030)]
            assert hang.evidence["collective"] in ("AllGather", "AllReduce")
            server.status_text, server.status_json = moment("hang24")  # nothing moved in 14 s
            served = server.statuses_served
            await wait_for(lambda: server.statuses_served >= served + 3, timeout=10)
            assert {"comm_mismatch", "comm_hang"} <= set(firing())

            server.status_text, server.status_json = moment("dead4")
            await wait_for(lambda: {"rank_missing", "comm_error"} <= set(firing()), timeout=15)
            missing = firing()["rank_missing"]
            assert (missing.evidence["host"], missing.evidence["pid"]) == ("127.0.0.1", 3030)
            await wait_for(lambda: "comm_hang" not in firing(), timeout=10)  # the named cause speaks for it

            await server.stop()  # every process gone: the endpoint closes
            await wait_for(lambda: "job_ended" in firing(), timeout=15)
            ended = firing()["job_ended"]
            assert ended.severity == "warning" and ended.evidence["normal"] is False
    finally:
        await server.stop()
