"""Asyncio helpers shared by the agent and the aggregator."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable


async def cancel_all(tasks: Iterable[asyncio.Task[object]], timeout: float = 10.0) -> None:
    """Cancel ``tasks`` and wait for them, cancelling again while any is still running.

    On Python 3.11 ``asyncio.wait_for`` (used inside nats-py's request and fetch) can swallow a cancellation that races
    with its inner future completing; a task hit that way simply goes on. Repeating the cancel lands it at the next await.
    """
    tasks = list(tasks)
    pending = {t for t in tasks if not t.done()}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while pending and loop.time() < deadline:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=0.5)
    if not pending:  # collect results so no "exception never retrieved" noise remains
        await asyncio.gather(*tasks, return_exceptions=True)
