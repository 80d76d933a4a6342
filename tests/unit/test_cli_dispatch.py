"""The dispatcher imports only the module of the command being run; its table matches what the modules register."""

from __future__ import annotations

import argparse
import importlib

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
    assert _commands(build_parser(["sql", "SELECT 1"])) == {"nodes", "alerts", "sql", "export"}


def test_help_and_unknown_commands_see_every_command() -> None:
    for argv in ([], ["--help"], ["no-such-command"]):
        assert _commands(build_parser(argv)) == set(COMMANDS)
