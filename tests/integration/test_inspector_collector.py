"""Real nats-server + agent (inspector collector) + aggregator + DuckDB: files appended, partially written,
truncated and rotated while the collector runs; an agent restart resumes from the acknowledged offsets. Most tests
publish every record raw (no rate limit) to follow the tailer; the last one checks the rate limit and the summaries."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ranksight.aggregator.runtime import Aggregator
from ranksight.settings import Settings
from ranksight.simulate.inspector import JobSpec, simulate
from tests.inspector_layouts import Drops, rewrite
from tests.support import agent, aggregator, wait_for

EVERY_RAW = {"raw_rate_per_s": 1e9}


@pytest.fixture
def dump_settings(settings: Settings, tmp_path: Path) -> Settings:
    dump = tmp_path / "dump"
    dump.mkdir()
    cfg = settings.agent.collectors.inspector.model_copy(
        update={"dump_dir": dump, "interval_s": 0.05, **EVERY_RAW}
    )
    collectors = settings.agent.collectors.model_copy(update={"inspector": cfg})
    return settings.model_copy(update={"agent": settings.agent.model_copy(update={"collectors": collectors})})


def job_lines() -> list[str]:
    procs = simulate(JobSpec(nodes=2, gpus_per_node=2, steps=60))
    return [line for proc_lines in procs.values() for line in proc_lines]


def stored(agg: Aggregator) -> tuple[int, int]:
    [row] = agg.store.rows("SELECT count(*) AS n, count(DISTINCT (pid, comm_id, op, sn)) AS d FROM inspector")
    return row["n"], row["d"]


def stored_markers(agg: Aggregator) -> int:
    [row] = agg.store.rows("SELECT count(*) AS n FROM inspector_dump_stats")
    return int(row["n"])


async def test_tail_partial_truncate_rotate_restart(dump_settings: Settings) -> None:
    data = job_lines()
    dump = dump_settings.agent.collectors.inspector.dump_dir
    assert dump is not None
    log = dump / "node000-pid40000.log"
    log.write_text("".join(x + "\n" for x in data[:50]) + data[50][:30])  # last line half written
    async with aggregator(dump_settings) as agg:
        async with agent(dump_settings, only=["inspector"]) as rt:
            await wait_for(lambda: stored(agg)[0] == 50)
            with log.open("a") as fh:  # the writer completes the line and goes on, with one bad line
                fh.write(data[50][30:] + "\n" + "garbage\n" + "".join(x + "\n" for x in data[51:80]))
            await wait_for(lambda: stored(agg)[0] == 80)
            os.rename(log, dump / "node000-pid40000.log.1")  # rotated: the old name starts again
            log.write_text("".join(x + "\n" for x in data[80:100]))
            await wait_for(lambda: stored(agg)[0] == 100)
            other = dump / "node001-pid40097.jsonl"
            other.write_text("".join(x + "\n" for x in data[100:140]))
            await wait_for(lambda: stored(agg)[0] == 140)
            other.write_text("".join(x + "\n" for x in data[140:150]))  # truncated and rewritten
            await wait_for(lambda: stored(agg)[0] == 150)
            assert rt.ctx is not None  # the agent's own NATS command reports files, offsets and bad lines
            subject = rt.ctx.subjects.agent("test", "node-a", "inspector")
            status = json.loads((await rt.ctx.nc.request(subject, b"{}", timeout=5)).data)
            assert status["bad_lines"] == 1 and status["records"] == 150
            assert status["files"][str(other)]["committed"] == other.stat().st_size
        state = json.loads((dump_settings.state_dir / "inspector-offsets.json").read_text())
        assert state["files"][str(log)]["offset"] == log.stat().st_size
        with log.open("a") as fh:  # written while the agent is down
            fh.write("".join(x + "\n" for x in data[150:170]))
        async with agent(dump_settings, only=["inspector"]):
            await wait_for(lambda: stored(agg)[0] >= 170)
            await wait_for(lambda: agg.stats.records >= 170)
        assert stored(agg)[0] == 170  # nothing lost, nothing re-read


async def test_a_dump_directory_created_after_the_agent_starts_is_picked_up(
    settings: Settings, tmp_path: Path
) -> None:
    dump = tmp_path / "later"  # the job creates it when it starts, after the agent
    cfg = settings.agent.collectors.inspector.model_copy(
        update={"dump_dir": dump, "interval_s": 0.05, **EVERY_RAW}
    )
    collectors = settings.agent.collectors.model_copy(update={"inspector": cfg})
    agent_cfg = settings.agent.model_copy(update={"collectors": collectors, "redetect_s": 0.2})
    late = settings.model_copy(update={"agent": agent_cfg})
    async with aggregator(late) as agg, agent(late, only=["inspector"]) as rt:
        assert rt.ctx is not None
        inspector = rt.ctx.collectors["inspector"]
        await wait_for(lambda: inspector.health.state == "absent")
        dump.mkdir()
        (dump / "node000-pid40000.log").write_text("".join(x + "\n" for x in job_lines()[:30]))
        await wait_for(lambda: stored(agg)[0] == 30)
        assert inspector.health.state == "ok"


async def test_a_fifo_named_like_a_dump_is_skipped_and_reported(dump_settings: Settings) -> None:
    dump = dump_settings.agent.collectors.inspector.dump_dir
    assert dump is not None
    os.mkfifo(dump / "node000-pid1.log")  # opening it for reading would wait for a writer forever
    data = job_lines()
    (dump / "node000-pid2.log").write_text("".join(x + "\n" for x in data[:40]))
    async with aggregator(dump_settings) as agg, agent(dump_settings, only=["inspector"]) as rt:
        await wait_for(lambda: stored(agg)[0] == 40)  # the real dump file is read
        assert rt.ctx is not None
        health = rt.ctx.collectors["inspector"].health.snapshot()
        assert health.state == "ok" and health.last_error
        assert "node000-pid1.log (a FIFO)" in health.last_error
        with (dump / "node000-pid2.log").open("a") as fh:
            fh.write("".join(x + "\n" for x in data[40:60]))
        await wait_for(lambda: stored(agg)[0] == 60)  # and it goes on


async def test_raw_records_are_rate_limited_fairly_and_summaries_count_every_record(
    settings: Settings, tmp_path: Path
) -> None:
    dump = tmp_path / "dump"
    dump.mkdir()
    procs = simulate(JobSpec(nodes=2, gpus_per_node=2, steps=60))
    for (host, pid), lines in procs.items():
        (dump / f"{host}-pid{pid}.log").write_text("".join(x + "\n" for x in lines))
    total = sum(len(lines) for lines in procs.values())
    cfg = settings.agent.collectors.inspector.model_copy(update={
        "dump_dir": dump, "interval_s": 0.05, "raw_rate_per_s": 20.0, "summary_window_s": 1.0,
        "summary_publish_s": 0.2, "read_chunk_bytes": 4096})  # fmt: skip
    collectors = settings.agent.collectors.model_copy(update={"inspector": cfg})
    limited = settings.model_copy(
        update={"agent": settings.agent.model_copy(update={"collectors": collectors})}
    )
    async with aggregator(limited) as agg, agent(limited, only=["inspector"]) as rt:
        summed = (
            "SELECT coalesce(sum(count), 0) AS n, count(DISTINCT comm_id) AS comms, count(*) AS rows "
            "FROM inspector_summary"
        )
        # the job's records are from the past: every one is summarized
        await wait_for(lambda: next(agg.store.rows(summed))["n"] == total)

        def read_to_the_end() -> bool:  # saved as the raw batches are acknowledged (summaries may come first)
            path = limited.state_dir / "inspector-offsets.json"
            if not path.exists():
                return False
            files = json.loads(path.read_text())["files"]
            return all(f["offset"] == (dump / Path(p).name).stat().st_size for p, f in files.items())

        await wait_for(read_to_the_end)  # every raw batch acknowledged by the stream
        assert rt.ctx is not None
        status = await rt.ctx.commands["inspector"]({})
        stored_raw = "SELECT count(*) AS n FROM inspector"
        await wait_for(lambda: next(agg.store.rows(stored_raw))["n"] == status["raw"]["published"])
        [raw] = agg.store.rows("SELECT count(*) AS n, count(DISTINCT comm_id) AS comms FROM inspector")
        [summaries] = agg.store.rows(summed)
        assert (
            0 < raw["n"] <= 20 + 20 * 5
        )  # one second of burst, then the rate (this test is done within 5 s)
        assert raw["comms"] == summaries["comms"]  # every communicator gets its share
        ttls = [r["ttl"] for r in agg.store.rows("SELECT DISTINCT ttl FROM inspector_summary")]
        assert ttls == [2 * 1.0 + 0.2]  # valid until the next window's summary should have come
        parts = agg.store.rows("SELECT DISTINCT part_us FROM inspector_summary")
        assert [r["part_us"] for r in parts] == [200_000]  # published in parts, as read
        assert status["raw"]["kept_on_node"] == total - raw["n"]
        assert status["summaries"]["records"] == total and status["summaries"]["late"] == 0
        assert status["summaries"]["parts"] == summaries["rows"]


async def test_v43_dumps_stored_with_their_markers_and_resumed_inside_a_dump(dump_settings: Settings) -> None:
    """Inspector v4.3 layout (``tests/inspector_layouts.py``): records restored from their dump's marker, the
    markers stored as ``inspector_dump_stats`` with their drop counters, and an agent stopped inside a dump resumes
    there with the marker it saved."""
    procs = simulate(JobSpec(nodes=2, gpus_per_node=2, steps=60))
    proc_lines = next(iter(procs.values()))
    lines = rewrite([x.encode() for x in proc_lines], "v4.3", drops={2: Drops(coll=3)})
    markers = sum(1 for x in lines if b'"dump_stats"' in x)
    cut = next(i for i, x in enumerate(lines) if i > len(lines) // 2 and b'"dump_stats"' not in x
               and b'"dump_stats"' not in lines[i - 1])  # inside a dump: after its marker and a first payload  # fmt: skip
    dump = dump_settings.agent.collectors.inspector.dump_dir
    assert dump is not None
    log = dump / "node000-pid40000.log"
    log.write_bytes(b"".join(lines[:cut]))
    async with aggregator(dump_settings) as agg:
        async with agent(dump_settings, only=["inspector"]):
            await wait_for(
                lambda: stored(agg)[0] == sum(1 for x in lines[:cut] if b'"dump_stats"' not in x), timeout=30
            )
        saved = json.loads((dump_settings.state_dir / "inspector-offsets.json").read_text())["files"][
            str(log)
        ]
        assert saved["offset"] == log.stat().st_size and saved["dump"]["header"]["comm_name"]
        with log.open(
            "ab"
        ) as fh:  # the rest of the dump and the following ones, written while the agent is down
            fh.write(b"".join(lines[cut:]))
        async with agent(dump_settings, only=["inspector"]):
            await wait_for(lambda: stored(agg)[0] == len(lines) - markers, timeout=30)
            await wait_for(lambda: stored_markers(agg) == markers, timeout=30)
        assert stored(agg) == (
            len(lines) - markers,
            len(lines) - markers,
        )  # every record once, none misattributed
        [row] = agg.store.rows("SELECT max(coll_dropped_total) AS dropped, min(format_version) AS v, "
                               "count(DISTINCT pid) AS pids FROM inspector_dump_stats")  # fmt: skip
        assert (row["dropped"], row["v"], row["pids"]) == (3, "v4.3", 1)
