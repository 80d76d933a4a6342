"""``ranksight probe serve`` and ``ranksight probe run``: the link probe by hand, without NATS or an aggregator."""

from __future__ import annotations

import argparse
import asyncio
import sys

from ranksight.agent.probe.client import ProbeBudget, ProbeError, run_probe
from ranksight.agent.probe.server import ProbeServer, parse_networks
from ranksight.core.aio import run_until_signalled
from ranksight.core.cliutil import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    port_number,
    print_json,
    print_table,
)

DEFAULT_PORT = 28100


def register_probe(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = kinds.add_parser("serve", help="run a link probe server (accepts any client unless --allow is given)")
    s.add_argument(
        "--port",
        type=port_number,
        default=DEFAULT_PORT,
        help=f"TCP port (default {DEFAULT_PORT}; 0 = any free)",
    )
    s.add_argument("--host", default=None, help="address to listen on (default: all)")
    s.add_argument(
        "--allow", nargs="+", default=[], metavar="CIDR", help="accept only clients from these networks"
    )
    s.set_defaults(func=serve)

    r = kinds.add_parser("run", help="probe one server: RTT, jitter, upload and download bandwidth")
    r.add_argument("target", metavar="HOST:PORT")
    r.add_argument("--seconds", type=float, default=1.0, help="time budget per direction (default 1)")
    r.add_argument("--bytes", type=int, default=ProbeBudget.bytes, help="byte budget per direction")
    r.add_argument("--json", action="store_true", help="one JSON object on stdout")
    r.set_defaults(func=run)


def parse_target(target: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` -> (host, port); raises ``ValueError``."""
    host, sep, port = target.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected HOST:PORT, got {target!r}")
    return host.removeprefix("[").removesuffix("]"), int(port)


def serve(args: argparse.Namespace) -> int:
    try:
        allow = parse_networks(args.allow)
    except ValueError as exc:
        print(f"ranksight: {exc}", file=sys.stderr)
        return EXIT_USAGE

    async def main(stop: asyncio.Event) -> None:
        server = await ProbeServer(args.host, args.port, allow).start()
        who = ", ".join(args.allow) if args.allow else "any client"
        print(f"ranksight: probe server on port {server.port}, accepting {who}", file=sys.stderr, flush=True)
        await stop.wait()
        await server.stop()

    try:
        run_until_signalled(main)
    except OSError as exc:
        print(f"ranksight: cannot listen on port {args.port}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    try:
        host, port = parse_target(args.target)
    except ValueError as exc:
        print(f"ranksight: {exc}", file=sys.stderr)
        return EXIT_USAGE
    budget = ProbeBudget(bytes=args.bytes, seconds=args.seconds)
    try:
        result = asyncio.run(run_probe(host, port, budget))
    except ProbeError as exc:
        print(f"ranksight: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        print_json(result.as_dict())
    else:
        print_table(
            [result.as_dict()], ["rtt_us", "jitter_us", "upload_bps", "download_bps", "bytes", "duration_s"]
        )
    return EXIT_OK
