"""The dispatcher imports only the module of the command being run; its table matches what the modules register; a query
command and ``--version`` stay light (benchmarks/cli.py measures their time)."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

from ranksight.cli import COMMANDS, build_parser


def _registered(module: str) -> set[str]:
    sub = argparse.ArgumentParser().add_subparsers()
    importlib.import_module(module).register(sub)
    return set(sub.choices)


def _commands(parser: argparse.ArgumentParser) -> set[str]:
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return set(sub.choices)


def test_table_names_every_command_of_every_module() -> None:
    for module in set(COMMANDS.values()):
        assert _registered(module) == {name for name, owner in COMMANDS.items() if owner == module}, module


def test_a_command_brings_only_its_own_module() -> None:
    assert _commands(build_parser(["agent", "--only", "gpu"])) == {"agent"}
    # a query command brings the module of every query command (derived from the endpoint registry), nothing else
    queries = {name for name, owner in COMMANDS.items() if owner == "ranksight.commands.queries"}
    assert _commands(build_parser(["sql", "SELECT 1"])) == queries
    assert {"sql", "nodes", "gpu-probes", "silence"} <= queries and "agent" not in queries


def test_help_and_unknown_commands_see_every_command() -> None:
    for argv in ([], ["--help"], ["no-such-command"]):
        assert _commands(build_parser(argv)) == set(COMMANDS)


# What a query command must not load: the aggregator's storage and analysis stack (the endpoint declarations and the
# client are apart from the server binding, ranksight.api), and what `--version` must not load either.
HEAVY = ("duckdb", "pyarrow", "numpy", "ranksight.aggregator", "ranksight.agent", "ranksight.deploy")


def _loaded_by(argv: list[str]) -> set[str]:
    """The modules a fresh interpreter holds after building the parser and parsing ``argv`` (``--version`` exits)."""
    code = (
        "import sys\nfrom ranksight.cli import build_parser\n"
        f"try:\n    build_parser({argv!r}).parse_args({argv!r})\nexcept SystemExit:\n    pass\n"
        "print('\\n'.join(sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return set(out.stdout.split())


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


def test_a_query_command_loads_no_storage_stack() -> None:
    for argv in (["status", "--json"], ["sql", "SELECT 1"], ["alerts", "--follow"], ["silence", "list"]):
        loaded = _loaded_by(argv)
        assert "ranksight.api.cli" in loaded and "nats" in loaded  # it did build its command
        assert _heavy(loaded) == [], argv


def test_version_loads_almost_nothing() -> None:
    loaded = _loaded_by(["--version"])
    assert sorted(m for m in loaded if m.startswith("ranksight")) == [
        "ranksight", "ranksight.cli", "ranksight.core", "ranksight.core.version", "ranksight.errors",
    ]  # fmt: skip
    assert not {"pydantic", "nats", "msgspec"} & loaded
