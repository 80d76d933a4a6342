"""Tail the Inspector dump files of one directory: new files, complete lines only, truncation, rotation, restarts.

A file is identified by its path and inode. Each poll reads at most ``chunk_bytes`` per file from the last offset and
keeps only complete lines (the rest is re-read next time), so memory stays flat on multi-GB files and a line being
written is never parsed half-way. A smaller size than the offset means truncation, another inode means the file was
replaced (rotation): both restart at 0. A file rewritten in place and grown past the offset between two reads (a
truncation the size no longer shows, or a new file that got the old one's inode) is told by a fingerprint of the
bytes read so far (:func:`fingerprint`: the file's first and last ``FINGERPRINT_BYTES`` before the offset), checked
before each read and saved with the offset: it restarts at 0 too, never in the middle of another dump under the old
one's marker. A dump-named path that is not a regular file (a FIFO would block the read
forever, a device never end) is skipped and listed in ``skipped``.

Offsets advance in two steps: ``read`` moves the *read* offset; :meth:`Tailer.acked` moves the *committed* offset once
the records up to there are acknowledged by the stream. Only committed offsets are saved, so a restart (or a NATS
outage) re-reads what was not acknowledged instead of losing it.

Each file has its own :class:`~formats.inspector.DumpContext` (Inspector v4.3+ payload lines take
their header and metadata from the dump marker before them). A chunk ends at a line boundary that may fall inside a
dump, so every chunk records the context at its end, and the state file saves the context of the committed offset
beside it: a restart resumes mid-dump with its marker, never with bare payloads and no context.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from ranksight.formats.inspector import DumpContext, InspectorParseError, parse_lines
from ranksight.schemas.records import InspectorDumpStatsRecord, InspectorRecord

LIVE_SUFFIXES = (".log", ".jsonl")
FINGERPRINT_BYTES = 1024  # of the file's start and of what precedes the offset: what tells a rewritten file


@dataclass
class FileState:
    inode: int
    generation: int = 0  # which reading of the path this is (each restart at 0 is a new one)
    committed: int = 0  # acknowledged up to here: what the state file keeps
    read: int = 0  # read (and handed out) up to here
    pending: list[int] = field(
        default_factory=list
    )  # end offsets handed out, not yet acknowledged, ascending
    acked: set[int] = field(default_factory=set)  # acknowledged out of order, waiting for earlier ones
    context: DumpContext = field(default_factory=DumpContext)  # the dump open at ``read``
    dumps: dict[int, dict[str, Any] | None] = field(default_factory=dict)  # the open dump at each pending end
    committed_dump: dict[str, Any] | None = None  # the open dump at ``committed``: saved with it
    fingerprint: str | None = (
        None  # of the bytes before ``read`` (None: not known, a state file of an older agent)
    )
    fingerprints: dict[int, str] = field(default_factory=dict)  # at each pending end
    committed_fingerprint: str | None = None  # at ``committed``: saved with it
    bad_lines: int = 0
    records: int = 0


@dataclass
class Chunk:
    path: str
    inode: int
    generation: int  # of the reading it belongs to: a late ack of an earlier one commits nothing
    end: int
    records: list[InspectorRecord]
    bad_lines: int
    first_error: str | None
    more: bool = False  # the read stopped at its size bound: the file holds more (a backlog)
    dump_stats: list[InspectorDumpStatsRecord] = field(default_factory=list)  # v4.1+ markers read


class Tailer:
    def __init__(self, directory: Path, state_file: Path, chunk_bytes: int = 1 << 20) -> None:
        self.directory = directory
        self.state_file = state_file
        self.chunk_bytes = chunk_bytes
        self.files: dict[str, FileState] = {}
        self.dirty = False
        self.bad_lines = 0  # since start, across rotations
        self.records = 0
        self.skipped: dict[str, str] = {}  # dump-named paths that are not regular files -> what they are
        self.generations = 0  # readings started (a path read again from 0 is a new one)

    # -- state file -----------------------------------------------------------------------------------------------
    def load(self) -> None:
        try:
            saved = json.loads(self.state_file.read_text())
        except FileNotFoundError:
            return
        except ValueError:
            return  # a corrupt state file means re-reading from the start: duplicates are dropped downstream
        for path, entry in saved.get("files", {}).items():
            if (
                isinstance(entry, dict)
                and isinstance(entry.get("inode"), int)
                and isinstance(entry.get("offset"), int)
            ):
                off, dump, mark = entry["offset"], entry.get("dump"), entry.get("fingerprint")
                mark = mark if isinstance(mark, str) else None
                self.files[path] = FileState(entry["inode"], committed=off, read=off,
                                             context=DumpContext.restore(dump), committed_dump=dump,
                                             fingerprint=mark, committed_fingerprint=mark)  # fmt: skip

    def save(self) -> None:
        data = {"files": {p: {"inode": f.inode, "offset": f.committed, "dump": f.committed_dump,
                              "fingerprint": f.committed_fingerprint}
                          for p, f in self.files.items()}}  # fmt: skip
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.state_file)  # atomic: a crash leaves the old or the new file, never half of one
        self.dirty = False

    # -- reading --------------------------------------------------------------------------------------------------
    def poll(self) -> list[Chunk]:
        """One pass over the directory: the next chunk of complete lines of every file that grew (blocking I/O)."""
        chunks = []
        try:
            names = sorted(e.name for e in os.scandir(self.directory) if e.name.endswith(LIVE_SUFFIXES))
        except FileNotFoundError:
            return []
        paths = [str(self.directory / name) for name in names]
        self.skipped = {p: kind for p, kind in self.skipped.items() if p in paths}  # gone since: forgotten
        for path in paths:
            chunk = self._read(path)
            if chunk is not None:
                chunks.append(chunk)
        return chunks

    def _read(self, path: str) -> Chunk | None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # opening a FIFO must not wait for a writer
        except (FileNotFoundError, PermissionError):
            return None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # a FIFO or device would block or never end: not a dump file
            os.close(fd)
            self.skipped[path] = _kind(st.st_mode)
            return None
        self.skipped.pop(path, None)
        with open(fd, "rb") as fh:
            state = self.files.get(path)
            if state is None or state.inode != st.st_ino or st.st_size < state.read:
                state = self._restart(path, st.st_ino)  # new, replaced (rotated) or truncated
            if st.st_size <= state.read:
                return None
            if state.fingerprint is not None and fingerprint(fh, state.read) != state.fingerprint:
                state = self._restart(path, st.st_ino)  # rewritten in place, grown past the offset
            fh.seek(state.read)
            data = fh.read(self.chunk_bytes)
            end = data.rfind(b"\n")
            if end < 0 and len(data) < self.chunk_bytes:
                return None  # no complete line yet
            mark = fingerprint(fh, state.read + (end + 1 if end >= 0 else len(data)))
        records: list[InspectorRecord]
        stats: list[InspectorDumpStatsRecord] = []
        first_error: str | None
        if end < 0:  # a "line" longer than a whole chunk is not Inspector output: skip it as bad
            records, bad, first_error = [], 1, f"line longer than {self.chunk_bytes} bytes"
            end = len(data) - 1
        else:
            records, bad, first_error = parse_chunk(data[: end + 1], state.context, stats.append)
        state.read += end + 1
        state.pending.append(state.read)
        state.dumps[state.read] = state.context.snapshot()
        state.fingerprint = state.fingerprints[state.read] = mark
        state.records += len(records)
        state.bad_lines += bad
        self.records += len(records)
        self.bad_lines += bad
        return Chunk(path, state.inode, state.generation, state.read, records, bad, first_error,
                     len(data) == self.chunk_bytes, stats)  # fmt: skip

    def _restart(self, path: str, inode: int) -> FileState:
        self.generations += 1
        self.dirty = True
        state = self.files[path] = FileState(inode, self.generations)
        return state

    def acked(self, chunk: Chunk) -> None:
        """The chunk's records are in the stream: advance the committed offset over contiguous acks."""
        state, end = self.files.get(chunk.path), chunk.end
        if (
            state is None
            or (state.inode, state.generation) != (chunk.inode, chunk.generation)
            or end not in state.pending
        ):
            return  # the file was replaced, truncated or rewritten since: nothing to commit
        state.acked.add(end)
        while state.pending and state.pending[0] in state.acked:
            state.committed = state.pending.pop(0)
            state.acked.discard(state.committed)
            state.committed_dump = state.dumps.pop(state.committed, None)
            state.committed_fingerprint = state.fingerprints.pop(state.committed, None)
            self.dirty = True

    def status(self) -> dict[str, Any]:
        return {
            "directory": str(self.directory),
            "files": {
                p: {
                    "inode": f.inode,
                    "committed": f.committed,
                    "read": f.read,
                    "records": f.records,
                    "bad_lines": f.bad_lines,
                    "dumps_cut_short": f.context.cut_short,
                    "records_missing": f.context.missing,
                    "proxy_traces": f.context.proxy_traces,
                    "other_events": f.context.other_events,
                }
                for p, f in self.files.items()
            },
            "records": self.records,
            "bad_lines": self.bad_lines,
            "skipped": dict(self.skipped),
        }


