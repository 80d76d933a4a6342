"""The communication model: a comm's transfer time is its shortest exec time, turned into bus bandwidth; cross-node
comms slower than comms of the same shape or their own best are localized to the nodes they share.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import defaultdict
from typing import Any

import numpy as np

from ranksight.aggregator.models.straggler.findings import Finding, Proc, StragglerParams
from ranksight.aggregator.models.straggler.ledger import I64, Rows, run_starts
from ranksight.aggregator.models.straggler.slices import Slices

# sampled: the chance that none of a (comm, coll, size)'s samples is its last arriver's (its transfer time alone) that
# its shortest time is judged at
_NO_TRANSFER = 0.01


def _bytes(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:g} {unit}"
    return f"{size} B"


class CommsModel(Slices):
    """Communication findings (:meth:`_communication`) from a horizon's rows."""

    def __init__(self, params: StragglerParams | None = None, offline: bool = True) -> None:
        super().__init__(params, offline)
        self._comm_sized: tuple[tuple[int, int], tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]] = (
            (-1, -1),
            (np.empty(0, I64), np.empty(0, I64)),
        )

    def _comm_sizes(self) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """Per comm number, its hosts and its members (0 for a comm forgotten)."""
        stamp = (self._members_version, len(self._comm_of))
        if self._comm_sized[0] != stamp:
            comms = self._comm_of
            self._comm_sized = (stamp, (np.array([len(c.hosts) if c else 0 for c in comms], I64),
                                        np.array([len(c.members) if c else 0 for c in comms], I64)))  # fmt: skip
        return self._comm_sized[1]

    def _communication(self, rows: Rows, unjudged: set[Proc]) -> list[Finding]:
        """Cross-node comms slower than their shape or their own best; localized to the nodes they share. A comm with
        an unjudged member is left out: its transfer time is its last arriver's, whose records may be the ones not in
        (the others' times then include their wait for it)."""
        p = self.params
        # each (comm, coll, size)'s shortest time over the horizon
        shortest = np.full(len(self._lows.keys), math.inf)
        row_low = self._agg_low.values[rows.key]
        np.minimum.at(shortest, row_low, rows.low)
        low = np.flatnonzero(shortest < math.inf)
        comm = self._low_comm.values[low]
        if unjudged:
            partial = np.zeros(len(self._comm_of), bool)
            for number in np.unique(comm).tolist():
                partial[number] = any(m in unjudged for m in self._comm_of[number].members.values())  # type: ignore[union-attr]
            low, comm = low[~partial[comm]], comm[~partial[comm]]
        # cross-node comms only: intra-node comms cannot point at a node's network
        hosts, members = self._comm_sizes()
        bus = self._low_bus.values[low]
        cross = (hosts[comm] >= 2) & (bus != 0)
        if self.sampled > self.ring:
            # sampled, only a collective's sizes sampled on every rank: the shortest time is the last arriver's (its
            # transfer) only where its samples are in, and one op per comm and tick leaves a rarely sampled size with
            # its waiting ranks' samples alone. A Send or a Recv is recorded by one rank
            ranks_seen = np.bincount(
                self._agg_low.values[np.unique(rows.key)], minlength=len(self._lows.keys)
            )
            one_rank = np.array([coll in self._p2p_ops for coll in self._colls.keys], bool)
            p2p = one_rank[self._low_op.values[low]]
            cross &= ranks_seen[low] >= np.where(p2p, 1, members[comm])
            # and enough samples that one of them is the last arriver's: each rank's sample is another op, and is
            # that op's last arriver's about once in as many as the op has parties (at the start of the data, one
            # sample per rank, each a wait, read as a link 10x slow)
            samples = np.bincount(row_low, rows.n, minlength=len(self._lows.keys))
            parties = np.maximum(np.where(p2p, 2, members[comm]), 2)
            cross &= samples[low] >= np.ceil(math.log(_NO_TRANSFER) / np.log1p(-1 / parties))
        low, comm, bus = low[cross], comm[cross], bus[cross]
        bw = bus / shortest[low]
        # comms of the same shape: the upper quartile of their bandwidths, once per shape
        shape = np.stack([self._low_op.values[low], self._low_size.values[low], members[comm], hosts[comm]])
        shapes, of_shape = np.unique(shape, axis=1, return_inverse=True) if len(low) else (shape, low)
        upper = np.full(shapes.shape[1], math.nan)
        by_shape = np.argsort(of_shape, kind="stable")
        bounds = [*run_starts(of_shape[by_shape]).tolist(), len(low)] if len(low) else []
        for begin, end in itertools.pairwise(bounds):
            if end - begin >= 3:
                upper[of_shape[by_shape[begin]]] = statistics.quantiles(
                    bw[by_shape[begin:end]].tolist(), n=4
                )[2]
        # against the upper quartile of its shape and its own best (those it has), as a ratio of bandwidths
        best = self._low_best.values[low]
        ref = np.fmax(upper[of_shape], best)
        judged = ~np.isnan(ref)
        self._low_best.values[low[judged]] = np.fmax(best[judged], bw[judged])
        ratio = ref / bw
        # per comm its slowest (comm, coll, size), the first where several are as slow
        slowest = np.flatnonzero(judged & (ratio > 0))
        slowest = slowest[np.lexsort((slowest, -ratio[slowest], comm[slowest]))]
        slowest = slowest[run_starts(comm[slowest])] if len(slowest) else slowest
        picked = low[slowest].tolist()
        ids = [self._lows.keys[i][0] for i in picked]
        ratios = dict(zip(ids, ratio[slowest].tolist(), strict=True))  # comm -> reference bandwidth / its own
        normal = dict(
            zip(ids, (bus[slowest] / ref[slowest]).tolist(), strict=True)
        )  # comm -> reference time (µs) of its slowest (coll, size)
        measured = dict(zip(ids, picked, strict=True))  # comm -> the (comm, coll, size) number compared
        slow = {comm for comm, r in ratios.items() if r >= p.comm_slow_ratio}
        fast = set(ratios) - slow
        if not slow or not fast:
            return []  # everything slow (or nothing): no node to single out
        rate = self._op_rates(rows)
        out = []
        for host in self._localize(slow, fast):
            through = sorted(
                (c for c in slow if host in self.comms[c].hosts), key=lambda c: self.comms[c].label
            )
            if len(through) < 2:
                continue  # one slow comm is one slow link or one noisy sample, not a node
            factor = statistics.median(ratios[c] for c in through)
            details = []
            for c in through:
                _, coll, size = self._lows.keys[measured[c]]
                details.append({"comm": self.comms[c].label, "comm_id": c, "layout": self.describe(self.comms[c]),
                                "coll": coll, "size_bytes": size, "normal_us": round(normal[c], 1),
                                "observed_us": round(normal[c] * ratios[c], 1), "factor": round(ratios[c], 2)})  # fmt: skip
            z = (factor - 1) / 0.05 * len(through) ** 0.5
            # its cost: per process, the extra transfer time of its slow comms times their op rates, as a share of
            # its time; the worst process's (the steps wait for it)
            extra: dict[Proc, float] = defaultdict(float)
            for c in through:
                _, coll, _ = self._lows.keys[measured[c]]
                for member in self.comms[c].members.values():
                    extra[member] += rate.get((c, coll), 0.0) * normal[c] * (ratios[c] - 1)
            cost = min(1.0, max(extra.values(), default=0.0))
            shown = [f"{d['layout']} {d['coll']} {_bytes(int(str(d['size_bytes'])))}: {d['observed_us']} us vs "
                     f"{d['normal_us']} us" for d in details[:3]]  # fmt: skip
            peers = sorted(
                (c for c in fast if self.comms[c].hosts - {host}), key=lambda c: self.comms[c].label
            )
            evidence = (
                f"{len(through)} cross-node comm(s) through {host} transfer {factor:.2f}x slower than comms of the "
                f"same shape (collective, message size, ranks, hosts) or their own best: " + "; ".join(shown)
                + (" ..." if len(details) > 3 else "") + f"; costs the job {cost:.1%} of its time"
                + (f"; {len(peers)} other judged cross-node comm(s), without {host}, are normal, e.g. "
                   + ", ".join(self.describe(self.comms[c]) for c in peers[:2]) if peers else "")
            )  # fmt: skip
            labels = [d["comm"] for d in details]
            out.append(Finding(host, None, "communication", str(labels[0]) if len(labels) == 1 else None, None,
                               factor, 1.0, evidence, cost=cost, z=z, comms=details, comm_ids=through))  # fmt: skip
        return out

    def _op_rates(self, rows: Rows) -> dict[tuple[str, str], float]:
        """Ops per µs of each (comm, coll): its ranks' largest ``coll_sn`` span over the horizon's dump times."""
        spans = len(self._spans.keys)
        span = self._agg_span.values[rows.key]
        lo, hi = np.full(spans, np.iinfo(I64).max, I64), np.full(spans, -1, I64)
        lo_ts, hi_ts = np.full(spans, np.iinfo(I64).max, I64), np.full(spans, -1, I64)
        np.minimum.at(lo, span, rows.lo)
        np.maximum.at(hi, span, rows.hi)
        np.minimum.at(lo_ts, span, rows.lo_ts)
        np.maximum.at(hi_ts, span, rows.hi_ts)
        out: dict[tuple[str, str], float] = {}
        keys = self._spans.keys
        for number in np.flatnonzero((hi > lo) & (hi_ts > lo_ts)).tolist():
            comm, coll, _ = keys[number]
            rate = (hi[number] - lo[number]) / (hi_ts[number] - lo_ts[number])
            out[(comm, coll)] = max(out.get((comm, coll), 0.0), float(rate))
        return out

    def _localize(self, slow: set[str], fast: set[str]) -> list[str]:
        """Nodes common to the slow comms and (nearly) absent from the fast ones: a greedy set cover."""
        comms = self.comms
        slow_by_host: dict[str, set[str]] = defaultdict(set)
        fast_by_host: dict[str, int] = defaultdict(int)
        for comm in slow:
            for host in comms[comm].hosts:
                slow_by_host[host].add(comm)
        for comm in fast:
            for host in comms[comm].hosts:
                fast_by_host[host] += 1
        candidates = {
            h: s for h, s in slow_by_host.items() if fast_by_host[h] <= 0.2 * (len(s) + fast_by_host[h])
        }
        picked: list[str] = []
        uncovered = set(slow)
        while uncovered:
            best = max(candidates, key=lambda h: (len(candidates[h] & uncovered), -fast_by_host[h], h),
                       default=None)  # fmt: skip
            if best is None or not candidates[best] & uncovered:
                break
            picked.append(best)
            uncovered -= candidates.pop(best)
        return picked
