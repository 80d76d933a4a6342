"""``ranksight analyze inspector DIR`` (offline, from dump files) and ``ranksight stragglers`` (ask the aggregator).

Both print the findings of the one straggler engine; ``--json`` prints exactly one JSON object.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ranksight.agent.collectors.inspector.dumps import DumpReader
from ranksight.aggregator.analysis.stragglers import StragglerParams, analyze_records
from ranksight.aggregator.api.cli import call_api
from ranksight.cliutil import (
    EXIT_FAILED,
    EXIT_USAGE,
    add_config_flags,
    print_json,
    print_table,
)

COLUMNS = ["hostname", "pid", "kind", "comm", "rank", "slowdown", "confidence", "evidence"]


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

    s = sub.add_parser("stragglers", help="current straggler findings, from the running aggregator")
    add_config_flags(s)
    s.add_argument("--json", action="store_true", help="one JSON object on stdout")
    s.set_defaults(func=stragglers)


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
        print_table([f.as_dict() for f in result.stragglers], COLUMNS)
    else:
        print("no stragglers found")
    return 0


def stragglers(args: argparse.Namespace) -> int:
    response = call_api(args, "stragglers")
    if response is None:
        return EXIT_FAILED
    if args.json:
        print_json({"stragglers": response.rows, "meta": response.meta})
    else:
        print_table(response.rows, ["cluster", *COLUMNS])
    return 0
