"""``ranksight probe <what> ...``: run active probes by hand."""

from __future__ import annotations

import argparse
import importlib

# probe family -> module with ``register_probe(subparsers)``
PROBE_MODULES = [
    "ranksight.agent.probe.cli",
    "ranksight.agent.gpuprobe.cli",
]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("probe", help="run an active probe by hand")
    kinds = p.add_subparsers(dest="probe", required=True, metavar="PROBE")
    for name in PROBE_MODULES:
        importlib.import_module(name).register_probe(kinds)
