"""``ranksight analyze inspector DIR``: the findings of the one straggler engine, offline from dump files; ``--json``
prints exactly one JSON object. (``ranksight stragglers`` asks the aggregator: :mod:`aggregator.api.endpoints`.)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ranksight.agent.collectors.inspector.dumps import DumpReader
from ranksight.aggregator.analysis.stragglers import StragglerParams, analyze_records
from ranksight.aggregator.hang_cli import register_hang
from ranksight.api.endpoints import STRAGGLER_COLUMNS
from ranksight.core.cliutil import EXIT_USAGE, print_json, print_table


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    analyze = sub.add_parser("analyze", help="offline analysis of captured files")
    what = analyze.add_subparsers(dest="source", required=True, metavar="SOURCE")
    insp = what.add_parser("inspector", help="find stragglers in a directory of Inspector dump files")
    insp.add_argument(
        "directory", metavar="DIR", type=Path, help="searched recursively for *.log / *.jsonl (.gz)"
    )
    insp.add_argument("--json", action="store_true", help="one JSON object on stdout")
    insp.add_argument("--window-s", type=float, default=StragglerParams.window_s,
                      help="analysis window in seconds of dump time (default %(default)s)")  # fmt: skip
    insp.set_defaults(func=analyze_inspector)
    register_hang(what)


def analyze_inspector(args: argparse.Namespace) -> int:
    if not args.directory.is_dir():
        print(f"ranksight: not a directory: {args.directory}", file=sys.stderr)
        return EXIT_USAGE
    if not args.window_s > 0:
        print("ranksight: --window-s must be positive", file=sys.stderr)
        return EXIT_USAGE
    reader = DumpReader(args.directory)
    result = analyze_records(reader.records(), StragglerParams(window_s=args.window_s))
    result.bad_lines = reader.bad_lines
    if args.json:
        print_json(result.as_dict())
        return 0
    print(f"{result.records} records, {result.operations} operations, capture model {result.capture_model}, "
          f"{result.bad_lines} bad lines, {result.bw_mismatches} bandwidth mismatches", file=sys.stderr)  # fmt: skip
    if result.stragglers:
        print_table([f.as_dict() for f in result.stragglers], STRAGGLER_COLUMNS[1:])
    else:
        print("no stragglers found")
    return 0
