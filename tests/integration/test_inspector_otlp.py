"""The agent's OTLP/HTTP receiver over real TCP, sent exactly the request the Inspector plugin sends
(``inspector_otel.cc``: POST, ``Content-Type: application/json``, ``Connection: close``, a length) with the writers'
own bodies (``tests/inspector_exports.py``); its bounds; and a real agent with NATS and the aggregator storing the
records with the job id the resource attributes name, and, posted by a process whose launcher named its rank, the
verbose operations as the summaries and raw records the dump files give."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import socket
import sys
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ranksight.agent.collectors.inspector.otlp import OtlpLimits, OtlpReceiver
from ranksight.schemas.records import InspectorMetricsRecord
from ranksight.settings import Settings
from tests.inspector_exports import render
from tests.support import agent, aggregator, wait_for

BODIES = {path.name: data for path, data in render().items()}
AGGREGATED = BODIES["nccl_2.32.3_otlp_aggregated_from_2.28.9_vm-pid3027.json"]
VERBOSE = BODIES["nccl_2.32.3_otlp_verbose_from_2.28.9_vm-pid3027.json"]
LIMITS = OtlpLimits(max_body_bytes=1 << 20, max_requests_per_s=50, max_connections=4, read_timeout_s=2.0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def plugin_request(
    port: int, body: bytes, path: str = "/v1/metrics", content_type: str = "application/json"
) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: localhost:{port}\r\nContent-Type: {content_type}\r\n"
            f"Accept: application/json\r\nConnection: close\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body  # fmt: skip


async def post(port: int, request: bytes, host: str = "127.0.0.1") -> int:
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(request)
    await writer.drain()
    answer = await reader.read()
    writer.close()
    return int(answer.split(b" ", 2)[1])


def gzip_bomb(mib: int) -> bytes:
    """``mib`` MiB of zeros, gzip-compressed a MiB at a time (never held whole)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # wbits 31: the gzip container
    zeros = bytes(1 << 20)
    return b"".join(packer.compress(zeros) for _ in range(mib)) + packer.flush()


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[OtlpReceiver, list[InspectorMetricsRecord]]]:
    got: list[InspectorMetricsRecord] = []

    async def keep(records: list[InspectorMetricsRecord], client_port: int) -> None:
        got.extend(records)

    server = OtlpReceiver(free_port(), LIMITS, keep)
    await server.start()
    yield server, got
    await server.close()


async def test_the_plugins_requests_are_accepted(
    receiver: tuple[OtlpReceiver, list[InspectorMetricsRecord]],
) -> None:
    server, got = receiver
    assert await post(server.port, plugin_request(server.port, AGGREGATED)) == 200
    assert await post(server.port, plugin_request(server.port, VERBOSE)) == 200
    assert {r.shape for r in got} == {"bucket", "op", "device"} and {r.job_id for r in got} == {"4242"}
    assert server.counts["requests"] == 2 and server.counts["records"] == len(got)
    if len(server.servers) == 2:  # the plugin may resolve localhost to ::1 first
        assert await post(server.port, plugin_request(server.port, AGGREGATED), host="::1") == 200


