"""``ranksight analyze hang DIR``: the cross-rank Flight Recorder match, offline, on a directory of dumps.

``--json`` prints one object: ``{"findings": [{"kind", "process_group", "collective", "seq", "missing_ranks",
"mismatched_ranks", "waiting_s", "frames", "blocked_ranks", ...}], "ranks_seen", "ranks_missing_dump", "world_size", "errors"}``.
Exit 1 when a finding names a hang, 0 when every rank is consistent, 2 when nothing readable was found.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ranksight.aggregator.settings import AggregatorView
from ranksight.core.cliutil import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    add_config_flags,
    print_json,
    settings_from_args,
)
from ranksight.core.flightrec import HangReport, analyze, read_directory


def register_hang(what: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    hang = what.add_parser(
        "hang", help="match PyTorch Flight Recorder dumps across ranks: who never arrived, where"
    )
    hang.add_argument("directory", metavar="DIR", type=Path,
                      help="torch's pickle or JSON dumps (rank from the file name's trailing digits) or ranksight's")  # fmt: skip
    hang.add_argument("--json", action="store_true", help="one JSON object on stdout")
    hang.add_argument("--world-size", type=int, help="ranks in the job (default: what the dumps say)")
    hang.add_argument("--min-wait-s", type=float, default=0.0,
                      help="report a rank that has not arrived only once its peers waited this long (default 0)")  # fmt: skip
    add_config_flags(hang)
    hang.set_defaults(func=analyze_hang)


def analyze_hang(args: argparse.Namespace) -> int:
    app = settings_from_args(args, AggregatorView).agent.collectors.app
    if not args.directory.is_dir():
        print(f"ranksight: not a directory: {_text(str(args.directory))}", file=sys.stderr)
        return EXIT_USAGE
    if args.world_size is not None and args.world_size < 1:
        print("ranksight: --world-size must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    read = read_directory(args.directory, app.dump_max_bytes, app.dump_max_files)
    for error in read.errors:
        print(f"ranksight: skipped {_text(error)}", file=sys.stderr)
    if not read.dumps:
        print(f"ranksight: no Flight Recorder dump found in {_text(str(args.directory))}", file=sys.stderr)
        return EXIT_USAGE
    report = analyze(read.dumps, world_size=args.world_size, min_wait_s=args.min_wait_s)
    if args.json:
        print_json({**report.as_dict(), "errors": read.errors})
    else:
        print_report(report)
    return EXIT_FAILED if report.hang else EXIT_OK


def print_report(report: HangReport) -> None:
    missing = f", no dump from ranks {_ranks(report.ranks_missing_dump)}" if report.ranks_missing_dump else ""
    print(f"{len(report.ranks_seen)} ranks' dumps read (world size {report.world_size}){missing}")
    if not report.findings:
        print("consistent: every process group's ranks entered the same collectives")
        return
    for finding in report.findings:
        first = " (ranks diverged here first)" if finding.first_divergence else ""
        waited = "" if finding.waiting_s is None else f", peers waiting {finding.waiting_s:.1f} s"
        print(f"{finding.kind}{first}: group {_text(finding.process_group)}, {_text(finding.collective)} "
              f"seq {finding.seq}{waited}")  # fmt: skip
        if finding.missing_ranks:
            print(f"  never arrived: ranks {_ranks(finding.missing_ranks)}")
        for rank, held in sorted(finding.blocked_ranks.items()):
            print(f"  rank {rank} is held up in group {_text(held['process_group'])}, {_text(held['collective'])} "
                  f"seq {held['seq']}: not the cause here")  # fmt: skip
        for rank, verdict in sorted(finding.verdicts.items()):
            print(f"  rank {rank}: {verdict['verdict']}, called {_text(verdict['collective'])} "
                  f"{verdict['input_sizes']} {verdict['input_dtypes']}")  # fmt: skip
        for rank, frame in sorted(finding.frames.items()):
            if frame.get("where") is None:
                print(f"  rank {rank}: no frame (its dump carries no Python stack or call site)")
            else:
                print(f"  rank {rank} is at {_text(frame['where'])} ({frame['source']})")


def _ranks(ranks: list[int]) -> str:
    """Sorted ranks with runs written as ranges (``0, 2-5``): a job of thousands of ranks stays one short line."""
    runs: list[list[int]] = []
    for rank in ranks:
        if runs and rank == runs[-1][1] + 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _text(value: Any) -> str:
    """Dump contents (file and function names) are the job's: control characters are printed escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(value))
