"""The straggler engines of every cluster, and the queue that feeds them: what runs in the engine process.

:class:`ClusterEngines` holds one incremental :class:`~aggregator.models.straggler.engine.StragglerEngine` per cluster and
evaluates them on a batch of queued records. The aggregator's :class:`~aggregator.state.stragglers.StragglerTracker`
queues records with :func:`queue_entry` and runs the evaluation on a thread or, by default, in a child process
(:class:`EngineProcess`: :func:`process_start`, then :func:`process_evaluate` at each evaluation). The child imports
this module, not the aggregator's live state, and is handed the engines' parameters, not the settings: it never loads
pydantic, DuckDB, nats-py or the other trackers.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import pickle
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import BrokenExecutor, Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast

import msgspec

from ranksight.aggregator.models.straggler.engine import StragglerEngine
from ranksight.aggregator.models.straggler.findings import Finding, StragglerParams
from ranksight.schemas.records import InspectorRecord, InspectorSummaryRecord

if TYPE_CHECKING:
    from ranksight.aggregator.models.straggler.settings import StragglerSettings

log = logging.getLogger(__name__)

T = TypeVar("T")

# per observed envelope: (cluster, are they summaries, its records), as decoded
Records = Iterable[tuple[str, bool, Sequence[InspectorRecord] | Sequence[InspectorSummaryRecord]]]


@dataclass
class ClusterFindings:
    findings: list[Finding] = field(default_factory=list)
    records: int = 0
    capture_model: str = "ring"
    evaluated_ns: int = 0
    ahead: int = 0  # records not judged: dumped past the clock (StragglerParams.clock_ahead_s)


def params_of(settings: StragglerSettings) -> StragglerParams:
    return StragglerParams(window_s=settings.window_s, slice_s=settings.slice_s,
                           judge_every=max(1, round(settings.judge_every_s / settings.slice_s)),
                           confirm_windows=settings.confirm_windows, evidence_z=settings.evidence_z,
                           catch_up_windows=settings.catch_up_windows,
                           clock_ahead_s=settings.clock_ahead_s, hiccup_chance=settings.hiccup_chance,
                           sampled_max_window_s=settings.sampled_max_window_s)  # fmt: skip


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
def _positional(record: type) -> msgspec.msgpack.Decoder[list[Any]]:
    """The decoder of a list of records' values in field order (:func:`msgspec.structs.astuple`) into structs read like
    the record (same fields, types and constraints, laid out as arrays): queued records take half the bytes of maps
    with field names."""
    fields = msgspec.structs.fields(record)
    row = msgspec.defstruct(f"Queued{record.__name__}", [(f.name, f.type) for f in fields], array_like=True,
                            gc=False)  # fmt: skip
    return msgspec.msgpack.Decoder(list[row])  # type: ignore[valid-type]


_SUMMARIES = _positional(InspectorSummaryRecord)
_RAWS = _positional(InspectorRecord)
_QUEUED = msgspec.msgpack.Decoder(tuple[str, bool, msgspec.Raw])
_ENCODER = msgspec.msgpack.Encoder()


def queue_entry(cluster: str, summary: bool, records: Sequence[msgspec.Struct]) -> bytes:
    """One observed envelope's records as queued: ``summary`` says they are ``inspector_summary`` records."""
    return _ENCODER.encode((cluster, summary, [msgspec.structs.astuple(r) for r in records]))


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

# The engine process's program: a plain interpreter that imports this module and serves calls on two pipes.
_PROGRAM = "import sys\nfrom ranksight.aggregator.models.engines import serve\nserve(int(sys.argv[1]), int(sys.argv[2]))"


