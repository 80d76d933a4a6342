"""Chaos, property-based: every record kind with extreme but schema-valid values goes through admission (decode, admit,
commit), live state, every rule and replay without an exception.

The values are derived from the record models themselves: each number is drawn from its declared range (the field's own
``ge``/``le``, else what the store holds), with the bounds, zero and the values just inside them most likely; so a
model whose declared range lets through a value that later arithmetic cannot take (``1e308 * 1e9``) fails here. Strings
are short and hostile; lists and maps hold a few entries.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from ranksight.agent.collectors.app_parse import AppMessageError, Timeouts, parse_message
from ranksight.aggregator.alerts import AlertEngine
from ranksight.aggregator.analysis.rules import default_rules
from ranksight.aggregator.api.endpoints import ENDPOINTS
from ranksight.aggregator.ingest.pipeline import Incoming
from ranksight.aggregator.runtime import Aggregator
from ranksight.aggregator.state import NS, LiveState
from ranksight.aggregator.store import Store
from ranksight.aggregator.timefmt import naive_utc
from ranksight.schemas.records import RECORD_KINDS
from ranksight.schemas.records.quantities import MAX_SECONDS
from ranksight.schemas.subjects import Subjects
from ranksight.schemas.wire import event_type
from tests.conftest import fast_settings
from tests.model_values import record

pytestmark = pytest.mark.chaos

T0 = 1_800_000_000 * NS
CLUSTER = "c"
_counter = itertools.count(1)


class Pipeline:
    """One history database for the whole run: each example writes its messages under a new agent incarnation."""

    def __init__(self, path: Path) -> None:
        self.subjects = Subjects()
        self.store = Store(path, self.subjects)
        self.store.open()
        # the query API over the live state judged (never started: its endpoints read what they are handed)
        self.agg = Aggregator(fast_settings(path.parent, nats={"url": "nats://127.0.0.1:1"}))
        self.agg.store.shutdown()
        self.agg.store = self.store
        self.loop = asyncio.new_event_loop()  # one loop: what the endpoints keep is bound to it

    def run(self, kind: str, batches: list[list[dict[str, Any]]], ttl: float) -> None:
        incarnation = f"inc{next(_counter)}"
        recv = T0 + next(_counter) * NS
        messages = []
        for seq, records in enumerate(batches, 1):
            env = {"type": event_type(kind), "cluster": CLUSTER, "node": "n1", "agent": incarnation, "seq": seq,
                   "ts": recv, "ttl": ttl, "records": records}  # fmt: skip
            messages.append(
                Incoming(self.subjects.event(CLUSTER, "n1", kind), msgpack.packb(env), recv + seq)
            )
        result = self.store.commit_batch(messages)
        assert result.dead_letters == 0 and len(result.accepted) == len(batches)  # valid values are all taken
        live = LiveState()
        self.judge(live, result.accepted, recv, ttl)
        replayed = LiveState()
        self.judge(replayed, self.store.replay(replayed.kinds, recv - NS), recv, ttl)

    def judge(self, state: LiveState, accepted: list[Any], recv: int, ttl: float) -> None:
        rules, engine = default_rules(), AlertEngine()
        for env, recv_ns in accepted:
            state.observe(env, recv_ns)
        for i, now in enumerate(_moments(recv, ttl)):
            state.tick(now)
            engine.evaluate(rules, state, now)
            if i == 0:  # while the facts are live
                self.loop.run_until_complete(self._answers(state, engine))
        state.stragglers.close()

    async def _answers(self, state: LiveState, engine: AlertEngine) -> None:
        """Every query endpoint that reads live state answers, in JSON, what it was handed."""
        self.agg.state, self.agg.engine = state, engine
        for name in LIVE_ENDPOINTS:
            response = await ENDPOINTS[name].call(self.agg, {})
            assert response.ok, (name, response.error)
            response.model_dump_json()


LIVE_ENDPOINTS = ["status", "nodes", "alerts", "jobs", "comms", "gpus", "nics", "links", "gpu_probes", "stragglers",
                  "cluster_map"]  # fmt: skip


def _moments(recv: int, ttl: float) -> Iterator[int]:
    """When to tick: at receipt, as the facts expire, and long after (every fact expired, every deadline past)."""
    yield recv + NS
    yield recv + int(ttl * NS) + NS
    yield recv + 3600 * NS
    yield recv + 30 * 86400 * NS


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    pipe = Pipeline(tmp_path_factory.mktemp("extreme") / "history.duckdb")
    yield pipe
    pipe.loop.close()
    pipe.store.close_connection()
    pipe.store.shutdown()


class _Errors(logging.Handler):
    """Errors logged by any stage: a stage that catches its own failure (the straggler engine keeps its previous
    findings) must not have had one."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(self.format(record))