def fingerprint(fh: BinaryIO, offset: int) -> str:
    """What identifies the first ``offset`` bytes of an open file: a hash of its first and of its last
    :data:`FINGERPRINT_BYTES` before ``offset`` (two small reads, whatever the file's size)."""
    fh.seek(0)
    head = fh.read(min(offset, FINGERPRINT_BYTES))
    start = max(0, offset - FINGERPRINT_BYTES)
    fh.seek(start)
    tail = fh.read(offset - start)
    return hashlib.blake2b(head + b"|" + tail, digest_size=16).hexdigest()


def _kind(mode: int) -> str:
    kinds = {stat.S_IFIFO: "a FIFO", stat.S_IFDIR: "a directory", stat.S_IFCHR: "a character device",
             stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}  # fmt: skip
    return kinds.get(stat.S_IFMT(mode), "not a regular file")


def parse_chunk(
    data: bytes, context: DumpContext, on_stats: Callable[[InspectorDumpStatsRecord], None]
) -> tuple[list[InspectorRecord], int, str | None]:
    """Parse complete lines of a file whose earlier lines left ``context``; return (records, bad line count, first
    error). A dump cut short (a new marker while the previous dump still expects payloads) counts as a bad line; its
    records are kept."""
    errors: list[InspectorParseError] = []
    records = list(parse_lines(data.splitlines(), errors.append, context, on_stats))
    return records, len(errors), str(errors[0]) if errors else None