class EngineProcess(Executor):
    """The engines in a child interpreter of their own (its own interpreter lock), which runs the calls submitted, one
    at a time, and answers each: a call and its answer are pickled on two pipes, and a thread of the aggregator waits
    for the answer, so :meth:`submit` returns a future as an executor's does. Not multiprocessing's executor: its
    spawned child imports the aggregator's main module (the CLI, with nats-py, asyncio and ssl: about 15 MiB) and it
    starts a resource tracker process beside it (13 MiB), neither of which the engines use. The child serves until its
    pipe closes: at :meth:`shutdown`, or when the aggregator dies however it dies (SIGKILL, the OOM killer)."""

    def __init__(self, params: StragglerParams) -> None:
        child_reads, parent_writes = os.pipe()
        parent_reads, child_writes = os.pipe()
        try:
            self.process = subprocess.Popen([sys.executable, "-c", _PROGRAM, str(child_reads), str(child_writes)],
                                            pass_fds=(child_reads, child_writes), stdin=subprocess.DEVNULL)  # fmt: skip
        except BaseException:
            os.close(parent_writes)
            os.close(parent_reads)
            raise
        finally:
            os.close(child_reads)
            os.close(child_writes)
        self._calls = os.fdopen(parent_writes, "wb")
        self._answers = os.fdopen(parent_reads, "rb")
        self._waiter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine-process")
        self.broken = False
        self.submit(process_start, params)

    @property
    def pid(self) -> int:
        return self.process.pid

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        """``fn(*args, **kwargs)`` in the child (``fn`` pickled by name); :class:`BrokenExecutor` once it ended."""
        if self.broken or self.process.poll() is not None:
            self.broken = True
            raise BrokenExecutor(f"the engine process ended (status {self.process.returncode})")
        return self._waiter.submit(self._call, fn, args, kwargs)

    def _call(self, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> T:
        try:
            pickle.dump((fn, args, kwargs), self._calls, pickle.HIGHEST_PROTOCOL)
            self._calls.flush()
            ok, answer = pickle.load(self._answers)
        except (OSError, EOFError, pickle.UnpicklingError) as exc:  # it died (killed, out of memory)
            self.broken = True
            raise BrokenExecutor(f"the engine process ended ({type(exc).__name__})") from exc
        if not ok:
            raise answer
        return cast(T, answer)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.broken = True
        self._waiter.shutdown(wait=False, cancel_futures=cancel_futures)
        self.process.kill()  # a call in flight ends with BrokenExecutor
        if wait:
            self._release()
        else:  # released without waiting, by a thread that outlives nothing
            threading.Thread(target=self._release, name="engine-process-reaper", daemon=True).start()

    def _release(self) -> None:
        """Reap the killed child and close the pipes once no call uses them."""
        self.process.wait()
        self._waiter.shutdown(wait=True)
        for pipe in (self._calls, self._answers):
            with contextlib.suppress(OSError):  # a call's bytes left unflushed to the dead child
                pipe.close()


def serve(calls_fd: int, answers_fd: int) -> None:
    """The engine process: run each call read from ``calls_fd``, answer on ``answers_fd``, until the aggregator
    closes its end (or dies)."""
    # Ctrl-C reaches the whole process group: the aggregator decides when this process ends
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with os.fdopen(calls_fd, "rb") as calls, os.fdopen(answers_fd, "wb") as answers:
        while True:
            try:
                fn, args, kwargs = pickle.load(calls)
            except EOFError:
                return
            try:
                answer: tuple[bool, Any] = (True, fn(*args, **kwargs))
            except Exception as exc:
                answer = (False, exc)
            try:
                data = pickle.dumps(answer, pickle.HIGHEST_PROTOCOL)
            except Exception as exc:  # an answer that cannot be pickled: said as an error
                data = pickle.dumps((False, RuntimeError(f"unpicklable answer: {exc!r}")))
            try:
                answers.write(data)
                answers.flush()
            except BrokenPipeError:
                return


def process_start(params: StragglerParams) -> None:
    """The engine process's first call: the parameters of its engines (:func:`params_of` the settings)."""
    global _process_engines
    _process_engines = ClusterEngines(params)


def process_evaluate(batch: list[bytes], gone: set[str], now_ns: int) -> dict[str, ClusterFindings]:
    engines = _process_engines
    assert engines is not None, "the engine process starts with process_start"
    try:
        return engines.evaluate(decoded(batch), gone, now_ns)
    finally:
        _release_freed()
