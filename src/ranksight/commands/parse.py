"""``ranksight parse <source> ...``: parse captured outputs offline and print normalized results."""

from __future__ import annotations

import argparse
import importlib

from ranksight.schemas.records import RECORD_KINDS

# modules with ``register_parse(subparsers)``, from the record-kind registry (several kinds may share one)
PARSE_MODULES = list(dict.fromkeys(kind.parse for kind in RECORD_KINDS.values() if kind.parse))


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("parse", help="parse a captured output offline")
    sources = p.add_subparsers(dest="source", required=True, metavar="SOURCE")
    for name in PARSE_MODULES:
        importlib.import_module(name).register_parse(sources)