async def test_what_the_receiver_refuses(receiver: tuple[OtlpReceiver, list[InspectorMetricsRecord]]) -> None:
    server, got = receiver
    port = server.port
    assert await post(port, plugin_request(port, AGGREGATED, path="/v1/traces")) == 404
    assert await post(port, plugin_request(port, b"\x0a\x00", content_type="application/x-protobuf")) == 415
    assert await post(port, plugin_request(port, b"not json")) == 400
    too_big = plugin_request(port, b"x" * (LIMITS.max_body_bytes + 1))
    assert await post(port, too_big[: too_big.index(b"\r\n\r\n") + 4]) == 413  # refused before any body byte
    assert await post(port, b"POST /v1/metrics HTTP/1.1\r\nContent-Type: application/json\r\n\r\n") == 411
    assert await post(port, b"GET /v1/metrics HTTP/1.1\r\nContent-Type: application/json\r\n\r\n") == 405
    # a compressed body is refused, never inflated: a gzip bomb, 256 MiB of zeros in a body under the byte bound
    bomb = gzip_bomb(256)
    assert len(bomb) < LIMITS.max_body_bytes
    gzipped = plugin_request(port, bomb).replace(b"\r\n\r\n", b"\r\nContent-Encoding: gzip\r\n\r\n", 1)
    assert await post(port, gzipped) == 415
    assert server.last_error is not None and "Content-Encoding gzip" in server.last_error
    assert got == []
    # a connection that sends nothing is closed after the read timeout, answered 408
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    assert (await asyncio.wait_for(reader.read(), 5)).startswith(b"HTTP/1.1 408")
    writer.close()
    # connections beyond the bound are answered 503 at once
    idle = [await asyncio.open_connection("127.0.0.1", port) for _ in range(LIMITS.max_connections)]
    await asyncio.sleep(0.05)
    assert await post(port, plugin_request(port, AGGREGATED)) == 503
    for _, w in idle:
        w.close()
    await asyncio.sleep(0.1)


async def test_a_slow_client_is_cut_at_the_read_timeout(
    receiver: tuple[OtlpReceiver, list[InspectorMetricsRecord]],
) -> None:
    """Slowloris: headers dripped a byte at a time, then a body trickling under a huge (allowed) length: each is
    answered 408 once ``read_timeout_s`` has passed since the connection opened, however the bytes keep coming."""
    server, got = receiver
    request = plugin_request(server.port, AGGREGATED)
    head = request[: request.index(b"\r\n\r\n") + 4]
    for slow_part in ("headers", "body"):
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        loop = asyncio.get_running_loop()
        started = loop.time()
        if slow_part == "body":
            writer.write(head)
        drip = iter(head if slow_part == "headers" else AGGREGATED)
        answer = b""
        while not answer and loop.time() - started < 3 * LIMITS.read_timeout_s:
            with contextlib.suppress(ConnectionError):
                writer.write(bytes([next(drip)]))
            with contextlib.suppress(TimeoutError):
                answer = await asyncio.wait_for(reader.read(), 0.1)
        elapsed = loop.time() - started
        writer.close()
        assert answer.startswith(b"HTTP/1.1 408"), (slow_part, answer[:40])
        assert LIMITS.read_timeout_s <= elapsed < LIMITS.read_timeout_s + 1.5
    assert server.counts["refused_408"] == 2 and server.open == 0 and got == []


async def test_a_flood_of_connections_holds_at_most_twice_the_bound(
    receiver: tuple[OtlpReceiver, list[InspectorMetricsRecord]],
) -> None:
    """Beyond the open connections (all held idle here), as many again are answered 503; the rest of a flood opened
    meanwhile is closed at once, unanswered: what the receiver holds stays bounded whatever the flood."""
    server, _ = receiver
    bound = LIMITS.max_connections
    idle = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(bound)]
    await asyncio.sleep(0.05)
    flood = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(4 * bound)]

    async def answer(reader: asyncio.StreamReader) -> bytes:
        with contextlib.suppress(ConnectionError):
            return await asyncio.wait_for(reader.read(), 5)
        return b""

    answers = await asyncio.gather(*(answer(r) for r, _ in flood))
    answered = sum(a.startswith(b"HTTP/1.1 503") for a in answers)
    assert 1 <= answered and server.counts["refused_503"] == answered
    assert server.counts["refused_flood"] == 4 * bound - answered > 0
    for _, w in [*idle, *flood]:
        w.close()
    await wait_for(lambda: server.refusing == server.open == 0, timeout=5)


async def test_more_requests_per_second_than_the_bound_get_429() -> None:
    async def keep(records: list[InspectorMetricsRecord], client_port: int) -> None:
        pass

    server = OtlpReceiver(free_port(), dataclasses.replace(LIMITS, max_requests_per_s=2.0), keep)
    await server.start()
    try:
        started = asyncio.get_running_loop().time()
        statuses = [await post(server.port, plugin_request(server.port, AGGREGATED)) for _ in range(8)]
        elapsed = asyncio.get_running_loop().time() - started
        assert statuses.count(200) <= 2 + int(elapsed * 2) + 1 and statuses.count(429) >= 8 - 3 - int(
            elapsed * 2
        )
        assert server.counts["refused_429"] == statuses.count(429) > 0
    finally:
        await server.close()


