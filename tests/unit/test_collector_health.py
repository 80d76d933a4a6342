"""Collector health as the heartbeat carries it: an error survives restarts until a real success, and error text that
quotes what a peer sent goes out printable and bounded."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from ranksight.agent.collector_settings import CollectorSettings
from ranksight.agent.collectors.base import MAX_ERROR_CHARS, Emit, Health, StreamingCollector
from ranksight.agent.runtime import AgentRuntime
from ranksight.schemas.records import Record
from ranksight.settings import load_settings


class FailsOnceThenIdles(StreamingCollector):
    """A streaming collector whose first run fails and whose second runs on without a success yet."""

    name = kind = "flaky"

    def __init__(self) -> None:
        super().__init__(None, CollectorSettings())  # type: ignore[arg-type]
        self.runs = 0
        self.second_run = asyncio.Event()

    async def run(self, emit: Emit) -> None:
        self.runs += 1
        if self.runs == 1:
            raise ConnectionError("peer hung up")
        self.second_run.set()
        await asyncio.Event().wait()


async def test_an_error_survives_a_restart_until_a_real_success() -> None:
    collector = FailsOnceThenIdles()

    async def emit(records: Sequence[Record], on_ack: Any = None) -> None:
        return None

    runtime = AgentRuntime(load_settings(None))
    task = asyncio.create_task(runtime._drive_streaming(collector, emit))
    try:
        await asyncio.wait_for(collector.second_run.wait(), 10)  # restarted after its backoff
        assert collector.health.state == "error"
        assert collector.health.last_error == "ConnectionError: peer hung up"
        collector.health.success(0.1)
        assert collector.health.state == "ok"
    finally:
        task.cancel()


def test_first_start_is_ok() -> None:
    health = Health("x")
    health.running()
    assert health.state == "ok"


def test_heartbeat_error_text_is_printable_and_bounded() -> None:
    health = Health("ras")
    peer_bytes = "\x1b[2J\x00\xff\u202e" + "A" * 10_000
    health.failure(ValueError(f"bad reply {peer_bytes}"))
    text = health.snapshot().last_error
    assert text is not None and len(text) <= MAX_ERROR_CHARS and text.endswith("...")
    assert all(" " <= c <= "~" for c in text)
    assert text.startswith("ValueError: bad reply ?[2J???AAA")
    health.last_error = "fell back\nto nvml"
    assert health.snapshot().last_error == "fell back?to nvml"
