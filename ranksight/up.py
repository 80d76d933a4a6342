"""``ranksight up``: the embedded default. Starts ``nats-server`` (JetStream, store under the state dir), an aggregator
and a local agent on defaults, prints what is running, and stops all of it on Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import sys
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

from agent.runtime import AgentRuntime
from aggregator.runtime import Aggregator
from ranksight.cliutil import EXIT_FAILED, add_config_flags, run_until_signalled, settings_from_args
from ranksight.config import Settings
from ranksight.natsserver import NatsServer, NatsServerError
from ranksight.private import keep_private

DEFAULT_NATS_PORT = 4222


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("up", help="run NATS, an aggregator and a local agent on this machine")
    add_config_flags(p)
    p.add_argument("--state-dir", type=Path, help="where everything is kept (overrides state_dir)")
    p.add_argument(
        "--nats-port", type=int, default=DEFAULT_NATS_PORT, help="0 picks a free port (default 4222)"
    )
    p.set_defaults(func=run)


def port_busy(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def run(args: argparse.Namespace) -> int:
    overrides = {"state_dir": args.state_dir} if args.state_dir else {}
    settings = settings_from_args(args, **overrides)
    if args.nats_port and port_busy(args.nats_port):
        print(
            f"ranksight up: port {args.nats_port} is in use; pass --nats-port 0 for a free one",
            file=sys.stderr,
        )
        return EXIT_FAILED
    return with_embedded_nats("up", settings, args.nats_port, _serve)


def with_embedded_nats(command: str, settings: Settings, port: int,
                       main: Callable[[Settings, NatsServer, asyncio.Event], Coroutine[Any, Any, None]]) -> int:  # fmt: skip
    """Start the embedded nats-server on ``port`` (0: a free one), run ``main`` against it until SIGINT/SIGTERM sets
    its stop event, then stop the server; exit 1 when the server cannot start. Everything it creates is private."""
    keep_private(settings.state_dir)
    server = NatsServer(settings.state_dir / "nats", port=port)
    try:
        server.start()
    except NatsServerError as exc:
        print(f"ranksight {command}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    try:
        settings = settings.model_copy(update={"nats": settings.nats.model_copy(update={"url": server.url})})
        run_until_signalled(lambda stop: main(settings, server, stop))
    finally:
        server.stop()
    return 0


async def _serve(settings: Settings, server: NatsServer, stop: asyncio.Event) -> None:
    aggregator = Aggregator(settings)
    agent = AgentRuntime(settings)
    agg_task = asyncio.create_task(aggregator.run(stop))
    await first(aggregator.ready.wait(), agg_task)
    agent_task = asyncio.create_task(agent.run(stop))
    await first(agent.ready.wait(), agent_task)
    print(
        f"ranksight up\n"
        f"  nats        {server.url}  (JetStream store {server.store_dir})\n"
        f"  aggregator  DuckDB {settings.db_path()}\n"
        f"  agent       node {settings.agent.node}, cluster {settings.cluster}\n"
        f"  http        {aggregator.http.url or 'off (aggregator.http)'}\n"
        f"  try         ranksight status --nats {server.url}\n"
        f"Ctrl-C stops everything.",
        flush=True,
    )
    await asyncio.gather(agg_task, agent_task)


async def first(ready: Awaitable[Any], task: asyncio.Task[None]) -> None:
    """Wait for ``ready``; if ``task`` ends first (it failed), re-raise its error."""
    waiter = asyncio.ensure_future(ready)
    done, _ = await asyncio.wait([waiter, task], return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        waiter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiter
        task.result()
