"""RAS commands: ``ranksight parse ras FILE [--json]`` (offline) and ``ranksight ras status|monitor|diagnostics|profile``
(live, straight from a job's RAS endpoint, as ``ncclras`` but normalized and with health; ``profile --job`` goes
through the aggregator and the agent polling the job). (``ranksight jobs`` / ``ranksight comms``
ask the running aggregator: :mod:`aggregator.api.endpoints`.)

``ranksight ras`` exit status: 0 the job is healthy (ok or warning), 1 degraded or failed (or the endpoint refused the
request), 2 usage, 3 no RAS endpoint answers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import nats.errors

from ranksight.agent.collectors.ras.capture import parse_capture, status_summary
from ranksight.agent.collectors.ras.client import MONITOR_GROUPS
from ranksight.agent.collectors.ras.control import PROFILER_EVENTS, parse_profiler_mask, profile_value
from ranksight.agent.collectors.ras.diagnostics import INCONSISTENT, run_diagnostics
from ranksight.agent.collectors.ras.errors import (
    RasClientError,
    RasParseError,
    RasReplyError,
)
from ranksight.agent.collectors.ras.poll import client_for, poll_status
from ranksight.core.cliutil import (
    EXIT_FAILED,
    EXIT_USAGE,
    add_config_flags,
    print_json,
    print_table,
    settings_from_args,
)
from ranksight.core.config import CommonSettings
from ranksight.core.natsconn import NatsUnreachable, connect
from ranksight.errors import exit_status
from ranksight.schemas.api import ApiResponse
from ranksight.schemas.structs import to_builtins
from ranksight.schemas.subjects import Subjects

if TYPE_CHECKING:
    from ranksight.agent.settings import AgentView


def register_parse(sources: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sources.add_parser("ras", help="a captured RAS status (text or JSON) or MONITOR output")
    p.add_argument("file", type=Path, metavar="FILE")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(func=parse_ras)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ras = sub.add_parser("ras", help="query a job's RAS endpoint directly (status, monitor)")
    commands = ras.add_subparsers(dest="ras_command", required=True, metavar="COMMAND")
    status = commands.add_parser(
        "status", help="the job's RAS status, normalized, with health (exit 1: not healthy)"
    )
    monitor = commands.add_parser("monitor", help="RAS MONITOR events as they come (NCCL 2.29+)")
    for p in (status, monitor):
        add_config_flags(p)
        p.add_argument(
            "--addr", metavar="HOST:PORT", help="RAS endpoint (default $NCCL_RAS_ADDR or localhost:28028)"
        )
        p.add_argument("--json", action="store_true", help="JSON (status: the shape of `parse ras --json`)")
    status.add_argument(
        "--verbose", action="store_true", help="VERBOSE STATUS, and the status lines behind each fact"
    )
    status.set_defaults(func=ras_status)
    monitor.add_argument(
        "--groups", default="lifecycle", help="event groups: lifecycle, trace, all (comma-separated)"
    )
    monitor.set_defaults(func=ras_monitor)
    diag = commands.add_parser(
        "diagnostics", help="run RAS diagnostics across the job (NCCL 2.31+; exit 1: inconsistencies found)"
    )
    profile = commands.add_parser(
        "profile", help="switch the job's profiler events: on (Inspector's), off (0) or a mask (NCCL 2.31+)"
    )
    for p in (diag, profile):
        add_config_flags(p)
        p.add_argument(
            "--addr", metavar="HOST:PORT", help="RAS endpoint (default $NCCL_RAS_ADDR or localhost:28028)"
        )
        p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    diag.set_defaults(func=ras_diagnostics)
    profile.add_argument(
        "--job", metavar="JOB", help="through the running aggregator and the agent polling JOB, not --addr"
    )
    profile.add_argument(
        "value", metavar="on|off|MASK", help="MASK: none, all, a number, or event names (coll,p2p)"
    )
    profile.set_defaults(func=ras_profile)


def parse_ras(args: argparse.Namespace) -> int:
    try:
        result = parse_capture(args.file.read_bytes())
    except OSError as exc:
        print(f"ranksight: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAILED
    except RasParseError as exc:
        print(f"ranksight: {args.file}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        print_json(result)
        return 0
    print_result(result)
    return 0


def print_result(result: dict[str, Any], verbose: bool = False) -> None:
    summary = result["summary"]
    print(f"format {result['format']}  version {result['version'] or '-'}  health {result['health']}  "
          f"nodes {summary['nodes'] or '-'}  processes {summary['processes'] or '-'}  gpus {summary['gpus'] or '-'}  "
          f"timeouts {result['timeouts']}")  # fmt: skip
    if result["communicators"]:
        print()
        print_table(result["communicators"], ["hash", "size", "status", "errors", "missing_ranks"])
    for title, key in (("missing processes", "missing_processes"), ("dead processes", "dead_processes")):
        if result[key]:
            print(f"\n{title}:")
            print_table(result[key], ["host", "pid", "gpus"])
    if result["mismatches"]:
        print("\nmismatches:")
        print_table(result["mismatches"], ["hash", "kind", "collective"])
    if result["events"]:
        print()
        print_table(result["events"], ["time", "event", "host", "pid", "details"])
    if verbose:
        for item in [*result["missing_processes"], *result["dead_processes"], *result["communicators"]]:
            if item.get("evidence"):
                name = item.get("hash") or f"process {item['pid']} on {item['host']}"
                print(f"\n{name}:")
                print("\n".join(item["evidence"]))


def _settings(args: argparse.Namespace) -> AgentView:
    # The agent's view composes this package's section: imported for the type checker only (a cycle otherwise).
    return cast("AgentView", settings_from_args(args, CommonSettings))


def _client(args: argparse.Namespace, settings: AgentView | None = None) -> Any:
    settings = settings or _settings(args)
    try:
        return client_for(settings.agent.collectors.ras, args.addr)
    except ValueError as exc:
        print(f"ranksight ras: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None


def _failed(exc: Exception) -> int:
    print(f"ranksight ras: {exc}", file=sys.stderr)
    return exit_status(exc)


def ras_status(args: argparse.Namespace) -> int:
    client = _client(args)
    try:
        status = asyncio.run(poll_status(client, verbose=args.verbose))
    except (RasClientError, RasParseError) as exc:
        return _failed(exc)
    result = status_summary(status)
    if args.json:
        print_json(result)
    else:
        print(f"endpoint {client.endpoint}")
        print_result(result, verbose=args.verbose)
    return 0 if status.health in ("ok", "warning") else EXIT_FAILED


def ras_monitor(args: argparse.Namespace) -> int:
    groups = [g for g in args.groups.split(",") if g]
    if not groups or any(g.lower() not in MONITOR_GROUPS for g in groups):
        print(
            f"ranksight ras monitor: --groups takes {', '.join(MONITOR_GROUPS)}, not {args.groups!r}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    client = _client(args)

    async def follow() -> None:
        async for event in client.monitor(",".join(groups)):
            if args.json:
                print(json.dumps(to_builtins(event)), flush=True)
            else:
                peer = (
                    event.addr or f"process {event.pid} on {event.host} GPU {','.join(map(str, event.gpus))}"
                )
                print(f"[{event.time}] {event.event_group or '-'} {event.event}: {peer} {event.details}".rstrip(),
                      flush=True)  # fmt: skip

    try:
        asyncio.run(follow())
    except RasReplyError as exc:
        hint = " (MONITOR needs NCCL 2.29 or later)" if exc.unknown_command else ""
        print(f"ranksight ras monitor: {exc}{hint}", file=sys.stderr)
        return EXIT_FAILED
    except (RasClientError, RasParseError) as exc:
        return _failed(exc)
    return 0


def ras_diagnostics(args: argparse.Namespace) -> int:
    """Exit 0: the run completed and found nothing inconsistent; 1: it found something, or it could not run (busy,
    a release without diagnostics, an error); 3: no endpoint answers."""
    client = _client(args)
    try:
        report = asyncio.run(run_diagnostics(client))
    except (RasClientError, RasParseError) as exc:
        return _failed(exc)
    findings = [f for f in report.findings if f.kind in INCONSISTENT]
    if args.json:
        print_json({"endpoint": client.endpoint, **to_builtins(report)})
    else:
        print(f"endpoint {client.endpoint}  status {report.status}  peers {report.peers or '-'}  "
              f"time {report.completed_ms if report.completed_ms is not None else '-'} ms")  # fmt: skip
        if report.message:
            hint = " (diagnostics need NCCL 2.31 or later)" if report.status == "unsupported" else ""
            print(f"{report.message}{hint}", file=sys.stderr)
        rows = [{"tag": f.tag.upper(), "kind": f.kind, "comm": f.comm or "", "ranks": f.ranks,
                 "hosts": ",".join(f.hosts), "text": f.text} for f in report.findings]  # fmt: skip
        if rows:
            print_table(rows, ["tag", "kind", "comm", "ranks", "hosts", "text"])
    return 0 if report.status == "ok" and not findings else EXIT_FAILED


def ras_profile(args: argparse.Namespace) -> int:
    settings = _settings(args)  # a bad configuration is reported first, as by every command
    value = profile_value(args.value)
    mask = parse_profiler_mask(value)
    if mask is None:
        print(f"ranksight ras profile: {args.value!r} is not on, off or a profiler mask "
              f"(none, all, a number, or event names: {', '.join(PROFILER_EVENTS)})", file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    if args.job:
        return _profile_through_agent(args, settings, mask)
    client = _client(args, settings)
    try:
        asyncio.run(client.set_profiler_mask(value))
    except RasReplyError as exc:
        hint = " (CONTROL needs NCCL 2.31 or later)" if exc.unknown_command else ""
        print(f"ranksight ras profile: {exc}{hint}", file=sys.stderr)
        return EXIT_FAILED
    except RasClientError as exc:
        return _failed(exc)
    result = {"endpoint": client.endpoint, "mask": mask}
    if args.json:
        print_json(result)
    else:
        print(f"endpoint {client.endpoint}: profiler mask {mask:#x}")
    return 0


def _profile_through_agent(args: argparse.Namespace, settings: AgentView, mask: int) -> int:
    """Find the agent that polls the job (the aggregator's ``jobs``) and ask it (its ``ras_profile`` command)."""
    subjects = Subjects(settings.subject_prefix)

    async def ask() -> dict[str, Any]:
        nc = await connect(
            settings.nats, name="ranksight-cli", max_reconnect_attempts=0, allow_reconnect=False
        )
        try:
            found = await nc.request(subjects.api("jobs"), json.dumps({"job": args.job}).encode(), timeout=10)
            jobs = ApiResponse.model_validate_json(found.data)
            if not jobs.ok:
                raise RuntimeError(jobs.error or "the aggregator refused the query")
            live = [row for row in jobs.rows if row.get("job") == args.job and row.get("state") == "running"]
            if not live:
                raise LookupError(f"no running job {args.job!r} is known to the aggregator")
            row = live[0]
            subject = subjects.agent(row["cluster"], row["node"], "ras_profile")
            msg = await nc.request(subject, json.dumps({"value": args.value}).encode(), timeout=30)
        finally:
            await nc.close()
        error = (msg.headers or {}).get("Nats-Service-Error")
        if error:
            raise RuntimeError(f"agent {row['node']}: {error}")
        return {"job": args.job, "node": row["node"], **json.loads(msg.data)}

    try:
        result = asyncio.run(ask())
    except NatsUnreachable as exc:
        print(f"ranksight ras profile: {exc}", file=sys.stderr)
        return exit_status(exc)
    except (LookupError, RuntimeError, nats.errors.Error) as exc:
        print(f"ranksight ras profile: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        print_json(result)
    else:
        print(f"job {result['job']} (agent {result['node']}, endpoint {result['endpoint']}): profiler mask "
              f"{result['mask']:#x}")  # fmt: skip
    return 0
