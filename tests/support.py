"""Test helpers: run the real agent/aggregator in-process, wait for conditions, spawn CLI processes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import duckdb
import nats.errors
import nats.js.errors

from ranksight.agent.runtime import AgentRuntime
from ranksight.aggregator.runtime import Aggregator, ensure_buckets
from ranksight.core.natsconn import connect
from ranksight.settings import Settings


async def wait_for(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05) -> Any:
    """Poll ``predicate`` (sync or async) until truthy; fail the test with a clear message on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if isinstance(value, Awaitable):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {predicate}")
        await asyncio.sleep(interval)


@contextlib.asynccontextmanager
async def running(component: Aggregator | AgentRuntime) -> AsyncIterator[Any]:
    stop = asyncio.Event()
    task = asyncio.create_task(component.run(stop))
    ready = asyncio.create_task(component.ready.wait())
    done, _ = await asyncio.wait([task, ready], timeout=20, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        ready.cancel()
        task.result()  # raises the startup error
    assert ready in done, "component did not become ready"
    try:
        yield component
    finally:
        stop.set()
        done, _ = await asyncio.wait([task], timeout=20)
        if not done:
            stacks = "\n".join(f"{t.get_name()}: {t.get_stack(limit=5)}" for t in asyncio.all_tasks())
            raise AssertionError(f"{type(component).__name__} did not stop within 20s; tasks:\n{stacks}")
        task.result()


@contextlib.asynccontextmanager
async def aggregator(settings: Settings) -> AsyncIterator[Aggregator]:
    async with running(Aggregator(settings)) as agg:
        yield agg


@contextlib.asynccontextmanager
async def agent(settings: Settings, only: list[str] | None = None) -> AsyncIterator[AgentRuntime]:
    """An agent; the buckets it uses exist first, as a running aggregator makes them (agents may not create them)."""
    nc = await connect(settings.nats, "test-buckets")
    try:
        await ensure_buckets(nc.jetstream(), settings)
    finally:
        await nc.close()
    async with running(AgentRuntime(settings, only=only)) as rt:
        yield rt


async def consumer_drained(settings: Settings) -> bool:
    """Every message of the event stream acknowledged by the aggregator's durable consumer."""
    nc = await connect(settings.nats, "test-consumer-drained")
    try:
        info = await nc.jetstream().consumer_info(settings.aggregator.stream, settings.aggregator.durable)
        return info.num_pending == 0 and info.num_ack_pending == 0
    except nats.errors.TimeoutError:
        return False  # a JetStream cluster electing the consumer's new leader answers nothing for a moment
    except nats.js.errors.NotFoundError:
        return False  # the aggregator's ingest task has not created its consumer yet
    finally:
        await nc.close()


def gpu_rows(settings: Settings) -> tuple[int, int]:
    """GPU rows in history, and how many are distinct (agent, counter): equal when nothing was stored twice."""
    con = duckdb.connect(str(settings.db_path()), read_only=True)
    try:
        row = con.execute("SELECT count(*), count(DISTINCT (agent, memory_used_bytes)) FROM gpu").fetchone()
        assert row is not None  # an aggregate answers one row
        return int(row[0]), int(row[1])
    finally:
        con.close()


def settings_env(settings: Settings) -> dict[str, str]:
    """Environment that makes a ``ranksight`` child process use ``settings``' NATS, state dir and cluster."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("RANKSIGHT_")}
    env.update(
        RANKSIGHT_NATS__URL=settings.nats.url,
        RANKSIGHT_STATE_DIR=str(settings.state_dir),
        RANKSIGHT_CLUSTER=settings.cluster,
        RANKSIGHT_AGGREGATOR__HTTP__PORT="0",
        PYTHONUNBUFFERED="1",
    )
    return env


def ranksight_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "ranksight.cli", *args]


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(ranksight_cmd(*args), capture_output=True, text=True, env=env, timeout=timeout)


async def run_cli_async(*args: str, env: dict[str, str] | None = None,
                        timeout: float = 60) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """``run_cli`` off the event loop, so in-process servers keep answering while the child runs."""
    return await asyncio.to_thread(run_cli, *args, env=env, timeout=timeout)