@pytest.mark.parametrize("kind", sorted(RECORD_KINDS))
def test_extreme_values_of_every_kind_pass_every_stage(pipeline: Pipeline, kind: str) -> None:
    model = RECORD_KINDS[kind].model
    batches = st.lists(st.lists(record(model), min_size=max(1, model.min_records), max_size=3), min_size=1,
                       max_size=3)  # fmt: skip
    ttl = st.sampled_from([0.0, 5e-324, 1.0, 7 * 86400.0]) | st.floats(0, 7 * 86400)

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(batches, ttl)
    def check(batches: list[list[dict[str, Any]]], ttl: float) -> None:
        note(f"{kind} batches {batches!r}, ttl {ttl!r}")
        errors = _Errors()
        logging.getLogger("ranksight").addHandler(errors)
        try:
            pipeline.run(kind, batches, ttl)
        finally:
            logging.getLogger("ranksight").removeHandler(errors)
        assert not errors.messages, errors.messages

    check()


def test_a_start_with_an_endless_initial_timeout_is_dead_lettered(pipeline: Pipeline) -> None:
    """The finding: ``client.start(initial_timeout_s=1e308)`` passed the edge, then ``int(1e308 * 1e9)`` raised in the
    rules tick and in every restart's replay. Now the agent refuses the packet, and an envelope carrying it anyway (a
    rogue agent) is dead-lettered; what is ingested ticks and replays."""
    packet = msgpack.packb({"v": 1, "t": "start", "pid": 7, "n": 1, "ts": T0, "initial_timeout_s": 1e308})
    with pytest.raises(AppMessageError, match="initial_timeout_s"):
        parse_message(packet, Timeouts(heartbeat_s=60, initial_s=600, section_s=600))
    record = {"event": "start", "pid": 7, "n": 1, "client_ts": T0, "initial_timeout_s": 1e308}
    env = {"type": event_type("app"), "cluster": CLUSTER, "node": "n1", "agent": "rogue", "seq": 1, "ts": T0,
           "ttl": 60.0, "records": [record]}  # fmt: skip
    result = pipeline.store.commit_batch([Incoming(pipeline.subjects.event(CLUSTER, "n1", "app"),
                                                   msgpack.packb(env), T0)])  # fmt: skip
    assert (result.dead_letters, result.accepted) == (1, [])
    ((reason, detail),) = pipeline.store.con.execute(
        "SELECT reason, detail FROM dead_letters WHERE subject LIKE '%.app' ORDER BY recv_ts DESC LIMIT 1"
    ).fetchall()
    assert reason == "bad_record" and "initial_timeout_s" in detail
    # the largest timeout that is accepted still makes a deadline the rules can compute, live and replayed
    pipeline.run("app", [[{**record, "initial_timeout_s": float(MAX_SECONDS)}]], 60.0)


def test_a_pill_already_in_history_is_skipped_by_replay(pipeline: Pipeline) -> None:
    """A history written before the fix holds the start with the endless timeout: a restart replays around it (the
    row is checked like incoming data, and counted), where before it died on it at every start."""
    recv = T0 + 10**6 * NS
    row: dict[str, Any] = {"cluster": CLUSTER, "node": "n1", "agent": "old-release", "seq": 1, "ts": recv, "recv_ts": recv,
           "ttl": 60.0, "event": "start", "pid": 7, "n": 1, "client_ts": T0, "initial_timeout_s": 1e308}  # fmt: skip
    names = ", ".join(row)
    pipeline.store.con.execute(
        f"INSERT INTO app ({names}) SELECT {', '.join('?' for _ in row)}",
        [naive_utc(v) if k in ("ts", "recv_ts") else v for k, v in row.items()],
    )
    skipped = pipeline.store.replay_skipped
    replayed = pipeline.store.replay({"app"}, recv - NS)
    assert [env for env, _ in replayed if env.agent == "old-release"] == []
    assert pipeline.store.replay_skipped == skipped + 1
    pipeline.judge(LiveState(), replayed, recv, 60.0)
