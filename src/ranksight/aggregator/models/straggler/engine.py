"""The straggler engine: sliding horizons judged as slices complete, findings confirmed by the strength of their
evidence and resolved when no longer flagged (:class:`StragglerEngine`); :func:`analyze_records` offline.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable
from typing import cast

from ranksight.aggregator.models.straggler.comms import CommsModel
from ranksight.aggregator.models.straggler.compute import ComputeModel, PoolPattern, without_victims
from ranksight.aggregator.models.straggler.findings import (
    Analysis,
    Candidate,
    Finding,
    Kind,
    Proc,
    StragglerParams,
    ranked,
)
from ranksight.schemas.records import InspectorRecord


class StragglerEngine(ComputeModel, CommsModel):
    """Feed records with :meth:`add`; :meth:`evaluate` judges every slice completed since the last call (online);
    :meth:`analyze` does that to the end and lists every finding confirmed on the way (offline). Holds no clock (online,
    the caller sets ``clock_us``) and does no I/O."""

    def __init__(self, params: StragglerParams | None = None, offline: bool = True) -> None:
        """``offline``: also keep what only :meth:`analyze` reports (the distinct operations, the findings that
        resolved), which grows with the job: the live engine keeps neither."""
        super().__init__(params, offline)
        self.candidates: dict[tuple[str, int | None, Kind], Candidate] = {}
        # per culprit, the first and the latest slice whose judgement flagged it, through gaps of half a horizon (a
        # weak finding flickers in and out, under sampled capture most)
        self._flagged: dict[tuple[str, int | None, Kind], tuple[int, int]] = {}
        self.history: list[Finding] = []  # confirmed findings that resolved (offline)
        # offline, sampled: each culprit's finding judged by lateness from its most complete window (:func:`_completeness`)
        self._fullest: dict[tuple[str, int | None, Kind], Finding] = {}

    def extend(self, records: Iterable[InspectorRecord]) -> StragglerEngine:
        for rec in records:
            self.add(rec)
        return self

    def complete_slice(self, final: bool = False) -> int | None:
        """The newest slice every live process has written past (``final``: at least the first slice)."""
        if not self.slices:
            return None
        newest = max(self.proc_last.values(), default=0)
        live = [ts for ts in self.proc_last.values() if ts >= newest - 2 * self.horizon * self.slice_us]
        # offline too: the slice of a process's last tick is judged only once every process is past it, and the
        # job's last ticks never are (the job ends between ticks: the time from its end to the next tick is no compute)
        last = min(live, default=newest) // self.slice_us - 1
        return max(last, min(self.slices)) if final else last

    def evaluate(self, final: bool = False) -> list[Finding]:
        """Judge every slice completed since the last call; the findings confirmed and active now."""
        self._absorb()
        last = self.complete_slice(final)
        if last is not None:
            first = min(self.slices) if self.evaluated is None else self.evaluated + 1
            if self._late_from is not None:
                first, self._late_from = min(first, self._late_from), None
            if not final:  # online catch-up after a gap: the recent past is what alerts are about
                first = max(first, last - self.params.catch_up_windows * self.horizon)
            # online, processes left behind by complete_slice (reading their dumps far behind, or stopped) lack the
            # records of the slices past their latest: not judged there (they would look idle, i.e. computing)
            behind = {} if final else {p: ts // self.slice_us for p, ts in self.proc_last.items()
                                       if ts // self.slice_us <= last}  # fmt: skip
            every = 1 if final else self.params.judge_every
            filled = sorted(i for i, rows in self.slices.items() if len(rows.key))
            index = first
            while index <= last:
                if index % every == every - 1:
                    self._judge(index, {p for p, reached in behind.items() if reached <= index})
                self.evaluated = index
                index = self._next_to_judge(index + 1, filled)
            if first <= last:
                self.evaluated = last
            self._forget(last - self._reach())
        return self.active()

    def _next_to_judge(self, index: int, filled: list[int]) -> int:
        """``index``, or the next slice whose horizon holds records (``filled``: the slices that do, in order) where
        judging the ones between changes nothing: no candidate, and the previous judgement found no steps (it leaves
        the horizon unstretched and the step rate 0, so an empty horizon flags nothing and leaves the same). Offline,
        one record dumped days away from the others (a clock, a corrupt file) was millions of empty horizons judged
        one by one."""
        if self.candidates or self._step_rate or self._horizon_now != self.horizon:
            return index
        at = bisect_left(filled, index - self.horizon + 1)
        if at == len(filled):
            return 2**63  # nothing left to judge
        return max(index, filled[at])

    def active(self) -> list[Finding]:
        return ranked([c.finding for c in self.candidates.values() if c.confirmed])

    def analyze(self) -> Analysis:
        """Offline: judge every slice; every finding confirmed at some point, merged per culprit."""
        self.evaluate(final=True)
        merged: dict[tuple[str, int | None, Kind], Finding] = {}
        confirmed = [*self.history, *self.active()]
        # its pattern from its latest judgement: judged on the longest memory of its pools
        latest: dict[tuple[str, int | None, Kind], Finding] = {}
        for f in confirmed:
            if f.key not in latest or f.last_ts_us >= latest[f.key].last_ts_us:
                latest[f.key] = f
        # a confirmed culprit's figures from its most complete window, confirmed or not
        fullest = [f for f in self._fullest.values() if any(f.key == c.key for c in confirmed)]
        for f in [*confirmed, *fullest]:
            prev = merged.get(f.key)
            if prev is None or _completeness(f) > _completeness(prev):
                if prev is not None:
                    f.first_ts_us = min(f.first_ts_us, prev.first_ts_us)
                    f.last_ts_us = max(f.last_ts_us, prev.last_ts_us)
                merged[f.key] = f
            else:
                prev.first_ts_us = min(f.first_ts_us, prev.first_ts_us)
                prev.last_ts_us = max(f.last_ts_us, prev.last_ts_us)
        for key, f in merged.items():
            if latest[key].pattern_note and f.pattern_note:
                _take_pattern(f, latest[key])
        findings = ranked(
            without_victims(list(merged.values())) if self.sampled > self.ring else list(merged.values())
        )
        ops = len(self._ops)
        return Analysis(self.records, ops, self.capture_model, findings, bw_mismatches=self.bw_mismatches)

    def _judge(self, index: int, behind: set[Proc]) -> None:
        # long steps stretch the horizon to ``min_window_steps`` steps (a few ops give no stable share), long dump
        # intervals to enough pools to tell a steady straggler from an intermittent one, at most ``max_stretch``
        # windows. Sampled, it holds ``sampled_window_samples`` ticks however long they are: a slice keeps rows only
        # for the keys sampled in it, so the memory is that of the samples, not of the time they span (at 5 s dumps the
        # cap left 24 ticks, too few to find a weak straggler), up to ``sampled_max_window_s`` (a peer whose dump
        # ticks lie hours apart would have every judgement walk hours of empty slices)
        p = self.params
        steps_per_slice = self._step_rate * self.slice_us
        need = (PoolPattern.MIN_POOLS + 2) * self._pool_slices() if self._step_rate else 0
        if steps_per_slice > 0:
            need = max(need, math.ceil(p.min_window_steps / steps_per_slice))
        horizon = max(self.horizon, min(p.max_stretch * self.horizon, need))
        if self.sampled > self.ring:
            ticks = min(p.sampled_window_samples * self._interval_us, p.sampled_max_window_s * 1e6)
            horizon = max(horizon, math.ceil(ticks / self.slice_us))
        self._horizon_now = horizon
        # slices with no record are time too (long ops complete less often than a slice): kept, empty
        first = max(index - horizon + 1, min(self.slices))
        if first > index:
            return
        rows, pos = self._window(first, index)
        # first seen: the slice whose evaluation first flagged it (its horizon reaches further back, into healthy time)
        start_us, end_us = index * self.slice_us, (index + 1) * self.slice_us
        unjudged = self._unjudged(first, index) | behind
        width = index - first + 1
        flagged = self._compute(rows, pos, width, first, unjudged) + self._communication(rows, unjudged)
        # an unjudged process (and its node's network) keeps its standing until its records are complete again
        held = {key for host, pid in unjudged
                for key in ((host, pid, "compute"), (host, None, "compute"), (host, None, "communication"))}  # fmt: skip
        seen = set()
        # a compute finding whose slow pools its peers' hiccups would bring by chance is not flagged: the time it
        # lasts counts from when they no longer would
        flagged = [f for f in flagged if f.chance <= self.params.hiccup_chance]
        for f in flagged:
            f.first_ts_us, f.last_ts_us = start_us, end_us
            seen.add(f.key)
            cand = self.candidates.get(f.key)
            since, last = self._flagged.get(f.key, (index, index))
            self._flagged[f.key] = (since if index - last <= horizon // 2 else index, index)
            if cand is None:
                cand = self.candidates[f.key] = Candidate(f)
            cand.evals += 1
            cand.evidence += f.z
            f.first_ts_us = cand.finding.first_ts_us
            cand.finding = f
            if (
                self.offline
                and "compared_collectives" in f.coverage
                and (f.key not in self._fullest or _completeness(f) > _completeness(self._fullest[f.key]))
            ):
                self._fullest[f.key] = f
            needed = min(self.params.confirm_windows, math.ceil(self.params.evidence_z / max(f.z, 1e-9)))
            # consecutive horizons share most of their data: a weak finding must stay flagged until part of the window
            # judged is fresh records (a run of unlucky samples or of hiccups does not). Part of the window, not of a
            # whole horizon: at the start of the data (a job shorter than a sampled horizon) the window is shorter
            lasting = (index - self._flagged[f.key][0] >= self.params.confirm_share * width
                       or f.z >= 2 * self.params.evidence_z)  # fmt: skip
            if cand.evals >= needed and lasting:
                cand.confirmed = True
            cand.flagged_evals += 1
        self._flagged = {key: at for key, at in self._flagged.items() if index - at[1] <= horizon}
        for key, cand in list(self.candidates.items()):
            cand.seen_evals += 1
            cand.finding.confidence = cand.flagged_evals / cand.seen_evals
            if key not in seen and key not in held:
                del self.candidates[key]
                if cand.confirmed and self.offline:
                    self.history.append(cand.finding)

    def _unjudged(self, first: int, last: int) -> set[Proc]:
        """Processes missing records in slices ``first..last``: their compute share there is not known."""
        return {
            proc
            for proc, spans in self._incomplete.items()
            if any(a <= last and b >= first for a, b in spans)
        }


def _take_pattern(f: Finding, latest: Finding) -> None:
    """``f``'s pattern (and its clause of the evidence) as ``latest`` judged it."""
    f.evidence = f.evidence.replace(f.pattern_note, latest.pattern_note, 1)
    f.pattern, f.pattern_resolution_s, f.pattern_note = (
        latest.pattern,
        latest.pattern_resolution_s,
        latest.pattern_note,
    )
    f.duty_cycle = latest.duty_cycle
    f.burst_slowdown = latest.burst_slowdown if latest.pattern == "intermittent" else f.slowdown


def _completeness(f: Finding) -> tuple[int, float]:
    """How complete a window's finding is: sampled, judged by lateness, the window compared on the most collective
    types first (a type carrying the waits missing from a window's samples makes its lateness, and slowdown, read
    low), then the strongest."""
    return cast(int, f.coverage.get("compared_collectives", 0)) if f.coverage else 0, f.z


def analyze_records(records: Iterable[InspectorRecord], params: StragglerParams | None = None) -> Analysis:
    return StragglerEngine(params).extend(records).analyze()
