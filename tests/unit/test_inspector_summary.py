"""The agent's Inspector summarizer: records of the real fixtures (and of the simulator, which writes their format) in,
``inspector_summary`` records out; windows aligned to wall-clock multiples, published in parts as read, sizes bucketed,
both capture models; and the straggler engine sees the same aggregates from summaries as from the raw records."""

from __future__ import annotations

import json
import tracemalloc
from collections import Counter
from pathlib import Path

import msgpack
import pytest
from msgspec.structs import replace

from ranksight.agent.collectors.inspector.summary import Summarizer
from ranksight.aggregator.models.straggler.engine import StragglerEngine
from ranksight.formats.inspector import parse_op
from ranksight.schemas.codec import DecodeError, decode_event, encode_event
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import InspectorRecord, InspectorSummaryRecord
from ranksight.schemas.structs import to_builtins
from ranksight.schemas.wire import event_type
from ranksight.simulate.inspector import Fault, JobSpec, run_job, summarize

FIXTURES = Path(__file__).parents[2] / "fixtures" / "inspector"
W = 5_000_000  # µs: the default window


def fixture(name: str) -> InspectorRecord:
    return parse_op(json.dumps(json.loads((FIXTURES / name).read_text())))


RS = fixture("nccl_exporter_readme_v4.0_reducescatter_rank31of32_4nodes.json")  # 64 KiB, 110 us, sampled
AR = fixture("nccl_readme_v4.0_allreduce_rank2of8_prerelease_no_timing_source.json")


def at(rec: InspectorRecord, ts_us: int, sn: int, **changes: object) -> InspectorRecord:
    return replace(rec, **{"dump_ts_us": ts_us, "sn": sn, **changes})


def test_windows_align_to_wall_clock_multiples_and_each_take_publishes_what_was_read_since_the_last() -> None:
    base = RS.dump_ts_us - RS.dump_ts_us % W  # the fixture's own window
    s = Summarizer(window_s=5, slice_s=0.5, publish_s=1)
    assert s.take() == []
    s.add(at(RS, base + W - 1, 1))
    s.add(at(RS, base + W, 2))  # the next window, though a microsecond later
    first, second = s.take()  # no wait for a window to end: what was read goes out at the next take
    assert (first.window_start_us, first.window_us, first.slice_us) == (base, W, 500_000)
    assert first.part_us == 1_000_000
    assert (second.window_start_us, second.count, second.sn_first) == (base + W, 1, 2)
    assert s.take() == [] and s.open_keys == 0
    s.add(at(RS, base + W - 10, 3, exec_time_us=90.0))  # read after its window's first part: another part
    [late] = s.take()
    assert (late.window_start_us, late.count, late.sn_first, late.sn_last, late.late) == (base, 1, 3, 3, 0)
    assert (late.exec_min_us, late.exec_max_us, late.exec_sum_us) == (90.0, 90.0, 90.0)
    assert late.last_dump_ts_us == base + W - 10
    assert late.slice_index == [9] and late.slice_count == [1]
    assert (late.slice_sn_lo, late.slice_sn_hi, late.slice_sn_lo_ts_us) == ([3], [3], [base + W - 10])
    assert (s.records, s.parts) == (3, 3)


def test_a_window_younger_than_the_publication_period_waits_for_the_next_take() -> None:
    base = RS.dump_ts_us - RS.dump_ts_us % W
    s = Summarizer(window_s=5, slice_s=0.5, publish_s=2.5)
    s.add(at(RS, base - 10, 1))  # the previous window's tail
    s.add(at(RS, base + 100, 2))  # the new window's first record
    [tail] = s.take(base + 250_000)  # just past the boundary: the tail goes, the young window stays
    assert (tail.window_start_us, tail.sn_first) == (base - W, 1)
    assert s.open_keys == 1
    s.add(at(RS, base + 2_000_000, 3))
    [head] = s.take(base + 2_750_000)  # one publication period on: the window's records so far in one part
    assert (head.window_start_us, head.count, head.sn_first, head.sn_last) == (base, 2, 2, 3)
    assert s.open_keys == 0 and s.parts == 2
    s.add(at(RS, base + 3_000_000, 4))
    assert [x.sn_first for x in s.take()] == [4]  # no clock (the agent closing): everything goes


