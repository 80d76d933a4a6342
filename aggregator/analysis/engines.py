"""The straggler engines of every cluster, and the queue that feeds them: what runs in the engine process.

:class:`ClusterEngines` holds one incremental :class:`~aggregator.analysis.stragglers.StragglerEngine` per cluster and
evaluates them on a batch of queued records. The aggregator's :class:`~aggregator.state.stragglers.StragglerTracker`
queues records with :func:`queue_entry` and runs the evaluation on a thread or, by default, in a child process
(:func:`process_start`, :func:`process_evaluate`). The child imports this module, not the aggregator's live state, and
reads its settings as their twin: it never loads pydantic, DuckDB or the other trackers.
"""

from __future__ import annotations

import ctypes
import logging
import operator
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import msgspec

from ranksight.aggregator.analysis.stragglers import Finding, StragglerEngine, StragglerParams
from ranksight.schemas.structs import to_builtins
from ranksight.schemas.twins import InspectorRecord, InspectorSummaryRecord
from ranksight.settings_twins import StragglerSettings

if TYPE_CHECKING:
    from ranksight import config

log = logging.getLogger(__name__)

PARENT_WATCH_S = 0.5  # how often the engine process checks that the aggregator is still there

# per observed envelope: (cluster, are they summaries, its records), as decoded
Records = Iterable[tuple[str, bool, Sequence[InspectorRecord] | Sequence[InspectorSummaryRecord]]]


@dataclass
class ClusterFindings:
    findings: list[Finding] = field(default_factory=list)
    records: int = 0
    capture_model: str = "ring"
    evaluated_ns: int = 0
    ahead: int = 0  # records not judged: dumped past the clock (StragglerParams.clock_ahead_s)


def params_of(settings: config.StragglerSettings | StragglerSettings) -> StragglerParams:
    return StragglerParams(window_s=settings.window_s, slice_s=settings.slice_s,
                           judge_every=max(1, round(settings.judge_every_s / settings.slice_s)),
                           confirm_windows=settings.confirm_windows, evidence_z=settings.evidence_z,
                           catch_up_windows=settings.catch_up_windows,
                           clock_ahead_s=settings.clock_ahead_s)  # fmt: skip


class ClusterEngines:
    """One engine per cluster, and the findings of their latest evaluation."""

    def __init__(self, params: StragglerParams) -> None:
        self.params = params
        self.engines: dict[str, StragglerEngine] = {}
        self.clusters: dict[str, ClusterFindings] = {}

    @property
    def records(self) -> int:
        return sum(engine.records for engine in self.engines.values())

    def evaluate(self, batch: Records, gone: set[str], now_ns: int) -> dict[str, ClusterFindings]:
        """Fold ``batch`` in, forget the ``gone`` clusters, and judge, by the aggregator's clock ``now_ns``."""
        for cluster in gone:
            self.engines.pop(cluster, None)
        clock_us = now_ns // 1000
        for running in self.engines.values():
            running.clock_us = clock_us
        for cluster, summary, records in batch:
            engine = self.engines.get(cluster)
            if engine is None:
                engine = self.engines[cluster] = StragglerEngine(self.params, offline=False)
                engine.clock_us = clock_us
            if summary:
                engine.add_summaries(cast(Sequence[InspectorSummaryRecord], records))
            else:
                engine.extend(cast(Sequence[InspectorRecord], records))
        out = {}
        for cluster, engine in self.engines.items():
            try:
                findings = engine.evaluate()
            except Exception:  # a bug or an input we did not foresee must never stop the aggregator's ticks
                log.exception(
                    "straggler analysis of cluster %s failed; keeping its previous findings", cluster
                )
                out[cluster] = self.clusters.get(cluster, ClusterFindings(evaluated_ns=now_ns))
                continue
            out[cluster] = ClusterFindings(
                findings, engine.records, engine.capture_model, now_ns, engine.ahead
            )
        self.clusters = out
        return out


