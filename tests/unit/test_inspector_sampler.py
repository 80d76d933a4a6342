"""Rate-limited raw Inspector records: the rate bound holds, communicators share it fairly over time, and each one's
share is spread over its records."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from msgspec.structs import replace

from ranksight.agent.collectors.inspector.sampler import RawSampler
from ranksight.formats.inspector import parse_op
from ranksight.schemas.records import InspectorRecord

FIXTURE = (
    Path(__file__).parents[2]
    / "fixtures"
    / "inspector"
    / "nccl_exporter_readme_v4.0_reducescatter_rank31of32_4nodes.json"
)
REC = parse_op(json.dumps(json.loads(FIXTURE.read_text())))


def batch(per_comm: dict[str, int], sn0: int = 0) -> list[InspectorRecord]:
    return [
        replace(REC, **{"comm_id": comm, "sn": sn0 + i}) for comm, n in per_comm.items() for i in range(n)
    ]


def test_the_rate_bounds_what_is_published_after_one_second_of_burst() -> None:
    sampler = RawSampler(100.0)
    kept = sum(
        len(sampler.take(batch({"a": 500}), t / 10)) for t in range(101)
    )  # 10 s, 5000 records/s offered
    assert 100 + 1000 - 10 <= kept <= 100 + 1000
    assert sampler.kept == kept and sampler.skipped == 101 * 500 - kept


def test_a_zero_rate_publishes_nothing() -> None:
    sampler = RawSampler(0.0)
    assert [sampler.take(batch({"a": 10}), t) for t in range(3)] == [[], [], []]


def test_communicators_share_fairly_over_time_even_one_record_a_batch() -> None:
    sampler = RawSampler(10.0)
    sampler.take(batch({"busy": 50}), 0.0)  # the burst
    got: Counter[str] = Counter()
    for t in range(1, 301):  # one token per batch: the least served communicator gets it
        got.update(r.comm_id for r in sampler.take(batch({"busy": 50, "quiet1": 5, "quiet2": 5}), t * 0.1))
    assert max(got.values()) - min(got.values()) <= 1 and sum(got.values()) == 300


def test_a_small_communicator_keeps_all_of_its_records_and_shares_are_spread() -> None:
    sampler = RawSampler(30.0)
    picked = sampler.take(batch({"big": 1000, "small": 4}), 0.0)
    per = Counter(r.comm_id for r in picked)
    assert per == {"big": 26, "small": 4}
    sns = [r.sn for r in picked if r.comm_id == "big"]
    assert sns[0] == 0 and sns[-1] > 900  # spread over the batch, not its first records
