"""``ranksight``: the thin command dispatcher. Each component registers its own subcommands."""

from __future__ import annotations

import argparse
import faulthandler
import importlib
import os
import signal
import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ranksight.errors import EXIT_INTERRUPTED, exit_status

if TYPE_CHECKING:
    from ranksight.core.config import CommonSettings

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
    "analyze": "ranksight.commands.analyze",
    "report": "ranksight.aggregator.report.cli",
}
# Every other command is a query command, one per endpoint declared in ranksight.api.endpoints: this module registers
# them all, derived from the declarations, so an endpoint needs no entry here.
QUERY_COMMANDS = "ranksight.commands.queries"


class _Version(argparse.Action):
    """``--version``: the installed version, read only when asked (reading package metadata takes about 0.1 s)."""

    def __init__(
        self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: object
    ) -> None:
        super().__init__(
            option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="show the version and exit"
        )

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        from ranksight.core.version import ranksight_version

        print(f"ranksight {ranksight_version()}")
        parser.exit()


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser for ``argv``: only its command's module when it names one, every command's otherwise (help, errors)."""
    # The command is the first word that is not an option: the top-level options take no value.
    command = next((arg for arg in argv or () if not arg.startswith("-")), None)
    if command in COMMANDS:
        return _parser([COMMANDS[command]])
    if "--version" in (argv or ()):
        return _parser([])  # the version action answers before a command is looked for
    if command is not None:
        queries = _parser([QUERY_COMMANDS])
        if command in _commands_of(queries):
            return queries
    return _parser([*COMMANDS.values(), QUERY_COMMANDS])  # help, or not a command: the error lists every one


def _parser(modules: Iterable[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ranksight", description="Live diagnosis of RCCL/NCCL training jobs."
    )
    parser.add_argument("--version", action=_Version)
    # how every command loads its settings (core.cliutil.settings_from_args): the root, which sits above every command
    parser.set_defaults(load_settings=_load_settings)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in dict.fromkeys(modules):
        importlib.import_module(name).register(sub)
    return parser


def _load_settings(path: str | None, **overrides: Any) -> CommonSettings:
    """The root of the settings (every component's sections), loaded: imported when a command loads its settings, not
    to build the parser (``--version`` and help load no settings)."""
    from ranksight.settings import load_settings

    return load_settings(path, **overrides)


def _commands_of(parser: argparse.ArgumentParser) -> set[str]:
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return set(sub.choices)


def main(argv: list[str] | None = None) -> int:
    # `kill -USR1 <pid>` prints every thread's stack to stderr: how an operator sees where a process is stuck.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv).parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`ranksight sql ... | head`): stop quietly with the status a SIGPIPE death gives, and
        # point stdout at /dev/null so the interpreter's final flush cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as exc:
        # imported here, not above: `--version` and help load neither the settings nor a NATS client (benchmarks/cli.py)
        from ranksight.core.config import ConfigError
        from ranksight.core.natsconn import NatsUnreachable

        if isinstance(exc, ConfigError):  # found past loading (a rule name the aggregator does not know)
            print(f"ranksight: configuration error: {exc}", file=sys.stderr)
        elif isinstance(exc, NatsUnreachable):  # any command that needs NATS: one line, no traceback
            print(f"ranksight: {exc}", file=sys.stderr)
        else:
            raise
        return exit_status(exc)


if __name__ == "__main__":
    sys.exit(main())
