"""``ranksight analyze inspector DIR``: the findings of the one straggler engine, offline from dump files; ``--json``
prints exactly one JSON object. (``ranksight stragglers`` asks the aggregator: :mod:`aggregator.api.endpoints`.)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ranksight.agent.collectors.inspector.dumps import SUFFIXES, DumpReader, other_files
from ranksight.aggregator.analysis.straggler_live import drop_coverage
from ranksight.aggregator.hang_cli import register_hang
from ranksight.aggregator.models.straggler.engine import analyze_records
from ranksight.aggregator.models.straggler.findings import StragglerParams
from ranksight.aggregator.state.inspector_drops import InspectorDropTracker
from ranksight.api.endpoints import STRAGGLER_COLUMNS
from ranksight.core.cliutil import EXIT_FAILED, EXIT_OK, EXIT_USAGE, print_json, print_table

MAX_NAMED = 5  # files named in the note on files not read
OFFLINE = ""  # the cluster and node of markers read from files: one of each


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
    drops = InspectorDropTracker()
    reader = DumpReader(args.directory, on_stats=lambda marker: drops.add_marker(OFFLINE, OFFLINE, marker, 0))
    result = analyze_records(reader.records(), StragglerParams(window_s=args.window_s))
    result.bad_lines = reader.bad_lines
    cited = drops.coverage(OFFLINE)
    for finding in result.stragglers:  # as a live straggler alert's coverage does
        finding.coverage = drop_coverage(cited, finding)
    others = other_files(args.directory)
    if others:
        named = ", ".join(str(p.relative_to(args.directory)) for p in others[:MAX_NAMED])
        print(f"ranksight: {len(others)} file{'s' if len(others) > 1 else ''} not read (not {', '.join(SUFFIXES)}): "
              f"{named}{' ...' if len(others) > MAX_NAMED else ''}", file=sys.stderr)  # fmt: skip
    if (
        reader.files == 0
    ):  # the directory asked holds no dumps: as wrong an argument as a path that is no directory
        print(f"ranksight: no Inspector dump files ({', '.join('*' + s for s in SUFFIXES)}) under {args.directory}: "
              "nothing to analyze", file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    if result.records == 0:  # dumps, none of whose lines is a record: nothing was analyzed
        print(f"ranksight: no Inspector record in {reader.files} dump files ({result.bad_lines} bad lines): "
              "nothing to analyze", file=sys.stderr)  # fmt: skip
        return EXIT_FAILED
    if args.json:
        print_json({**result.as_dict(), "files": reader.files, "files_not_read": [str(p) for p in others]})
        return EXIT_OK
    print(f"{reader.files} files, {result.records} records, {result.operations} operations, capture model "
          f"{result.capture_model}, {result.bad_lines} bad lines, {result.bw_mismatches} bandwidth mismatches",
          file=sys.stderr)  # fmt: skip
    if result.stragglers:
        print_table([f.as_dict() for f in result.stragglers], STRAGGLER_COLUMNS[1:])
    else:
        print(f"no stragglers found in {result.records} records of {reader.files} files")
    return EXIT_OK