async def test_an_agent_receives_the_export_and_the_aggregator_stores_it(
    settings: Settings, tmp_path: Path
) -> None:
    port = free_port()
    cfg = settings.agent.collectors.inspector.model_copy(update={"otlp_port": port, "dump_dir": None})
    collectors = settings.agent.collectors.model_copy(update={"inspector": cfg})
    configured = settings.model_copy(
        update={"agent": settings.agent.model_copy(update={"collectors": collectors})}
    )
    async with aggregator(configured) as agg, agent(configured, only=["inspector"]):
        await wait_for(lambda: _listening(port))
        assert await post(port, plugin_request(port, VERBOSE)) == 200
        await wait_for(lambda: _stored(agg) >= 13)
        [row] = agg.store.rows("SELECT count(*) AS n, min(job_id) AS job, max(coll_dropped_total) AS dropped, "
                               "count(*) FILTER (WHERE shape = 'op') AS ops FROM inspector_metrics")  # fmt: skip
        assert (row["n"], row["job"], row["dropped"], row["ops"]) == (13, "4242", 7, 12)


async def test_verbose_operations_of_a_ranked_process_feed_summaries_and_raw_records(
    settings: Settings, tmp_path: Path
) -> None:
    """The source dump's rank 0 (pid 3027, 4 ranks) posts its verbose export from a process started with torchrun's
    variables: the aggregator gets the same 12 operations as summaries and raw records, under the poster's pid, and its
    GPU's counters with that pid (a straggler finding's coverage about the process)."""
    port = free_port()
    cfg = settings.agent.collectors.inspector.model_copy(
        update={"otlp_port": port, "dump_dir": None, "summary_publish_s": 0.2, "raw_rate_per_s": 1000.0})  # fmt: skip
    collectors = settings.agent.collectors.model_copy(update={"inspector": cfg})
    configured = settings.model_copy(
        update={"agent": settings.agent.model_copy(update={"collectors": collectors})}
    )
    body = tmp_path / "body.json"
    body.write_bytes(plugin_request(port, VERBOSE))
    sender = ("import socket, sys\ns = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n"
              "s.sendall(open(sys.argv[2], 'rb').read())\nprint(s.recv(512).split()[1].decode())")  # fmt: skip
    async with aggregator(configured) as agg, agent(configured, only=["inspector"]):
        await wait_for(lambda: _listening(port))
        env = {**os.environ, "RANK": "0", "WORLD_SIZE": "4"}
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", sender, str(port), str(body), env=env,
                                                    stdout=asyncio.subprocess.PIPE)  # fmt: skip
        out, _ = await proc.communicate()
        assert out.strip() == b"200"
        await wait_for(lambda: _count(agg, "inspector_summary", "sum(count)") >= 12, timeout=20)
        await wait_for(lambda: _count(agg, "inspector") >= 12, timeout=20)
        [row] = agg.store.rows("SELECT count(DISTINCT pid) AS pids, min(pid) AS pid, min(rank) AS rank, "
                               "count(DISTINCT (op, sn)) AS ops FROM inspector")  # fmt: skip
        assert (row["pids"], row["pid"], row["rank"], row["ops"]) == (1, proc.pid, 0, 12)
        # what is not an operation of a known rank stays a metrics record: the device counters, of the poster
        assert _stored(agg) == 1
        [row] = agg.store.rows("SELECT shape, pid FROM inspector_metrics")
        assert (row["shape"], row["pid"]) == ("device", proc.pid)


def _count(agg: object, table: str, what: str = "count(*)") -> int:
    [row] = agg.store.rows(f"SELECT coalesce({what}, 0) AS n FROM {table}")  # type: ignore[attr-defined]
    return int(row["n"])


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _stored(agg: object) -> int:
    [row] = agg.store.rows("SELECT count(*) AS n FROM inspector_metrics")  # type: ignore[attr-defined]
    return int(row["n"])