# -- the queue: per observed envelope, (cluster, is a summary, its records' values in field order) as msgpack ----------
def _positional(twin: type) -> tuple[Callable[[Any], tuple[object, ...]], msgspec.msgpack.Decoder[list[Any]]]:
    """A record's values in field order, and the decoder of a list of them into structs read like the record's twin
    (same fields, types and constraints, laid out as arrays): queued records take half the bytes of maps with field
    names."""
    fields = msgspec.structs.fields(twin)
    getter = operator.attrgetter(*(f.name for f in fields))

    def values(record: Any) -> tuple[object, ...]:
        # the twin's own tuple of values (in C) where it is one; a pydantic record's (tests) by attribute
        return (
            msgspec.structs.astuple(cast(msgspec.Struct, record))
            if isinstance(record, twin)
            else getter(record)
        )

    row = msgspec.defstruct(f"Queued{twin.__name__}", [(f.name, f.type) for f in fields], array_like=True,
                            gc=False)  # fmt: skip
    return values, msgspec.msgpack.Decoder(list[row])  # type: ignore[valid-type]


_ROW_SUMMARY, _SUMMARIES = _positional(InspectorSummaryRecord)
_ROW_RAW, _RAWS = _positional(InspectorRecord)
_QUEUED = msgspec.msgpack.Decoder(tuple[str, bool, msgspec.Raw])
_ENCODER = msgspec.msgpack.Encoder(enc_hook=to_builtins)  # values of a pydantic record (tests) as plain data


def queue_entry(cluster: str, summary: bool, records: Sequence[object]) -> bytes:
    """One observed envelope's records as queued: ``summary`` says they are ``inspector_summary`` records."""
    return _ENCODER.encode((cluster, summary, list(map(_ROW_SUMMARY if summary else _ROW_RAW, records))))


def decoded(batch: list[bytes]) -> Iterator[tuple[str, bool, list[Any]]]:
    """The queued envelopes' records, in order, each envelope's decoded as it is folded: the batch's records are never
    all alive at once (at 1024 nodes a 2 s batch decoded whole held about 50,000 records beside its own bytes)."""
    for entry in batch:
        cluster, summary, records = _QUEUED.decode(entry)
        yield cluster, summary, (_SUMMARIES if summary else _RAWS).decode(records)


def _trimmer() -> Callable[[], object]:
    """glibc's ``malloc_trim(0)`` (nothing where the C library has none). An evaluation's arrays are freed at its end,
    but glibc keeps freed heap for reuse (its moving mmap threshold puts the larger arrays on the heap once the first
    were freed): returned after each evaluation, the engine process peaks about 60 MiB lower at 1024 nodes
    (``benchmarks/engine.py``), for no CPU to measure."""
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    return (lambda: trim(0)) if trim is not None else (lambda: None)


_release_freed = _trimmer()


# -- the engine process ------------------------------------------------------------------------------------------------
_process_engines: ClusterEngines | None = None  # in the engine process: its engines


def process_start(settings_json: str) -> None:
    """The engine process's initializer: ``settings_json`` is the ``aggregator.stragglers`` section."""
    global _process_engines
    _process_engines = ClusterEngines(params_of(msgspec.json.decode(settings_json, type=StragglerSettings)))
    # Ctrl-C reaches the whole process group: the aggregator decides when this process ends
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), name="parent-watch", daemon=True).start()


def _exit_with_parent(parent: int) -> None:
    """An aggregator killed outright (SIGKILL, the OOM killer) cannot stop its engine process, which would wait for
    work forever holding the engines' memory: it stops itself once its parent is gone."""
    while os.getppid() == parent:
        time.sleep(PARENT_WATCH_S)
    os._exit(0)


def process_evaluate(batch: list[bytes], gone: set[str], now_ns: int) -> dict[str, ClusterFindings]:
    engines = _process_engines
    assert engines is not None, "the engine process starts with process_start"
    try:
        return engines.evaluate(decoded(batch), gone, now_ns)
    finally:
        _release_freed()
