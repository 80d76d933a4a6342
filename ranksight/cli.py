"""``ranksight``: the thin command dispatcher. Each component registers its own subcommands."""

from __future__ import annotations

import argparse
import faulthandler
import importlib
import os
import signal
import sys

from ranksight.cliutil import EXIT_INTERRUPTED
from ranksight.errors import exit_status
from ranksight.natsconn import NatsUnreachable
from ranksight.version import ranksight_version

# One module per component; each has ``register(subparsers)``.
COMMAND_MODULES = [
    "ranksight.up",
    "ranksight.demo",
    "ranksight.agent.cli",
    "ranksight.aggregator.cli",
    "ranksight.aggregator.api.cli",
    "ranksight.parse",
    "ranksight.agent.collectors.ras.cli",
    "ranksight.probe",
    "ranksight.aggregator.links_cli",
    "ranksight.aggregator.hardware_cli",
    "ranksight.aggregator.markers_cli",
    "ranksight.deploy.cli",
    "ranksight.aggregator.stragglers_cli",
    "ranksight.aggregator.alerting_cli",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ranksight", description="Live diagnosis of RCCL/NCCL training jobs."
    )
    parser.add_argument("--version", action="version", version=f"ranksight {ranksight_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    # `kill -USR1 <pid>` prints every thread's stack to stderr: how an operator sees where a process is stuck.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except NatsUnreachable as exc:  # any command that needs NATS: one line, no traceback
        print(f"ranksight: {exc}", file=sys.stderr)
        return exit_status(exc)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`ranksight sql ... | head`): stop quietly with the status a SIGPIPE death gives, and
        # point stdout at /dev/null so the interpreter's final flush cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
