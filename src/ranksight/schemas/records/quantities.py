"""The ranges of the numbers records carry: every ``int`` and ``float`` field of a record names one of these.

Decoding already bounds every number to what the store holds (BIGINT, finite DOUBLE); that is not enough once a value
meets arithmetic: ``1e308 * 1e9`` overflows, ``2**63 // 1`` no longer fits an int64 array, a timeout of 10^300 s makes
a deadline no clock reaches. Each quantity here is bounded so that what the aggregator computes from it (seconds
scaled to nanoseconds and added to a timestamp, sizes summed over a batch, microseconds turned into slices) stays
finite and within 64 bits, with room to spare; a value outside its range is refused at decode (``bad_record``) like
any malformed field. ``tests/unit/test_record_kinds.py`` fails on a record number without a declared range, and
``tests/chaos/test_extreme_values.py`` feeds every kind the extremes of these ranges through ingest, live state, every
rule and replay.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

# A timeout, interval or duration: at most a year. In nanoseconds (3.2e16) added to any timestamp below, it fits int64.
MAX_SECONDS = 366 * 86400
# Timestamps: up to 2**62 ns since the epoch (the year 2116), so a timestamp plus a MAX_SECONDS duration fits int64.
MAX_TS_NS = 2**62
MAX_TS_US = MAX_TS_NS // 1000
# Counts and sequence numbers: 2**53, exact as a float too (statistics turn them into floats), summed over a batch of
# at most 100,000 records far inside int64.
MAX_COUNT = 2**53
MAX_BYTES = 2**53  # a message or a transfer; a sum of them in `Bytes` of a summary
MAX_RANKS = 2**24  # ranks of a communicator, ranks of a job
MAX_PID = 2**31 - 1  # pid_t
# A measured gauge (watts, hertz, bytes per second, degrees, percent): physical values in base units are far below
# 10^18; the bound keeps sums and products of a few of them finite.
MAX_GAUGE = 1e18

Seconds = Annotated[float, Meta(ge=0, le=MAX_SECONDS)]
Micros = Annotated[float, Meta(ge=0, le=MAX_SECONDS * 1e6)]  # a duration in microseconds
MicrosSpan = Annotated[int, Meta(ge=1, le=MAX_SECONDS * 10**6)]  # a window or slice length, µs
MicrosLength = Annotated[int, Meta(ge=0, le=MAX_SECONDS * 10**6)]  # the same, 0 allowed ("none")
TimestampNs = Annotated[int, Meta(ge=0, le=MAX_TS_NS)]
TimestampUs = Annotated[int, Meta(ge=0, le=MAX_TS_US)]
Count = Annotated[int, Meta(ge=0, le=MAX_COUNT)]
Bytes = Annotated[int, Meta(ge=0, le=MAX_BYTES)]
Rank = Annotated[int, Meta(ge=0, le=MAX_RANKS)]
RankCount = Annotated[int, Meta(ge=1, le=MAX_RANKS)]
Pid = Annotated[int, Meta(ge=-1, le=MAX_PID)]  # -1: a process RAS cannot name
Gauge = Annotated[float, Meta(ge=-MAX_GAUGE, le=MAX_GAUGE)]
Counter = Annotated[int, Meta(ge=0, le=2**63 - 1)]  # a hardware counter as read (u64 kept as BIGINT)
Index = Annotated[int, Meta(ge=-1, le=2**31 - 1)]  # a device or slice index (-1: none)
Port = Annotated[int, Meta(ge=1, le=65535)]
Integer = Annotated[int, Meta(ge=-MAX_COUNT, le=MAX_COUNT)]  # a number with no unit (a marker's field)
