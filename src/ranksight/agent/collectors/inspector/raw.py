"""Raw Inspector records on request: one page of the records of some communicators within a dump-time window, read
from this node's own dump files (the ``inspector_raw`` command; the aggregator asks when a finding fires).

Only the dump directory's own regular files are read (``*.log``/``*.jsonl`` directly in it, as the tailer reads them;
symlinks, FIFOs and devices are skipped), never a path from the request: the request's cursor only names a file of that
listing. The plugin's dump thread appends records in dump-time order, so a file is searched by bisection for the
window's start and read until a record dumped after the window's end. Each page is bounded in records, JSON bytes and
file bytes read; ``next`` says where the following page starts. Blocking I/O: run it on a worker thread.

Inspector v4.3+ payload lines take their context from their dump's marker (:class:`~.parse.DumpContext`): a read that
starts inside a dump (a bisection point, a cursor) first finds the marker before it and replays the dump up to there.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ranksight.agent.collectors.inspector.tailer import LIVE_SUFFIXES
from ranksight.formats.inspector import DumpContext, ParseError
from ranksight.schemas.records import InspectorRecord
from ranksight.schemas.records.inspector import RawCursor, RawRecordsRequest
from ranksight.schemas.structs import set_fields

_DUMP_TS = re.compile(rb'"dump_timestamp_us":(\d+)')
_BISECT_STOP = 64 * 1024  # below this many bytes, read on instead of bisecting further
_MARKER = b'"dump_stats":'
_BACK_BLOCK = 64 * 1024


@dataclass(frozen=True)
class RawLimits:
    max_records: int
    max_bytes: int
    scan_bytes: int
    max_window_s: float


@dataclass
class RawPage:
    records: list[dict[str, Any]] = field(default_factory=list)
    next: RawCursor | None = None
    scanned_bytes: int = 0
    bad_lines: int = 0
    size: int = 0  # JSON bytes of the records


def check_request(req: RawRecordsRequest, limits: RawLimits) -> None:
    """ValueError when the request asks more than this agent serves."""
    if req.to_us - req.from_us > limits.max_window_s * 1e6:
        raise ValueError(
            f"window of {(req.to_us - req.from_us) / 1e6:.0f} s is wider than raw_max_window_s "
            f"({limits.max_window_s:.0f} s)"
        )


def _dump_ts(line: bytes) -> int | None:
    m = _DUMP_TS.search(line)
    return int(m.group(1)) if m else None


def _first_at_or_after(fh: IO[bytes], size: int, from_us: int) -> int:
    """Offset of a line start at or before the first line dumped at ``from_us`` or later (dump order: ascending)."""
    lo, hi = 0, size  # lo: a line start whose line is before from_us, or 0
    while hi - lo > _BISECT_STOP:
        mid = (lo + hi) // 2
        fh.seek(mid)
        fh.readline()  # the rest of a line begun before mid
        start = fh.tell()
        line = fh.readline()
        ts = _dump_ts(line) if line.endswith(b"\n") else None
        if ts is None or start >= hi:
            hi = mid  # no complete dated line there: look before it
        elif ts < from_us:
            lo = start + len(line)
        else:
            hi = mid
    return lo


def _open_dump(fh: IO[bytes], offset: int, max_back: int) -> DumpContext:
    """The context at ``offset`` (a line start): the last dump marker before it, within ``max_back`` bytes, replayed
    up to ``offset`` (a fresh context when there is none: self-contained lines need none)."""
    ctx = DumpContext()
    pos = offset
    tail = b""
    while pos > 0 and offset - pos < max_back:
        step = min(_BACK_BLOCK, pos)
        fh.seek(pos - step)
        block = fh.read(step) + tail
        pos -= step
        at = block.rfind(_MARKER)
        line_start = block.rfind(b"\n", 0, at) + 1 if at >= 0 else 0
        if at >= 0 and (line_start > 0 or pos == 0):
            start = pos + line_start
            fh.seek(start)
            for line in fh.read(offset - start).splitlines():
                try:
                    ctx.read(line)
                except ParseError:
                    pass
            return ctx
        first = block.find(b"\n") if at < 0 else -1
        tail = block[
            : first if first >= 0 else len(block)
        ]  # a line (the marker's too) may straddle the blocks
    return ctx


def read_page(directory: Path, req: RawRecordsRequest, limits: RawLimits) -> RawPage:
    """One page of the answer to ``req`` (blocking I/O)."""
    page = RawPage()
    wanted = set(req.comms)
    needles = [c.encode() for c in wanted]
    max_records = min(req.max_records or limits.max_records, limits.max_records)
    try:
        names = sorted(e.name for e in os.scandir(directory) if e.name.endswith(LIVE_SUFFIXES))
    except FileNotFoundError:
        return page
    cursor = req.cursor
    for name in names:
        if cursor is not None and name < cursor.file:
            continue
        start = cursor.offset if cursor is not None and name == cursor.file else None
        done = _read_file(directory / name, start, req, wanted, needles, max_records, limits, page)
        if not done:
            return page
    page.next = None
    return page


def _read_file(path: Path, start: int | None, req: RawRecordsRequest, wanted: set[str], needles: list[bytes],
               max_records: int, limits: RawLimits, page: RawPage) -> bool:  # fmt: skip
    """Add the file's matching records to ``page``; False when the page filled up (``page.next`` set)."""
    try:  # no symlink (it could point anywhere), no blocking open of a FIFO
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return True
    with open(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return True
        offset = _first_at_or_after(fh, st.st_size, req.from_us) if start is None else min(start, st.st_size)
        ctx = _open_dump(fh, offset, limits.scan_bytes)
        fh.seek(offset)
        for line in fh:
            if not line.endswith(b"\n"):
                break  # being written: not a record yet
            if page.scanned_bytes >= limits.scan_bytes:
                page.next = RawCursor(file=path.name, offset=offset)
                return False
            page.scanned_bytes += len(line)
            offset += len(line)
            ts = _dump_ts(line)
            if ts is not None and ts > req.to_us:
                break  # dumped after the window: so is the rest of the file
            if (
                ts is not None
                and _MARKER not in line
                and (ts < req.from_us or not any(n in line for n in needles))
            ):
                continue  # a self-contained record outside the request: not worth decoding
            try:
                rec = ctx.read(line)
            except ParseError:
                page.bad_lines += 1
                continue
            if type(rec) is not InspectorRecord or not req.from_us <= rec.dump_ts_us <= req.to_us:
                continue
            if rec.comm_id not in wanted and rec.comm_name not in wanted:
                continue
            values = set_fields(rec)  # plain numbers and strings
            size = len(json.dumps(values)) + 2
            if page.records and (len(page.records) >= max_records or page.size + size > limits.max_bytes):
                page.next = RawCursor(file=path.name, offset=offset - len(line))
                return False
            page.records.append(values)
            page.size += size
    return True
