"""The straggler engine on dump files of the real Inspector plugin and a real NCCL 2.28.9 job (one H100, 4 processes;
``fixtures/inspector/PROVENANCE.md``): rank 2 (pid 3030) sleeps 40 ms more per step from 15 s to 52 s of dump time.

Its communicator runs AllReduce in two sizes, as real jobs do (DDP buckets, a smaller last one): sampled records
(v4.0, no ``comm_name``) give one op rate per (comm, collective) from ``coll_sn``, which counts every size. Before
this was found on the real job, each size's mean time was multiplied by the rate of all sizes: every process seemed
busy more than all the time, and the engine judged nothing.
"""

from __future__ import annotations

import pytest

from ranksight.agent.collectors.inspector.dumps import DumpReader
from ranksight.aggregator.models.straggler.engine import StragglerEngine, analyze_records
from ranksight.aggregator.models.straggler.findings import Analysis, StragglerParams
from ranksight.schemas.records import InspectorRecord
from ranksight.simulate.inspector import summarize
from tests.conftest import FIXTURES

DUMPS = FIXTURES / "inspector/nccl-2.28.9-h100-4rank"
PARAMS = StragglerParams()


def records() -> list[InspectorRecord]:
    reader = DumpReader(DUMPS)
    out = sorted(reader.records(), key=lambda r: r.dump_ts_us)
    assert reader.bad_lines == 0 and len(out) == 6611
    return out


def analyze(recs: list[InspectorRecord], feed: str) -> Analysis:
    if feed == "raw":
        return analyze_records(recs, PARAMS)
    engine = StragglerEngine(PARAMS)  # the aggregator's way: the agents' summaries
    for _, summary in summarize(recs, slice_s=PARAMS.slice_s):
        engine.add_summary(summary)
    return engine.analyze()


@pytest.mark.parametrize("feed", ["raw", "summary"])
def test_the_real_jobs_straggler_is_found_and_its_waiting_peers_are_not(feed: str) -> None:
    recs = records()
    assert {r.capture_model for r in recs} == {"sampled"}
    assert len({r.msg_size_bytes for r in recs if r.op == "AllReduce"}) == 2
    result = analyze(recs, feed)
    assert [(f.hostname, f.pid, f.rank, f.kind) for f in result.stragglers] == [("vm", 3030, 2, "compute")]
    finding = result.stragglers[0]
    # 50 ms outside collectives per step against its peers' 10 ms plus overheads: about 4x
    assert 3.0 < finding.slowdown < 6.0, finding.evidence


@pytest.mark.parametrize("feed", ["raw", "summary"])
def test_the_real_jobs_healthy_stretch_raises_nothing(feed: str) -> None:
    recs = records()
    start = recs[0].dump_ts_us
    healthy = [r for r in recs if r.dump_ts_us < start + 14_000_000]
    assert analyze(healthy, feed).stragglers == []
