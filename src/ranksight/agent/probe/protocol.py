"""The probe wire protocol and the arithmetic of a measurement, pure (bytes and numbers in, values out).

One TCP connection carries one operation. The client opens with a fixed 24-byte :class:`Request`; the server answers a
32-byte :class:`Reply` that grants (possibly clamped) limits or refuses; then:

- ``ECHO``: ``count`` times, the client sends ``size`` bytes and the server sends them back (RTT samples).
- ``UPLOAD``: the client streams up to ``nbytes`` for at most ``budget_ms`` then half-closes; the server, the receiver,
  times the bytes and answers a final :class:`Reply` with (bytes received, bytes timed, ns timed) and the share of that
  time its loop was stalled (``stall_permille``, in bytes that were padding before: 0 from older servers).
- ``DOWNLOAD``: the server streams up to ``nbytes`` for at most ``budget_ms`` then closes; the client times them.

Bandwidth is always timed on the receiving side, from the first to the last chunk received (the sender's clock only sees
its socket buffer fill, which overstates the rate). Rates are in bits per second.
"""

from __future__ import annotations

import enum
import itertools
import statistics
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from ranksight.errors import ParseError

MAGIC = b"RSPB"
_REQUEST = struct.Struct("!4sB3xQII")  # magic, op, pad, nbytes, count, budget_ms
_REPLY = struct.Struct("!4sBxHQQQ")  # magic, status, pad, stall_permille, a, b, c
REQUEST_SIZE = _REQUEST.size
REPLY_SIZE = _REPLY.size
CHUNK = 64 * 1024


class ProbeProtocolError(ParseError):
    """Bytes that are not this protocol (wrong magic, unknown op or status, short frame)."""


class Op(enum.IntEnum):
    ECHO = 1
    UPLOAD = 2
    DOWNLOAD = 3


class Status(enum.IntEnum):
    OK = 0
    BUSY = 1  # the server is at its concurrency limit
    REFUSED = 2  # the client address is not allowed
    BAD_REQUEST = 3


def _unpack(layout: struct.Struct, data: bytes, what: str, sender: str) -> tuple[int, ...]:
    """The fields after the magic of one frame, checked for size and magic."""
    if len(data) != layout.size:
        raise ProbeProtocolError(f"{what} must be {layout.size} bytes, got {len(data)}")
    magic, *fields = layout.unpack(data)
    if magic != MAGIC:
        raise ProbeProtocolError(f"bad magic {magic!r}: not a ranksight {sender}")
    return tuple(fields)


@dataclass(frozen=True)
class Request:
    op: Op
    nbytes: int  # ECHO: bytes per echo; UPLOAD/DOWNLOAD: total bytes
    count: int = 0  # ECHO: number of echoes
    budget_ms: int = 0  # UPLOAD/DOWNLOAD: time budget

    def encode(self) -> bytes:
        return _REQUEST.pack(MAGIC, self.op, self.nbytes, self.count, self.budget_ms)

    @classmethod
    def decode(cls, data: bytes) -> Request:
        op, nbytes, count, budget_ms = _unpack(_REQUEST, data, "request", "probe")
        try:
            return cls(Op(op), nbytes, count, budget_ms)
        except ValueError:
            raise ProbeProtocolError(f"unknown probe operation {op}") from None


@dataclass(frozen=True)
class Reply:
    """The grant (``a``/``b``/``c`` = granted nbytes, count, budget_ms) or the upload result (bytes, timed bytes, ns,
    and the receiver's ``stall_permille``)."""

    status: Status
    a: int = 0
    b: int = 0
    c: int = 0
    stall_permille: int = 0

    def encode(self) -> bytes:
        return _REPLY.pack(MAGIC, self.status, self.stall_permille, self.a, self.b, self.c)

    @classmethod
    def decode(cls, data: bytes) -> Reply:
        status, stall_permille, a, b, c = _unpack(_REPLY, data, "reply", "probe server")
        if stall_permille > 1000:
            raise ProbeProtocolError(f"stall of {stall_permille} permille: more than the whole measurement")
        try:
            return cls(Status(status), a, b, c, stall_permille)
        except ValueError:
            raise ProbeProtocolError(f"unknown reply status {status}") from None


class ReceiveMeter:
    """Times a stream on the receiving side: the clock starts at the first chunk, whose bytes are therefore not timed."""

    def __init__(self) -> None:
        self.total = 0
        self.timed = 0
        self.first_ns: int | None = None
        self.last_ns: int | None = None

    def chunk(self, nbytes: int, now_ns: int) -> None:
        if self.first_ns is None:
            self.first_ns = now_ns
        else:
            self.timed += nbytes
        self.last_ns = now_ns
        self.total += nbytes

    @property
    def elapsed_ns(self) -> int:
        return 0 if self.first_ns is None or self.last_ns is None else self.last_ns - self.first_ns


def rate_bps(timed_bytes: int, elapsed_ns: int) -> float | None:
    """Bits per second, or None when nothing could be timed (a single chunk, or nothing at all)."""
    if timed_bytes <= 0 or elapsed_ns <= 0:
        return None
    return timed_bytes * 8 * 1e9 / elapsed_ns


def rtt_stats_us(samples_ns: Sequence[int]) -> tuple[float | None, float | None]:
    """(RTT = median, jitter = mean absolute difference of successive samples), in microseconds."""
    if not samples_ns:
        return None, None
    rtt = statistics.median(samples_ns) / 1e3
    if len(samples_ns) < 2:
        return rtt, None
    diffs = [abs(b - a) for a, b in itertools.pairwise(samples_ns)]
    return rtt, sum(diffs) / len(diffs) / 1e3
