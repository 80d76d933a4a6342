"""Rate-limited raw Inspector records (pure): at most ``rate_per_s`` per node, shared fairly across communicators.

A token bucket (one second of burst) bounds the rate. The allowance of each batch goes, one record at a time, to the
communicator served least so far among those in the batch (a new one starts level with the least served), so over
time every communicator gets an equal share of the raw records, or all of its own when it has fewer; each one's share
is spread evenly over its records, so the samples cover the batch's time span rather than its start.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Sequence

from ranksight.schemas.records import InspectorRecord

MAX_TRACKED_COMMS = 65_536  # served counts kept at most (then they start again level)


class RawSampler:
    def __init__(self, rate_per_s: float) -> None:
        self.rate = rate_per_s
        self.capacity = max(rate_per_s, 1.0) if rate_per_s > 0 else 0.0
        self.tokens = self.capacity
        self.last_s: float | None = None
        self.served: dict[str, int] = {}  # raw records published per communicator
        self.kept = self.skipped = 0

    def take(self, records: Sequence[InspectorRecord], now_s: float) -> list[InspectorRecord]:
        """The records of this batch to publish raw (``now_s``: a monotonic clock), in their order."""
        if self.last_s is not None:
            self.tokens = min(self.capacity, self.tokens + (now_s - self.last_s) * self.rate)
        self.last_s = now_s
        allowance = min(int(self.tokens), len(records))
        by_comm: dict[str, list[int]] = defaultdict(list)
        for i, rec in enumerate(records):
            by_comm[rec.comm_id].append(i)
        if len(self.served) + len(by_comm) > MAX_TRACKED_COMMS:
            self.served.clear()
        floor = min(self.served.values(), default=0)
        for comm in by_comm:
            self.served.setdefault(comm, floor)
        shares = dict.fromkeys(by_comm, 0)
        heap = [(self.served[comm], order, comm) for order, comm in enumerate(by_comm)]
        heapq.heapify(heap)
        for _ in range(allowance):
            served, order, comm = heapq.heappop(heap)
            shares[comm] += 1
            if shares[comm] < len(by_comm[comm]):  # exhausted comms leave the heap
                heapq.heappush(heap, (served + 1, order, comm))
        picked: list[int] = []
        for comm, share in shares.items():
            if share:
                self.served[comm] += share
                indexes = by_comm[comm]
                step = len(indexes) / share
                picked += [indexes[int(k * step)] for k in range(share)]
        self.tokens -= len(picked)
        self.kept += len(picked)
        self.skipped += len(records) - len(picked)
        return [records[i] for i in sorted(picked)]
