"""ranksight.client with no agent running: 100k calls must cost next to nothing (the training step never waits).

Prints calls/s for each call and the ratio against an empty Python function-call loop measured in the same run.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ranksight.client import Client

N = 100_000


def rate(fn: Callable[[int], object]) -> float:
    started = time.perf_counter()
    for i in range(N):
        fn(i)
    return N / (time.perf_counter() - started)


def empty(i: int) -> None:
    return None


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        c = Client(str(Path(d) / "no-agent.sock"), heartbeat_interval_s=0)

        def section(i: int) -> None:
            with c.section("forward"):
                pass

        baseline = rate(empty)
        print(f"empty function call      {baseline:>14,.0f} calls/s")
        for name, fn in [("heartbeat(step=i)", lambda i: c.heartbeat(step=i)),
                         ("marker('x', step=i)", lambda i: c.marker("x", step=i)),
                         ("with section('forward')", section)]:  # fmt: skip
            r = rate(fn)
            print(f"{name:<24} {r:>14,.0f} calls/s  {baseline / r:6.1f}x an empty call  ({1e9 / r:,.0f} ns)")
        coalescing = Client(str(Path(d) / "no-agent.sock"))  # the default: heartbeats coalesced to 1/s
        r = rate(lambda i: coalescing.heartbeat(step=i))
        print(f"{'heartbeat, coalesced':<24} {r:>14,.0f} calls/s  {baseline / r:6.1f}x an empty call")
        print(f"dropped {c.stats()['dropped']:,}, sent {c.stats()['sent']}")


if __name__ == "__main__":
    main()
