"""What a finding asks raw records of (comms, agents, window), and how fetched records sit in history: deduplicated by
their identity, never replayed into live state."""

from __future__ import annotations

from pathlib import Path

import pytest
from msgspec.structs import replace

from ranksight.aggregator.component_settings import RawEvidenceSettings
from ranksight.aggregator.ingest.pipeline import Incoming
from ranksight.aggregator.models.hangs import HangFinder
from ranksight.aggregator.raw_evidence import plan
from ranksight.aggregator.store import Store
from ranksight.aggregator.timefmt import iso
from ranksight.formats.inspector import parse_op
from ranksight.schemas.alerts import Alert
from ranksight.schemas.codec import encode_event
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import InspectorRecord
from ranksight.schemas.subjects import Subjects
from ranksight.schemas.wire import event_type
from ranksight.simulate.inspector import JobSpec, simulate

SPEC = JobSpec(nodes=4, gpus_per_node=2, layout="moe", steps=20)
FIRED_NS = 1_800_000_000 * 10**9


@pytest.fixture(scope="module")
def records() -> list[InspectorRecord]:
    return [parse_op(line) for lines in simulate(SPEC).values() for line in lines]


@pytest.fixture(scope="module")
def finder(records: list[InspectorRecord]) -> HangFinder:
    finder = HangFinder(4.0)
    for rec in records:
        finder.add(rec, 1, f"agent-{rec.hostname}")  # each host's files served by its own agent
    return finder


def alert(rule: str, evidence: dict[str, object], node: str | None = None) -> Alert:
    return Alert(rule=rule, severity="critical", fingerprint="f", state="firing", cluster="c", node=node,
                 summary="s", evidence=evidence, started_at=iso(FIRED_NS) or "", updated_at="")  # fmt: skip


def members(records: list[InspectorRecord], comms: set[str]) -> set[str]:
    return {f"agent-{r.hostname}" for r in records if r.comm_id in comms}


def test_a_communication_finding_asks_every_agent_of_its_slow_comms_its_own_first(
    records: list[InspectorRecord], finder: HangFinder
) -> None:
    name, cid = min((r.comm_name, r.comm_id) for r in records  # a cross-node comm with a rank on node002
                    if r.hostname == "node002" and r.comm_name and r.comm_name.startswith("ep"))  # fmt: skip
    ev = {"hostname": "node002", "pid": None, "kind": "communication", "slow_comms": [{"comm": name}]}
    ask = plan(alert("straggler", ev, "node002"), finder, RawEvidenceSettings(lookback_s=10, lookahead_s=2))
    assert ask.comms == (cid,)
    assert set(ask.nodes) == members(records, {cid}) and len(ask.nodes) > 1
    assert ask.nodes[0] == "agent-node002"
    assert (ask.from_us, ask.to_us) == (FIRED_NS // 1000 - 10_000_000, FIRED_NS // 1000 + 2_000_000)
    assert ask.not_asked == ()


def test_a_compute_finding_asks_for_every_comm_of_its_process_or_of_its_node(
    records: list[InspectorRecord], finder: HangFinder
) -> None:
    pid = SPEC.pid(1, 1)
    ev = {"hostname": "node001", "pid": pid, "kind": "compute", "comm": "x"}
    ask = plan(alert("straggler", ev, "node001"), finder, RawEvidenceSettings())
    assert set(ask.comms) == {r.comm_id for r in records if r.pid == pid} and ask.nodes[0] == "agent-node001"
    node_wide = plan(alert("straggler", {**ev, "pid": None}, "node001"), finder, RawEvidenceSettings())
    assert set(node_wide.comms) == {r.comm_id for r in records if r.hostname == "node001"} > set(ask.comms)


def test_bounds_and_unknown_membership_are_said_in_the_evidence(
    records: list[InspectorRecord], finder: HangFinder
) -> None:
    cid = next(r.comm_id for r in records if r.comm_name == "dp-g0")  # every node
    lagging = {"lagging_ranks": [{"hostname": "node003", "comm_id": cid, "pid": 1, "rank": 3}]}
    ask = plan(alert("collective_hang", lagging), finder, RawEvidenceSettings(max_nodes_per_finding=2))
    assert ask.comms == (cid,) and ask.nodes[0] == "agent-node003" and len(ask.nodes) == 2
    assert len(ask.not_asked) == SPEC.nodes - 2
    assert all("max_nodes_per_finding" in m["reason"] for m in ask.not_asked)
    unknown = plan(alert("collective_hang", lagging), None, RawEvidenceSettings())
    assert unknown.nodes == () and "not known" in unknown.not_asked[0]["reason"]


def test_fetched_records_are_written_once_and_never_replayed(
    tmp_path: Path, records: list[InspectorRecord]
) -> None:
    store = Store(tmp_path / "db.duckdb")
    store.open()
    now = FIRED_NS
    streamed = records[:50]
    env = Envelope(type=event_type("inspector"), cluster="c", node="n", agent="a1", seq=1, ts=now, ttl=60,
                   records=streamed)  # fmt: skip
    store.commit_batch([Incoming(Subjects().event("c", "n", "inspector"), encode_event(env), now)])
    parsed = records[:120]  # parsed records are wire records already
    assert store.insert_raw_inspector("c", "n", "a1", parsed, now) == 70  # the streamed 50 were there
    assert store.insert_raw_inspector("c", "n", "a1", parsed + parsed[:5], now) == 0  # twice: nothing new
    assert store.insert_raw_inspector("other", "n", "a1", parsed[:3], now) == 3  # identity is per cluster
    [count] = store.rows("SELECT count(*) AS n FROM inspector WHERE cluster = 'c'")
    assert count["n"] == 120
    replayed = store.replay({"inspector"}, now - 10**9)
    assert [(e.seq, len(e.records)) for e, _ in replayed] == [(1, 50)]  # the message alone, as live state saw
    # a message bringing fetched records after all (a sampled raw record in flight): its rows replace their twins
    late = Envelope(type=event_type("inspector"), cluster="c", node="n", agent="a1", seq=2, ts=now, ttl=60,
                    records=records[100:130])  # fmt: skip
    store.commit_batch([Incoming(Subjects().event("c", "n", "inspector"), encode_event(late), now)])
    rows = list(
        store.rows("SELECT seq, count(*) AS n FROM inspector WHERE cluster = 'c' GROUP BY seq ORDER BY seq")
    )
    assert rows == [{"seq": 0, "n": 50}, {"seq": 1, "n": 50}, {"seq": 2, "n": 30}]  # 70 fetched, 20 came
    store.close_connection()  # a restart knows fetched rows are there
    store.open()
    store.commit_batch([Incoming(Subjects().event("c", "n", "inspector"), encode_event(
        replace(late, **{"seq": 3, "records": records[60:70]})), now)])  # fmt: skip
    [fetched] = store.rows("SELECT count(*) AS n FROM inspector WHERE seq = 0 AND cluster = 'c'")
    assert fetched["n"] == 40
    store.close_connection()
    store.shutdown()
