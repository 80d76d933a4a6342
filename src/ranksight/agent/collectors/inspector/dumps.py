"""Offline reading of an Inspector dump directory: every ``*.log`` / ``*.jsonl`` (optionally ``.gz``) below it.

Lines are streamed (memory stays flat on big files); bad lines are counted, never fatal. Other files below it (a
``.json`` beside the dumps, a README) are not read, and listed (:func:`other_files`) so that a reader can say so.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ranksight.formats.inspector import InspectorParseError, parse_lines
from ranksight.schemas.records import InspectorDumpStatsRecord, InspectorRecord

SUFFIXES = (".log", ".jsonl", ".log.gz", ".jsonl.gz")


def dump_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file() and p.name.endswith(SUFFIXES))


def other_files(directory: Path) -> list[Path]:
    """The files below ``directory`` that are not dump files: not read."""
    return sorted(p for p in directory.rglob("*") if p.is_file() and not p.name.endswith(SUFFIXES))


@dataclass
class DumpReader:
    directory: Path
    bad_lines: int = 0
    files: int = 0  # dump files read
    # each v4.1+ dump marker read, as it is read (folded by the caller: a directory's markers are never all held)
    on_stats: Callable[[InspectorDumpStatsRecord], None] | None = None

    def records(self) -> Iterator[InspectorRecord]:
        for path in dump_files(self.directory):
            self.files += 1
            opener = gzip.open if path.name.endswith(".gz") else open
            with opener(path, "rb") as fh:
                yield from parse_lines(fh, self._bad, on_stats=self.on_stats)

    def _bad(self, _error: InspectorParseError) -> None:
        self.bad_lines += 1
