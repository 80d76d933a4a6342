"""``ranksight parse <source> ...``: parse captured outputs offline and print normalized results."""

from __future__ import annotations

import argparse
import importlib

# source family -> module with ``register_parse(subparsers)``
PARSE_MODULES = [
    "ranksight.agent.collectors.ras.cli",
    "ranksight.agent.collectors.gpu.cli",
    "ranksight.agent.collectors.nic.cli",
]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("parse", help="parse a captured output offline")
    sources = p.add_subparsers(dest="source", required=True, metavar="SOURCE")
    for name in PARSE_MODULES:
        importlib.import_module(name).register_parse(sources)
