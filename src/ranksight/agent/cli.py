"""``ranksight agent``: run the node agent in the foreground."""

from __future__ import annotations

import argparse
import os
import sys

from ranksight.agent.collectors.registry import COLLECTORS
from ranksight.agent.runtime import AgentRuntime
from ranksight.agent.settings import AgentView
from ranksight.core.cliutil import EXIT_USAGE, add_config_flags, settings_from_args
from ranksight.core.config import encode_settings
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


def run(args: argparse.Namespace) -> int:
    """Validate the settings here, then ``exec`` the agent process (:mod:`ranksight.agent.__main__`), which reads them
    back: the same pid (for systemd and Slurm), none of this process's memory."""
    overrides: dict = {}
    if args.cluster:
        overrides["cluster"] = args.cluster
    if args.node:
        overrides["agent"] = {"node": args.node}
    settings = settings_from_args(args, AgentView, **overrides)
    only = [n.strip() for n in args.only.split(",")] if args.only else []
    try:
        AgentRuntime(settings, only=only)
    except SubjectError as exc:
        print(f"ranksight: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    fd = os.memfd_create("ranksight-agent-settings", 0)  # inherited by the exec; no file, no environment
    with open(fd, "wb", closefd=False) as settings_file:
        settings_file.write(encode_settings(settings, AgentView))
    os.lseek(fd, 0, os.SEEK_SET)
    os.set_inheritable(fd, True)
    argv = [sys.executable, "-m", "ranksight.agent", "--settings-fd", str(fd)]
    argv += [arg for name in only for arg in ("--only", name)]
    # the command line as started stays visible (ps; deploy's check of a running agent)
    argv += ["--", *sys.argv]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, argv)
