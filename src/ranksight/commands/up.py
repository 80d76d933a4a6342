"""``ranksight up``: the embedded default. Starts ``nats-server`` (JetStream, store under the state dir), an aggregator
and a local agent on defaults, prints what is running, and stops all of it on Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shlex
import shutil
import sys
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

from ranksight.agent.runtime import AgentRuntime
from ranksight.aggregator.runtime import Aggregator
from ranksight.core.aio import run_until_signalled
from ranksight.core.cliutil import (
    EXIT_FAILED,
    add_config_flags,
    add_http_port_flag,
    http_port_override,
    interrupted_exit,
    port_number,
    ports_in_use,
    settings_from_args,
)
from ranksight.core.natsserver import NatsCluster, NatsServer, NatsServerError
from ranksight.core.private import keep_private
from ranksight.settings import Settings

DEFAULT_NATS_PORT = 4222


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("up", help="run NATS, an aggregator and a local agent on this machine")
    add_config_flags(p)
    p.add_argument("--state-dir", type=Path, help="where everything is kept (overrides state_dir)")
    p.add_argument(
        "--nats-port", type=port_number, default=DEFAULT_NATS_PORT, help="0 picks a free port (default 4222)"
    )
    p.add_argument(
        "--nats-cluster", type=cluster_size, default=1, metavar="N",
        help="run N nats-servers as one JetStream cluster (3 or 5: stream and KV kept on 3 of them; "
        "the first listens on --nats-port, the others on free ports)",
    )  # fmt: skip
    add_http_port_flag(p)
    p.set_defaults(func=run)


def cluster_size(text: str) -> int:
    size = int(text) if text.isdigit() else 0
    if size not in (1, 3, 5):
        raise argparse.ArgumentTypeError(f"{text!r}: 1, 3 or 5 servers (JetStream needs an odd quorum)")
    return size


def run(args: argparse.Namespace) -> int:
    overrides = {"state_dir": args.state_dir} if args.state_dir else {}
    settings = settings_from_args(args, Settings, **overrides, **http_port_override(args))
    if problem := ports_in_use(settings.aggregator.http, args.nats_port, settings.agent.collectors.probe):
        print(f"ranksight up: {problem}", file=sys.stderr)
        return EXIT_FAILED
    return with_embedded_nats("up", settings, args.nats_port, _serve, cluster=args.nats_cluster)


def with_embedded_nats(command: str, settings: Settings, port: int,
                       main: Callable[[Settings, EmbeddedNats, asyncio.Event], Coroutine[Any, Any, None]],
                       cluster: int = 1) -> int:  # fmt: skip
    """Start the embedded nats-server on ``port`` (0: a free one), or a JetStream cluster of ``cluster`` servers, run
    ``main`` against it until SIGINT/SIGTERM sets its stop event, then stop the servers; exit 1 when they cannot
    start, 130 after Ctrl-C. Everything it creates is private."""
    keep_private(settings.state_dir)
    store = settings.state_dir / "nats"
    server: EmbeddedNats
    if cluster > 1:
        server = NatsCluster(store, cluster, ports=[port] + [0] * (cluster - 1))
        replicas = 3
    else:
        server, replicas = NatsServer(store, port=port), 1
    try:
        server.start()
    except NatsServerError as exc:
        print(f"ranksight {command}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    try:
        nats = settings.nats.model_copy(update={"url": server.url, "jetstream_replicas": replicas})
        settings = settings.model_copy(update={"nats": nats})
        signum = run_until_signalled(lambda stop: main(settings, server, stop), settings.shutdown_timeout_s)
    finally:
        server.stop()
    return interrupted_exit(signum)


EmbeddedNats = NatsServer | NatsCluster


async def _serve(settings: Settings, server: EmbeddedNats, stop: asyncio.Event) -> None:
    aggregator = Aggregator(settings)
    agent = AgentRuntime(settings)
    agg_task = asyncio.create_task(aggregator.run(stop))
    await first(aggregator.ready.wait(), agg_task)
    agent_task = asyncio.create_task(agent.run(stop))
    await first(agent.ready.wait(), agent_task)
    collectors = settings.agent.collectors
    probe = f"port {collectors.probe.port or 'any free'} (link probes)" if collectors.probe.enabled else "off"
    app = settings.app_socket_path()
    me = command_name()
    print(
        f"ranksight up\n"
        f"  nats        {server.url}  (JetStream store {server.store_dir}{replication(settings)})\n"
        f"  aggregator  DuckDB {settings.db_path()}\n"
        f"  agent       node {settings.agent.node}, cluster {settings.cluster}\n"
        f"  http        {http_line(aggregator)}\n"
        f"  probe       {probe}\n"
        f"  app socket  {f'{app}  (jobs: export RANKSIGHT_APP_SOCKET={app})' if collectors.app.enabled else 'off'}\n"
        f"  state       {settings.state_dir}  (kept after Ctrl-C; history offline: "
        f'{me} sql --db {settings.db_path()} "SELECT ...")\n'
        f"  try         {me} status --nats {server.url}\n"
        f"Ctrl-C stops everything.",
        flush=True,
    )
    await asyncio.gather(agg_task, agent_task)


def command_name(argv0: str | None = None) -> str:
    """How to run ranksight again from this shell: ``ranksight`` when that name on PATH is the program running,
    else the path it was started by (``.venv/bin/ranksight`` after ``make up``), else ``python -m ranksight.cli``."""
    started = Path(argv0 if argv0 is not None else sys.argv[0])
    if started.name == "ranksight":
        on_path = shutil.which("ranksight")
        if on_path and Path(on_path).resolve() == started.resolve():
            return "ranksight"
        return shlex.quote(os.path.relpath(started) if started.is_absolute() else str(started))
    return f"{shlex.quote(sys.executable)} -m ranksight.cli"


def replication(settings: Settings) -> str:
    replicas = settings.nats.jetstream_replicas
    return f"; stream and KV on {replicas} servers" if replicas > 1 else ""


def http_line(aggregator: Aggregator) -> str:
    """The banner's http entry: the address, or why there is none."""
    if aggregator.http.url:
        return aggregator.http.url
    return (
        "off (aggregator.http.enabled)"
        if not aggregator.settings.aggregator.http.enabled
        else "not serving (see log)"
    )


async def first(ready: Awaitable[Any], task: asyncio.Task[None]) -> None:
    """Wait for ``ready``; if ``task`` ends first (it failed), re-raise its error."""
    waiter = asyncio.ensure_future(ready)
    done, _ = await asyncio.wait([waiter, task], return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        waiter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiter
        task.result()
