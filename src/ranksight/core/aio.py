"""Asyncio helpers shared by the agent and the aggregator."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
FORCE_EXIT_S = 3.0  # after a second signal, how long cancellation may take before the process just ends


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


def run_until_signalled(main: Callable[[asyncio.Event], Coroutine[Any, Any, None]],
                        shutdown_timeout_s: float | None = None) -> int | None:  # fmt: skip
    """Run ``main(stop)`` until it returns; return the number of the signal that stopped it, or None.

    The first SIGINT or SIGTERM sets ``stop`` so that everything shuts down in order; if ``main`` has not returned
    ``shutdown_timeout_s`` later (a flush waiting on an unreachable NATS), it is cancelled (None: only on a second
    signal; for commands with nothing to flush). A second signal cancels it at once, and ends the process outright if
    even that does not stop it within ``FORCE_EXIT_S``.
    """
    received: list[int] = []

    async def runner() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(main(stop))

        def on_signal(signum: int) -> None:
            received.append(signum)
            if len(received) == 1:
                print(f"ranksight: {signal.Signals(signum).name}, stopping (again to force)", file=sys.stderr)
                stop.set()
                if shutdown_timeout_s is not None:
                    loop.call_later(shutdown_timeout_s, task.cancel)
            else:
                task.cancel()
                # A thread, not the loop: the loop itself may be what is stuck.
                force = threading.Timer(FORCE_EXIT_S, os._exit, (128 + received[0],))
                force.daemon = True
                force.start()

        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, on_signal, sig)
        try:
            await task
        except asyncio.CancelledError:
            if not received:
                raise
        finally:
            # What ``main`` left running (a part cancelled in the middle of its own stop) is cancelled until it ends:
            # on Python 3.11 a task can swallow one cancel (see cancel_all), and asyncio.run sends only one, then
            # waits for it forever.
            await cancel_all(asyncio.all_tasks() - {asyncio.current_task()})

    asyncio.run(runner())
    return received[0] if received else None
