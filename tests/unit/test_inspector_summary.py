"""The agent's Inspector summarizer: records of the real fixtures (and of the simulator, which writes their format) in,
``inspector_summary`` records out; windows aligned to wall-clock multiples, late records counted, sizes bucketed, both
capture models; and the straggler engine sees the same aggregates from summaries as from the raw records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ranksight.agent.collectors.inspector.parse import parse_line
from ranksight.agent.collectors.inspector.summary import Summarizer
from ranksight.aggregator.analysis.stragglers import StragglerEngine
from ranksight.schemas.codec import decode_event, encode_event
from ranksight.schemas.envelope import Envelope, event_type
from ranksight.schemas.records import InspectorRecord, InspectorSummaryRecord
from ranksight.simulate.inspector import Fault, JobSpec, run_job, summarize

FIXTURES = Path(__file__).parents[2] / "fixtures" / "inspector"
W = 5_000_000  # µs: the default window


def fixture(name: str) -> InspectorRecord:
    return parse_line(json.dumps(json.loads((FIXTURES / name).read_text())))


RS = fixture("nccl_exporter_readme_v4.0_reducescatter_rank31of32_4nodes.json")  # 64 KiB, 110 us, sampled
AR = fixture("nccl_readme_v4.0_allreduce_rank2of8_prerelease_no_timing_source.json")


def at(rec: InspectorRecord, ts_us: int, sn: int, **changes: object) -> InspectorRecord:
    return rec.model_copy(update={"dump_ts_us": ts_us, "sn": sn, **changes})


def test_windows_align_to_wall_clock_multiples_and_close_after_the_grace() -> None:
    base = RS.dump_ts_us - RS.dump_ts_us % W  # the fixture's own window
    s = Summarizer(window_s=5, slice_s=0.5, grace_s=2)
    s.add(at(RS, base + W - 1, 1))
    s.add(at(RS, base + W, 2))  # the next window, though a microsecond later
    assert s.close(base + W + 1_999_999) == []  # the grace is not over
    s.add(at(RS, base + W - 10, 3, exec_time_us=90.0))  # late but within the grace: its own window
    [first] = s.close(base + W + 2_000_000)
    assert (first.window_start_us, first.window_us, first.slice_us) == (base, W, 500_000)
    assert (first.count, first.timed, first.sn_first, first.sn_last) == (2, 2, 1, 3)
    assert (first.exec_min_us, first.exec_max_us, first.exec_sum_us) == (90.0, 110.0, 200.0)
    assert first.last_dump_ts_us == base + W - 1
    assert first.slice_index == [9] and first.slice_count == [2]
    assert (first.slice_sn_lo, first.slice_sn_hi) == ([1], [3])
    assert (first.slice_sn_lo_ts_us, first.slice_sn_hi_ts_us) == ([base + W - 1], [base + W - 10])
    [second] = s.close(base + 2 * W + 2_000_000)
    assert (second.window_start_us, second.count, second.sn_first) == (base + W, 1, 2)


def test_a_record_later_than_the_grace_is_counted_not_summarized() -> None:
    base = RS.dump_ts_us - RS.dump_ts_us % W
    s = Summarizer(grace_s=1)
    s.add(at(RS, base + 100, 1))
    assert len(s.close(base + W + 1_000_000)) == 1
    s.add(at(RS, base + 200, 2))  # its window is gone
    assert (s.late_total, s.windows) == (1, {})
    s.add(at(RS, base + W + 5, 3))
    [nxt] = s.close(base + 2 * W + 1_000_000)
    assert (nxt.count, nxt.late) == (1, 1)  # reported with the key's next summary
    assert s.late == {}


def test_the_grace_follows_the_arrival_delay_of_a_starved_reader_up_to_its_bound() -> None:
    """A host that reads its dumps 6 s behind: with a fixed 2 s grace every window's tail is late (and its processes
    unjudged); the grace widens to the delay seen on arrival, so from then on nothing is late."""
    base = RS.dump_ts_us - RS.dump_ts_us % W
    delay = 6_000_000

    def late_after(s: Summarizer) -> int:
        for step in range(0, 8 * W, W // 10):  # records every 0.5 s, read `delay` later
            now = base + step + delay
            s.add(at(RS, base + step, step))
            s.close(now)
        return s.late_total

    fixed, adaptive = late_after(Summarizer(grace_s=2)), late_after(Summarizer(grace_s=2, max_grace_s=15))
    assert fixed > 40
    assert adaptive == 0  # the first close already saw the delay
    bounded = Summarizer(grace_s=2, max_grace_s=15)
    bounded.add(at(RS, base, 1))
    assert bounded.grace_at(base + 600 * 1_000_000) == 15_000_000  # an old backlog: never more than the bound
    assert (
        bounded.grace_at(base + 700 * 1_000_000) == 2_000_000
    )  # and forgotten once arrivals are on time again


def test_sizes_share_a_power_of_two_bucket_and_add_up_exactly() -> None:
    base = RS.dump_ts_us - RS.dump_ts_us % W
    s = Summarizer()
    s.add(at(RS, base + 1, 1))  # 65536 bytes
    s.add(at(RS, base + 2, 2, msg_size_bytes=40_000))
    s.add(at(RS, base + 3, 3, msg_size_bytes=65_537))
    out = sorted(s.close(base + 10 * W), key=lambda x: x.size_bucket)
    assert [(x.size_bucket, x.count, x.bytes) for x in out] == [(65536, 2, 105_536), (131072, 1, 65_537)]


def test_statistics_of_the_fixtures_and_bandwidth_recomputed() -> None:
    base = AR.dump_ts_us - AR.dump_ts_us % W
    s = Summarizer()
    times = [61974.0, 60000.0, 65000.0, 70000.0]
    for i, t in enumerate(times):
        s.add(at(AR, base + i * 1_000_000, 1407 + i, exec_time_us=t))
    s.add(at(AR, base + 4_500_000, 1411, exec_time_us=None))  # untimed: counted, not timed
    [x] = s.close(base + 10 * W)
    assert (x.count, x.timed, x.bytes) == (5, 4, 5 * AR.msg_size_bytes)
    assert (x.exec_p50_us, x.exec_p90_us, x.exec_p99_us) == (65000.0, 70000.0, 70000.0)
    assert x.busbw_gbs == pytest.approx(
        AR.msg_size_bytes * 4 / sum(times) / 1e3 * 2 * 7 / 8
    )  # AllReduce busbw factor 2(n-1)/n, n = 8
    assert (x.capture_model, x.comm_id, x.rank, x.n_ranks, x.hostname, x.pid) == (
        "sampled", AR.comm_id, 2, 8, "example-hostname", 1639453)  # fmt: skip
    assert x.slice_index == [0, 2, 4, 6]  # the untimed one has no slice: the engine skips it too
    # through the one codec, as published
    env = Envelope(type=event_type("inspector_summary"), cluster="c", node="n", agent="a", seq=1, ts=1, ttl=15.0,
                   records=[x])  # fmt: skip
    [back] = decode_event(encode_event(env)).records
    assert back.slice_exec_sum_us == x.slice_exec_sum_us and back.exec_p90_us == 70000.0


def test_open_accumulators_are_bounded() -> None:
    base = RS.dump_ts_us - RS.dump_ts_us % W
    s = Summarizer(max_keys=2)
    for rank in range(3):
        s.add(at(RS, base + 1, 1, rank=rank))
    assert (s.overflow, len(s.close(base + 10 * W))) == (1, 2)


@pytest.mark.parametrize("capture", ["ring", "sampled"])
def test_engine_sees_the_same_aggregates_from_summaries_as_from_raw_records(capture: str) -> None:
    spec = JobSpec(nodes=4, gpus_per_node=2, steps=120, capture=capture, faults=[Fault("gpu", 1, 1, 1.5)])  # type: ignore[arg-type]
    timed, _ = run_job(spec)
    records = sorted(
        (parse_line(x) for lines in timed.values() for _, x in lines), key=lambda r: r.dump_ts_us
    )
    raw = StragglerEngine().extend(records)
    published = summarize(records, Summarizer())
    assert all(isinstance(x, InspectorSummaryRecord) for _, x in published)
    summed = StragglerEngine()
    for _, x in published:
        summed.add_summary(x)
    assert summed.records == raw.records and summed.capture_model == raw.capture_model == capture
    assert raw.slices.keys() == summed.slices.keys()
    for index, sl in raw.slices.items():
        other = summed.slices[index]
        assert {k: (a.n, round(a.total, 3), a.low) for k, a in sl.aggs.items()} == {
            k: (a.n, round(a.total, 3), a.low) for k, a in other.aggs.items()
        }
        assert {k: (s.lo, s.lo_ts, s.hi, s.hi_ts) for k, s in sl.spans.items()} == {
            k: (s.lo, s.lo_ts, s.hi, s.hi_ts) for k, s in other.spans.items()
        }
    culprit = (spec.hostname(1), spec.pid(1, 1))
    assert [(f.hostname, f.pid) for f in raw.analyze().stragglers] == [culprit]
    assert [(f.hostname, f.pid) for f in summed.analyze().stragglers] == [culprit]
    # a window's summaries are published once it ended and the grace passed, never before
    assert all(ts == x.window_start_us + 7_000_000 for ts, x in published)
