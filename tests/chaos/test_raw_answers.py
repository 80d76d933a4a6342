"""Hostile or broken answers to the aggregator's raw-record requests (a real aggregator and nats-server; the "agents"
are raw NATS responders saying whatever they like): each is recorded as missing evidence with its reason, only records
of the comms and window asked reach history, and a paging loop ends."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import nats
import nats.aio.msg
import pytest

from ranksight.aggregator.raw_evidence import EvidenceAsk
from ranksight.formats.inspector import parse_op
from ranksight.schemas.structs import to_builtins
from ranksight.schemas.subjects import Subjects
from ranksight.settings import Settings
from ranksight.simulate.inspector import JobSpec, simulate
from tests.support import aggregator

pytestmark = pytest.mark.chaos

LINES = [line for lines in simulate(JobSpec(nodes=2, gpus_per_node=1, steps=20)).values() for line in lines]
RECORDS = [{k: v for k, v in to_builtins(parse_op(line)).items() if v is not None} for line in LINES]
COMM = str(RECORDS[0]["comm_id"])
TIMES = [int(str(r["dump_ts_us"])) for r in RECORDS if r["comm_id"] == COMM]
ASK = EvidenceAsk("test", (COMM,), ("evil",), min(TIMES), max(TIMES))
Answer = Callable[[dict[str, Any]], bytes]


def page(records: list[dict[str, Any]], next_: dict[str, Any] | None = None) -> bytes:
    return json.dumps({"node": "evil", "incarnation": "i", "records": records, "next": next_}).encode()


HOSTILE: dict[str, tuple[Answer, str]] = {
    "not json": (lambda req: b"\xff{", "bad answer"),
    "not a page": (lambda req: b'{"records": 5}', "bad answer"),
    "an integer past BIGINT": (lambda req: page([{**RECORDS[0], "sn": 2**64}]), "bad answer"),
    "a NaN": (lambda req: page([{**RECORDS[0], "exec_time_us": float("nan")}]), "bad answer"),
    "a path for a cursor": (lambda req: page([], {"file": "../../etc/passwd", "offset": 0}), "bad answer"),
    "the same page forever": (lambda req: page([], {"file": "a.log", "offset": 7}), "does not come after"),
    "a refusal": (lambda req: b"", "the agent refused"),
}


async def serve(settings: Settings, answer: Answer) -> nats.NATS:
    nc = await nats.connect(settings.nats.url)

    async def respond(msg: nats.aio.msg.Msg) -> None:
        body = json.loads(msg.data)
        data = answer(body)
        headers = {"Nats-Service-Error": "400 no", "Nats-Service-Error-Code": "400"} if not data else None
        await msg.respond(data) if headers is None else await nc.publish(msg.reply, b"", headers=headers)

    await nc.subscribe(Subjects(settings.subject_prefix).agent("test", "evil", "inspector_raw"), cb=respond)
    await nc.flush()
    return nc


async def collect(settings: Settings, answer: Answer) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The evidence an aggregator collects for :data:`ASK` from an agent answering ``answer``, and the inspector
    rows it wrote."""
    async with aggregator(settings) as agg:
        nc = await serve(settings, answer)
        try:
            evidence = await agg.raw_evidence.collect(agg, ASK)
        finally:
            await nc.close()
        return evidence, list(agg.store.rows("SELECT comm_id, dump_ts_us, node, seq FROM inspector"))


@pytest.mark.parametrize("case", list(HOSTILE))
async def test_a_hostile_answer_is_missing_evidence_with_its_reason(settings: Settings, case: str) -> None:
    answer, reason = HOSTILE[case]
    evidence, rows = await collect(settings, answer)
    assert evidence["raw_complete"] is False and evidence["raw_records"] == 0 and rows == []
    [missing] = evidence["raw_missing"]
    assert missing["node"] == "evil" and reason in missing["reason"], missing


async def test_only_records_of_the_comms_and_window_asked_reach_history_and_paging_ends(
    settings: Settings,
) -> None:
    settings.aggregator.raw_evidence.max_pages_per_node = 5
    mine = [r for r in RECORDS if r["comm_id"] == COMM]
    others = [r for r in RECORDS if r["comm_id"] != COMM][:10]
    late = {**mine[0], "dump_ts_us": ASK.to_us + 1}
    pages = iter(range(10**6))

    def answer(req: dict[str, Any]) -> bytes:  # every page advances, never ends
        n = next(pages)
        return page([mine[n % len(mine)], *others, late], {"file": "a.log", "offset": n + 1})

    evidence, rows = await collect(settings, answer)
    assert evidence["raw_records"] == 5 and evidence["raw_inserted"] == 5
    assert "max_pages_per_node" in evidence["raw_missing"][0]["reason"]
    assert len(rows) == 5 and {(r["comm_id"], r["node"], r["seq"]) for r in rows} == {(COMM, "evil", 0)}
    assert all(ASK.from_us <= r["dump_ts_us"] <= ASK.to_us for r in rows)


async def test_a_finding_takes_at_most_max_records_per_finding(settings: Settings) -> None:
    settings.aggregator.raw_evidence.max_records_per_finding = 7
    settings.aggregator.raw_evidence.page_records = 3
    mine = [r for r in RECORDS if r["comm_id"] == COMM]
    asked: list[int] = []

    def answer(req: dict[str, Any]) -> bytes:  # a generous agent: more than asked, and more to come
        asked.append(req["max_records"])
        return page(mine[:10], {"file": "a.log", "offset": len(asked)})

    evidence, _ = await collect(settings, answer)
    assert asked == [3, 3, 1] and evidence["raw_records"] == 7 and evidence["raw_complete"] is False
    assert "max_records_per_finding (7)" in evidence["raw_missing"][0]["reason"]
