"""``ranksight deploy``: put agents on a fleet over SSH (or ``--status``, ``--uninstall``, ``--dry-run``).

Exit status: 0 every host ok (or skipped), 1 any host failed, 2 usage, configuration or hosts-file error.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from ranksight.api.client import ApiUnavailable, query
from ranksight.core.cliutil import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    add_config_flags,
    print_json,
    print_table,
    settings_from_args,
)
from ranksight.core.redact import redact, secrets_of
from ranksight.deploy import wheel as wheels
from ranksight.deploy.fleet import Progress, connect_nats, run_fleet
from ranksight.deploy.hosts import Host, HostsFileError, parse_host, parse_hosts
from ranksight.deploy.plan import DeployOptions, dry_run_plan
from ranksight.deploy.settings import DeployView
from ranksight.deploy.ssh import Node
from ranksight.deploy.steps import HostResult, deploy_host, status_host, uninstall_host
from ranksight.schemas.api import ApiResponse

COLUMNS = ["host", "result", "version", "mode", "detail"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("deploy", help="install, check or remove agents on hosts over SSH")
    add_config_flags(p)
    p.add_argument(
        "--hosts",
        required=True,
        type=Path,
        metavar="FILE",
        help="one [user@]host[:port] per line, # comments",
    )
    p.add_argument(
        "--jump", metavar="[USER@]HOST[:PORT]", help="reach the hosts through this jump host (bastion)"
    )
    action = p.add_mutually_exclusive_group()
    action.add_argument("--status", action="store_true", help="report each host's agent version and state")
    action.add_argument(
        "--uninstall", action="store_true", help="stop the agent and remove everything deploy installed"
    )
    action.add_argument("--dry-run", action="store_true", help="print the plan; connect to nothing")
    p.add_argument(
        "--wheel", type=Path, metavar="FILE", help="install this wheel (default: build from the source tree)"
    )
    p.add_argument("--parallel", type=int, metavar="N", help="hosts at once (overrides deploy.parallel)")
    p.add_argument(
        "--identity", type=Path, metavar="FILE", help="SSH private key (default: ssh-agent, ~/.ssh/id_*)"
    )
    p.add_argument(
        "--known-hosts", type=Path, metavar="FILE", help="known_hosts file (default: ~/.ssh/known_hosts)"
    )
    p.add_argument(
        "--accept-new-host-keys",
        action="store_true",
        help="trust and record keys of hosts not yet in known_hosts",
    )
    p.add_argument(
        "--remote-dir", metavar="DIR", help="install folder on the nodes (overrides deploy.remote_dir)"
    )
    p.add_argument("--json", action="store_true", help="results as one JSON object on stdout")
    p.set_defaults(func=run)


def _overrides(args: argparse.Namespace) -> dict[str, object]:
    deploy = {
        "parallel": args.parallel,
        "identity_file": args.identity,
        "known_hosts": args.known_hosts,
        "remote_dir": args.remote_dir,
    }
    return {"deploy": {k: v for k, v in deploy.items() if v is not None}}


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args, DeployView, **_overrides(args))
    logging.getLogger("asyncssh").setLevel(
        logging.WARNING
    )  # per-channel INFO lines would drown the progress bar
    try:
        hosts = parse_hosts(args.hosts.read_text(), str(args.hosts))
        jump: Host | None = parse_host(args.jump) if args.jump else None
    except UnicodeDecodeError:
        print(f"ranksight deploy: {args.hosts} is not a text file", file=sys.stderr)
        return EXIT_USAGE
    except (OSError, HostsFileError) as exc:
        print(f"ranksight deploy: {exc}", file=sys.stderr)
        return EXIT_USAGE
    secrets = secrets_of(settings)
    try:
        wheel = wheels.from_file(args.wheel) if args.wheel else None
        if wheel is None and not (args.status or args.uninstall or args.dry_run):
            wheel = wheels.build_or_reuse(settings.state_dir / "deploy" / "wheels")
    except wheels.WheelError as exc:
        print(f"ranksight deploy: {exc}", file=sys.stderr)
        return EXIT_FAILED
    opts = DeployOptions(settings, wheel, jump, args.accept_new_host_keys, secrets)
    if args.dry_run:
        return _dry_run(hosts, opts, args.json)
    try:
        results = asyncio.run(_act(hosts, opts, args))
    except ConnectionError as exc:
        print(f"ranksight deploy: {redact(str(exc), secrets)}", file=sys.stderr)
        return EXIT_FAILED
    rows = [r.row() for r in results]
    if args.json:
        print_json({"hosts": rows})
    else:
        print_table(rows, COLUMNS)
    return EXIT_FAILED if any(r.failed for r in results) else EXIT_OK


async def _drain(opts: DeployOptions, nodes: list[str]) -> None:
    """Removed agents go silent on purpose: drain their nodes first so that raises no alert (best effort)."""
    params = {"nodes": nodes, "cluster": opts.settings.cluster, "reason": "ranksight deploy --uninstall"}
    try:
        response = await query(opts.settings, "drain", params)
    except ApiUnavailable as exc:
        response = ApiResponse.failure(str(exc))
    if not response.ok:
        print(f"ranksight deploy: could not drain the nodes ({redact(response.error or '', opts.secrets)}); "
              "node_silent will fire for them", file=sys.stderr)  # fmt: skip


def _dry_run(hosts: list[Host], opts: DeployOptions, as_json: bool) -> int:
    plans = {h.name: dry_run_plan(h, opts) for h in hosts}
    if as_json:
        print_json({"plan": [{"host": name, "steps": steps} for name, steps in plans.items()]})
        return EXIT_OK
    for name, steps in plans.items():
        print(f"{name}:")
        for number, step in enumerate(steps, 1):
            print(f"  {number}. {step}")
    return EXIT_OK


async def _act(hosts: list[Host], opts: DeployOptions, args: argparse.Namespace) -> list[HostResult]:
    progress = Progress(len(hosts))
    if args.uninstall:
        await _drain(opts, [h.name for h in hosts])
        return await run_fleet(hosts, opts, lambda node: uninstall_host(node, opts), progress)
    try:
        nc = await connect_nats(opts)
    except Exception as exc:
        if not args.status:  # deploy cannot verify agents without NATS: touch no host
            raise ConnectionError(redact(f"cannot verify agents: {exc}", opts.secrets)) from None
        nc = None
    try:
        if args.status:
            return await run_fleet(hosts, opts, lambda node: status_host(node, opts, nc), progress)
        assert nc is not None

        async def deploy(node: Node) -> HostResult:
            return await deploy_host(node, opts, nc)

        return await run_fleet(hosts, opts, deploy, progress)
    finally:
        if nc is not None:
            await nc.close()
