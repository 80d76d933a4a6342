"""``ranksight agent``: run the node agent in the foreground."""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import sys

from ranksight.agent.collectors.registry import COLLECTORS
from ranksight.agent.runtime import AgentRuntime
from ranksight.cliutil import EXIT_USAGE, add_config_flags, run_until_signalled, settings_from_args
from ranksight.schemas.subjects import SubjectError


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("agent", help="run the node agent (collectors -> NATS)")
    add_config_flags(p)
    p.add_argument("--cluster", help="cluster name (overrides cluster)")
    p.add_argument("--node", help="node name (overrides agent.node; default: hostname)")
    p.add_argument(
        "--only", metavar="NAMES", help=f"comma-separated collectors to run ({', '.join(COLLECTORS)})"
    )
    p.set_defaults(func=run)


# mallopt's M_ARENA_MAX (glibc's malloc.h)
_M_ARENA_MAX = -8


def limit_malloc_arenas(arenas: int = 1) -> None:
    """glibc gives each thread that allocates its own malloc arena; the agent's file-reading threads then keep about
    8 MB of fragmented arenas. One arena costs nothing here (the threads take turns on the GIL). No-op off glibc."""
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is not None:
        mallopt(_M_ARENA_MAX, arenas)


def run(args: argparse.Namespace) -> int:
    limit_malloc_arenas()  # before any thread starts
    overrides: dict = {}
    if args.cluster:
        overrides["cluster"] = args.cluster
    if args.node:
        overrides["agent"] = {"node": args.node}
    settings = settings_from_args(args, **overrides)
    only = [n.strip() for n in args.only.split(",")] if args.only else None
    try:
        runtime = AgentRuntime(settings, only=only)
    except SubjectError as exc:
        print(f"ranksight: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE

    async def main(stop: asyncio.Event) -> None:
        await runtime.run(stop)

    run_until_signalled(main, settings.shutdown_timeout_s)
    return 0
