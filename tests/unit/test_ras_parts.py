"""A RAS status of any size is published in parts under max_payload and judged whole: a 2,048-node x 8-GPU job
(16,384 ranks) rendered by the fake RAS server as NCCL's JSON reply, parsed by the agent's parser, split, encoded and
decoded by the real codec, put back together by the job tracker, where the hang rule names the rank that stays
behind."""

from __future__ import annotations

import random
import types
from typing import Any

import msgspec
import pytest
from msgspec.structs import replace

from ranksight.agent.collectors.ras.parse_json import parse_status_json
from ranksight.agent.collectors.ras.parts import split_status
from ranksight.aggregator.analysis.ras import LAG_POLLS, CommHangRule
from ranksight.aggregator.state import NS, LiveState
from ranksight.schemas.codec import decode_event, encode_event
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import RasRecord
from ranksight.schemas.wire import event_type
from ranksight.simulate.cluster import ras_status_json
from ranksight.simulate.inspector import JobSpec, comms

MAX_PAYLOAD = 1 << 20  # nats-server's default
T0 = 1_800_000_000 * NS


@pytest.fixture(scope="module")
def big_status() -> RasRecord:
    spec = JobSpec(nodes=2048, gpus_per_node=8, pp=2)
    phases = comms(spec)
    job: Any = types.SimpleNamespace(
        spec=spec, phases=phases, counts={c.comm_id: 5 for p in phases for c in p}
    )
    status = parse_status_json(
        ras_status_json(job, set(), behind=frozenset({(7, 3)}))
    )  # node 7's GPU 3: behind
    return RasRecord(job_id="big", endpoint="localhost:28028", **msgspec.structs.asdict(status))


def _messages(record: RasRecord, poll_id: int, seq0: int) -> list[bytes]:
    parts = split_status(record, MAX_PAYLOAD // 2, poll_id)
    return [encode_event(Envelope(type=event_type("ras"), cluster="c", node="node0000", agent="inc", seq=seq0 + i,
                                  ts=T0, ttl=30.0, records=[part]))
            for i, part in enumerate(parts)]  # fmt: skip


def test_a_16k_rank_status_goes_out_in_parts_under_max_payload_and_comes_back_whole(
    big_status: RasRecord,
) -> None:
    whole = encode_event(Envelope(type=event_type("ras"), cluster="c", node="node0000", agent="inc", seq=1, ts=T0,
                                  ttl=30.0, records=[big_status]))  # fmt: skip
    assert len(whole) > MAX_PAYLOAD  # one record: never publishable
    messages = _messages(big_status, poll_id=1, seq0=1)
    assert len(messages) > 2 and max(len(m) for m in messages) <= MAX_PAYLOAD
    envelopes = [decode_event(m) for m in messages]
    random.Random(0).shuffle(envelopes)  # parts may arrive in any order
    state = LiveState()
    for i, env in enumerate(envelopes):
        assert not state.jobs.jobs  # judged only whole
        state.observe(env, T0 + i)
    [job] = state.jobs.jobs.values()
    assert len(job.comms) == len(big_status.communicators) == len({c.hash for c in big_status.communicators})
    assert job.ranks == big_status.gpus == 16384 and job.polls == 1


def test_the_hang_rule_names_the_rank_behind_at_16k_ranks(big_status: RasRecord) -> None:
    state, rule = LiveState(), CommHangRule()
    fired = []
    for poll in range(1, LAG_POLLS + 2):
        for message in _messages(big_status, poll_id=poll, seq0=poll * 100):
            state.observe(decode_event(message), T0 + poll * 10 * NS)
        state.tick(T0 + poll * 10 * NS)
        fired.append(list(rule.evaluate(state, T0 + poll * 10 * NS)))
    assert not fired[0]  # one poll proves nothing
    [hang] = fired[-1]
    assert "never entered it" in hang.summary and "node007 pid 40682" in hang.summary  # node 7, GPU 3


def test_an_unfinished_poll_is_abandoned_for_a_newer_one(big_status: RasRecord) -> None:
    state = LiveState()
    first = [decode_event(m) for m in _messages(big_status, poll_id=1, seq0=1)]
    for env in first[:-1]:  # its last part never comes
        state.observe(env, T0)
    for env in (decode_event(m) for m in _messages(big_status, poll_id=2, seq0=100)):
        state.observe(env, T0 + NS)
    state.observe(first[-1], T0 + 2 * NS)  # late: the older poll was given up
    [job] = state.jobs.jobs.values()
    assert job.polls == 1 and state.jobs.parts.abandoned == 1 and not state.jobs.parts.polls


def test_a_status_that_fits_is_one_record() -> None:
    small = RasRecord(format="json", health="ok", endpoint="e")
    [only] = split_status(small, MAX_PAYLOAD // 2, 7)
    assert only == replace(small, **{"poll_id": 7}) and only.parts == 1


def test_a_part_numbered_outside_its_poll_is_never_assembled() -> None:
    state = LiveState()
    bad = RasRecord(format="json", health="ok", endpoint="e", job_id="j", poll_id=1, part=3, parts=2)
    state.observe(Envelope(type=event_type("ras"), cluster="c", node="n", agent="a", seq=1, ts=T0, ttl=30.0,
                           records=[bad]), T0)  # fmt: skip
    assert not state.jobs.jobs and state.jobs.parts.malformed == 1