def test_a_window_ahead_of_the_clock_is_not_held() -> None:
    base = RS.dump_ts_us - RS.dump_ts_us % W
    ahead = Summarizer(window_s=5, slice_s=0.5, publish_s=2.5)
    ahead.add(at(RS, base + 100, 1))
    assert len(ahead.take(base - 60_000_000)) == 1  # a clock a minute behind its dumps' holds nothing back


@pytest.mark.parametrize("publish_s", [5.0, 10.0])
def test_periods_as_long_as_windows_or_longer_send_each_window_once_it_ended(publish_s: float) -> None:
    base = RS.dump_ts_us - RS.dump_ts_us % W
    s = Summarizer(window_s=5, slice_s=0.5, publish_s=publish_s)
    s.add(at(RS, base + 100, 1))
    assert s.take(base + 250_000) == []  # the window has just begun
    s.add(at(RS, base + 4_000_000, 2))
    s.add(at(RS, base + W + 100, 3))  # the next one has just begun
    [whole] = s.take(base + W + 250_000)
    assert (whole.window_start_us, whole.count) == (base, 2) and s.open_keys == 1


@pytest.mark.parametrize("phase_us", [0, 130_000, 1_250_000, 2_400_000, 4_999_999])
def test_takes_at_any_phase_send_each_window_in_window_over_period_parts(phase_us: int) -> None:
    """Whatever the agent's phase against the window grid: a take every 2.5 s, at most 2 parts per window and key
    (without the hold, 3 at most phases), every record in exactly one of them."""
    base = RS.dump_ts_us - RS.dump_ts_us % W
    s, parts = Summarizer(window_s=5, slice_s=0.5, publish_s=2.5), []
    due = base + phase_us
    for sn, ts in enumerate(range(base, base + 12 * W, 70_000)):  # read as dumped, every 70 ms
        while ts > due:
            parts += s.take(due)
            due += 2_500_000
        s.add(at(RS, ts, sn))
    parts += s.take()
    assert sum(x.count for x in parts) == s.records
    per_window = Counter(x.window_start_us for x in parts)
    inner = sorted(per_window)[1:-1]  # the first and last windows are cut by the run's start and end
    assert inner and all(per_window[w] <= 2 for w in inner)  # 1 where a take falls at a window's very end


