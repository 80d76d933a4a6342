"""``ranksight``: the thin command dispatcher. Each component registers its own subcommands."""

from __future__ import annotations

import argparse
import faulthandler
import importlib
import os
import signal
import sys
from collections.abc import Sequence

from ranksight.core.errors import EXIT_INTERRUPTED, exit_status
from ranksight.core.natsconn import NatsUnreachable
from ranksight.core.version import ranksight_version

# Each command and the module that registers it (``register(subparsers)``). Only the module of the command being run is
# imported, so a process loads what its command needs: the agent never loads DuckDB, pyarrow, the aiohttp server or the
# aggregator (tests/unit/test_cli_dispatch.py checks this table against what the modules register).
COMMANDS: dict[str, str] = {
    "up": "ranksight.commands.up",
    "demo": "ranksight.commands.demo",
    "agent": "ranksight.agent.cli",
    "aggregator": "ranksight.aggregator.cli",
    "parse": "ranksight.commands.parse",
    "ras": "ranksight.agent.collectors.ras.cli",
    "probe": "ranksight.commands.probe",
    "deploy": "ranksight.deploy.cli",
    "analyze": "ranksight.aggregator.stragglers_cli",
    "report": "ranksight.aggregator.report.cli",
    # the query commands, one per endpoint of the registry (ranksight.aggregator.api.endpoints)
    **dict.fromkeys(
        [
            "status",
            "nodes",
            "alerts",
            "sql",
            "export",
            "jobs",
            "comms",
            "gpus",
            "nics",
            "links",
            "gpu-probes",
            "markers",
            "stragglers",
            "cluster-map",
            "series",
            "node",
            "silence",
            "incidents",
        ],
        "ranksight.aggregator.api.cli",
    ),
}


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser for ``argv``: only its command's module when it names one, every command's otherwise (help, errors)."""
    parser = argparse.ArgumentParser(
        prog="ranksight", description="Live diagnosis of RCCL/NCCL training jobs."
    )
    parser.add_argument("--version", action="version", version=f"ranksight {ranksight_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # The command is the first word that is not an option: the top-level options take no value.
    command = next((arg for arg in argv or () if not arg.startswith("-")), None)
    modules = [COMMANDS[command]] if command in COMMANDS else COMMANDS.values()
    for name in dict.fromkeys(modules):
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    # `kill -USR1 <pid>` prints every thread's stack to stderr: how an operator sees where a process is stuck.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv).parse_args(argv)
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
