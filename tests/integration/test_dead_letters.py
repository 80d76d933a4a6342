"""Malformed messages on an event subject are counted and dead-lettered with a reason; ingest goes on."""

from __future__ import annotations

import time

import duckdb
import msgpack
import nats

from ranksight.schemas.subjects import Subjects
from ranksight.schemas.wire import MAX_RECORDS
from ranksight.settings import Settings
from tests.loadgen import SyntheticAgent
from tests.support import aggregator, wait_for


def _envelope(**overrides: object) -> bytes:
    env = {"type": "ranksight.ev.v1.gpu", "cluster": "test", "node": "bad", "agent": "bad-agent", "seq": 1,
           "ts": time.time_ns(), "ttl": 10.0, "records": [{"index": 0}]}  # fmt: skip
    env.update(overrides)
    return msgpack.packb(env)


async def test_bad_messages_are_dead_lettered_and_ingest_goes_on(settings: Settings) -> None:
    subjects = Subjects(settings.subject_prefix)
    subject = subjects.event("test", "bad", "gpu")
    bad = {
        "not_msgpack": b"\xc1\xc1 garbage \x00\xff",
        "not_a_map": msgpack.packb([1, 2, 3]),
        "unknown_type": _envelope(type="ranksight.ev.v1.teleport", seq=2),
        "bad_record": _envelope(records=[{"index": "zero"}], seq=3),
        "bad_envelope": _envelope(seq=-5),
        "too_many_records": _envelope(records=[{"index": 0}] * (MAX_RECORDS + 1), seq=4),
        "subject_mismatch": _envelope(
            type="ranksight.ev.v1.nic", records=[{"name": "x", "kind": "rdma"}], seq=5
        ),
    }
    async with aggregator(settings) as agg:
        nc = await nats.connect(settings.nats.url)
        js = nc.jetstream()
        for payload in bad.values():
            await js.publish(subject, payload)
        await js.publish(subjects.prefix + ".ev.test.bad", _envelope(seq=6))  # wrong subject shape
        sim = await SyntheticAgent(settings, "good").start()
        await sim.emit(50)
        assert await sim.flush(20)
        await wait_for(lambda: agg.stats.records >= 50 and agg.stats.dead_letters >= len(bad) + 1)
        await sim.close()
        await nc.close()
    con = duckdb.connect(str(settings.db_path()), read_only=True)
    reasons = dict(con.execute("SELECT reason, count(*) FROM dead_letters GROUP BY reason").fetchall())
    assert reasons == {"not_msgpack": 1, "not_a_map": 1, "unknown_type": 1, "bad_record": 1, "bad_envelope": 2,
                       "subject_mismatch": 1, "bad_subject": 1}  # fmt: skip
    (good,) = con.execute("SELECT count(*) FROM gpu WHERE node = 'good'").fetchone()
    assert good == 50
    (kept,) = con.execute("SELECT payload FROM dead_letters WHERE reason = 'not_msgpack'").fetchone()
    assert bytes(kept) == bad["not_msgpack"]  # the original bytes are kept, nothing is lost