def test_a_starved_reader_s_records_are_all_summarized_however_late_it_reads_them() -> None:
    """A host that reads its dumps 6 s behind (or an old backlog): whole windows with a fixed grace counted every
    window's tail late (and its processes went unjudged); parts carry whatever was read, none late."""
    base = RS.dump_ts_us - RS.dump_ts_us % W
    s, parts = Summarizer(), []
    # records every 0.5 s, read however long after their dump (the summarizer has no clock), a take every second
    for step in range(0, 8 * W, W // 10):
        s.add(at(RS, base + step, step))
        if step % 1_000_000 == 0:
            parts += s.take()
    parts += s.take()
    assert sum(x.count for x in parts) == s.records == 80 and all(x.late == 0 for x in parts)


def test_sizes_share_a_power_of_two_bucket_and_add_up_exactly() -> None:
    base = RS.dump_ts_us - RS.dump_ts_us % W
    s = Summarizer()
    s.add(at(RS, base + 1, 1))  # 65536 bytes
    s.add(at(RS, base + 2, 2, msg_size_bytes=40_000))
    s.add(at(RS, base + 3, 3, msg_size_bytes=65_537))
    out = sorted(s.take(), key=lambda x: x.size_bucket)
    assert [(x.size_bucket, x.count, x.bytes) for x in out] == [(65536, 2, 105_536), (131072, 1, 65_537)]


def test_statistics_of_the_fixtures_and_bandwidth_recomputed() -> None:
    base = AR.dump_ts_us - AR.dump_ts_us % W
    s = Summarizer()
    times = [61974.0, 60000.0, 65000.0, 70000.0]
    for i, t in enumerate(times):
        s.add(at(AR, base + i * 1_000_000, 1407 + i, exec_time_us=t))
    s.add(at(AR, base + 4_500_000, 1411, exec_time_us=None))  # untimed: counted, not timed
    [x] = s.take()
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
    assert (s.overflow, len(s.take())) == (1, 2)
    s.add(at(RS, base + 2, 2, rank=2))  # a take frees them
    assert (s.overflow, len(s.take())) == (1, 1)


@pytest.mark.parametrize("capture", ["ring", "sampled"])
def test_engine_sees_the_same_aggregates_from_summaries_as_from_raw_records(capture: str) -> None:
    spec = JobSpec(nodes=4, gpus_per_node=2, steps=120, capture=capture, faults=[Fault("gpu", 1, 1, 1.5)])  # type: ignore[arg-type]
    timed, _ = run_job(spec)
    records = sorted((parse_op(x) for lines in timed.values() for _, x in lines), key=lambda r: r.dump_ts_us)
    raw = StragglerEngine().extend(records)
    published = summarize(records, publish_s=1.0)
    assert all(isinstance(x, InspectorSummaryRecord) for _, x in published)
    windows = {x.window_start_us for _, x in published}
    assert len(published) > 3 * len(windows)  # a window comes in several parts
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
    # a part is published within a second of its records' dump time, never before it
    assert all(0 <= ts - x.last_dump_ts_us <= 1_000_000 for ts, x in published)
    assert all(ts < x.window_start_us + W + 1_000_000 for ts, x in published)  # no wait for the window's end


def test_parts_are_schema_version_2_and_an_older_agent_s_whole_windows_still_decode() -> None:
    base = RS.dump_ts_us - RS.dump_ts_us % W
    s = Summarizer()
    s.add(at(RS, base + 1, 1))
    s.add(at(RS, base + 2, 2, rank=1))
    parts = s.take()
    env = Envelope(type=event_type("inspector_summary"), cluster="c", node="n", agent="a", seq=1, ts=1, ttl=11.0,
                   records=parts)  # fmt: skip
    data = msgpack.unpackb(encode_event(env))
    assert data["record_version"] == InspectorSummaryRecord.schema_version == 2
    assert data["constants"]["part_us"] == 1_000_000  # one value per batch: a few bytes
    # what an agent before parts sent: version 1, no part_us, the window once (and maybe late records)
    data["record_version"] = 1
    del data["constants"]["part_us"]
    data["constants"]["late"] = 4
    older = decode_event(msgpack.packb(data)).records
    assert [(x.rank, x.part_us, x.late, x.count) for x in older] == [(31, 0, 4, 1), (1, 0, 4, 1)]
    # and an aggregator of the previous version refuses this version's batches with a clear reason, no crash
    data = msgpack.unpackb(encode_event(env))
    data["record_version"] = 3
    with pytest.raises(DecodeError) as info:
        decode_event(msgpack.packb(data))
    assert info.value.reason == "unsupported_version"


def test_operations_and_wire_records_summarize_alike() -> None:
    """The collector folds light operations, the simulator and the tests wire records: the summaries are the same."""
    spec = JobSpec(nodes=2, gpus_per_node=2, steps=40, capture="ring", faults=[Fault("gpu", 1, 1, 1.5)])
    timed, _ = run_job(spec)
    lines = sorted((ts, x) for lines in timed.values() for ts, x in lines)
    from_ops, from_records = Summarizer(), Summarizer()
    for _, x in lines:
        from_ops.add(parse_op(x))
        from_records.add(parse_op(x))
    ops, records = from_ops.take(), from_records.take()
    assert len(ops) > 10 and [to_builtins(s) for s in ops] == [to_builtins(s) for s in records]


def test_an_open_window_holds_its_exec_times_as_plain_doubles() -> None:
    """A part holds a backlog pass's records until the next take: what each record leaves in it is bounded (no object
    per value)."""
    base = RS.dump_ts_us - RS.dump_ts_us % W
    template, count = to_builtins(RS), 20_000
    s = Summarizer()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(count):  # each operation is dropped once folded, as the collector drops a pass's
        s.add(InspectorRecord(**template | {"dump_ts_us": base + i, "sn": i, "exec_time_us": 100.0 + i}))
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert held / count < 16  # 8 bytes a double and the array's growth; a list of floats holds about 32
    [summary] = s.take()
    assert (summary.count, summary.exec_min_us, summary.exec_max_us) == (20_000, 100.0, 20_099.0)
