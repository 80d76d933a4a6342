"""Online straggler analysis state: Inspector records folded into one incremental engine per cluster
(:mod:`aggregator.analysis.stragglers`), evaluated on tick; the ``straggler`` rule (``aggregator.analysis.straggler_live``)
reports its findings.

Every record is folded in once (never re-analyzed); each evaluation judges the slices completed since the last one, a
sliding ``window_s`` horizon with a ``judge_every_s`` hop. In the aggregator this runs in the background
(``background=True``) and its result is picked up by a later tick, so the event loop never waits for it: ``observe`` only
queues records. The engines live in a child process (``process``, started with the first records): the aggregator's
Python threads share one interpreter lock, and at a thousand nodes ingest alone fills one core (``benchmarks/scale.py``).
Records are queued as msgpack arrays of their values, each envelope's as it is observed (they are plain numbers and
strings: a summary record takes a sixth of the memory it takes decoded, and at 1024 nodes the engine gets 2 s of them
at each evaluation), and go to the engine as they are; findings come back pickled. A child that dies is started again
with empty engines (``engine_restarts``). ``process = false``: a thread of the aggregator, which decodes the queue
itself.
A cluster whose records stop arriving (by receipt time) for ``retain_windows`` x ``window_s`` is forgotten and its
alerts resolve.

Each record is also folded, as it arrives, into the cluster's :class:`aggregator.analysis.hangs.HangFinder` (the last
``coll_sn`` per rank); the ``collective_hang`` rule asks it on every tick. A hung job is silent, so its collectives are
kept ``hang_retain_s`` (not the straggler horizon) after they last advanced.

Agents summarize (``inspector_summary``, per window) and publish raw records only at a bounded rate: summaries feed the
engine and the hang finder, and the raw records of a node that sent summaries within the last ``retain_windows`` x
``window_s`` are samples of what those carry, so they feed neither. An older agent's raw records feed both, as before.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import operator
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import BrokenExecutor, Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import cast

import msgspec

from ranksight.aggregator.analysis.hangs import Hang, HangFinder
from ranksight.aggregator.analysis.stragglers import Finding, StragglerEngine, StragglerParams
from ranksight.aggregator.forgetting import NodeKey
from ranksight.aggregator.timefmt import NS, iso
from ranksight.config import StragglerSettings
from ranksight.schemas.structs import to_builtins
from ranksight.schemas.twins import Envelope, InspectorRecord, InspectorSummaryRecord

log = logging.getLogger(__name__)

Records = Iterable[tuple[str, InspectorRecord | InspectorSummaryRecord]]  # (cluster, record), as decoded
# engine processes failing one after the other (none can start, or each is killed at once) before a thread takes over
MAX_LOST_IN_ROW = 3
PARENT_WATCH_S = 0.5  # how often the engine process checks that the aggregator is still there


@dataclass
class ClusterFindings:
    findings: list[Finding] = field(default_factory=list)
    records: int = 0
    capture_model: str = "ring"
    evaluated_ns: int = 0


def params_of(settings: StragglerSettings) -> StragglerParams:
    return StragglerParams(window_s=settings.window_s, slice_s=settings.slice_s,
                           judge_every=max(1, round(settings.judge_every_s / settings.slice_s)),
                           confirm_windows=settings.confirm_windows, evidence_z=settings.evidence_z,
                           catch_up_windows=settings.catch_up_windows)  # fmt: skip


class StragglerTracker:
    kinds = frozenset({"inspector", "inspector_summary"})

    def __init__(self, settings: StragglerSettings | None = None) -> None:
        # queued by observe, folded in on evaluation: per envelope, (cluster, is a summary, its records' values in
        # field order) as msgpack
        self.pending: list[bytes] = []
        self.queued = 0  # records in pending
        self.summarizing: dict[NodeKey, int] = {}  # nodes that send summaries: receipt time of the latest
        self.dropped = 0  # records dropped because the queue was full (the worker fell behind)
        # set when a tick hands the queue to the engine (a waiting ingest goes on)
        self.taken = asyncio.Event()
        # touched only by the evaluation (worker thread or process)
        self.engines: dict[str, StragglerEngine] = {}
        self.last_recv_ns: dict[str, int] = {}
        self.hang_finders: dict[str, HangFinder] = {}  # fed on the event loop: O(1) per record
        self._executor: Executor | None = None
        self._background = False
        self._running: Future[dict[str, ClusterFindings]] | None = None
        self.engine_restarts = 0  # engines started again after one failed (a process that died)
        self._lost_in_row = 0
        self._process_failed = False  # it failed MAX_LOST_IN_ROW times in a row: a thread from then on
        self.configure(settings or StragglerSettings.model_validate({}))
        self.clusters: dict[str, ClusterFindings] = {}
        self._last_eval_ns = 0
        self._evaluated_once = False
        self._history: list[dict[str, object]] = []  # findings of each evaluation, not yet stored

    def configure(self, settings: StragglerSettings, background: bool = False) -> None:
        self.close()  # a running engine process holds the previous settings
        self.settings = settings
        self._background = background
        self.params = params_of(settings)

    def close(self) -> None:
        """Let the worker thread or process go (a live state dropped while the aggregator runs: a lead that stepped
        down)."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        self._running = None

    @property
    def in_process(self) -> bool:
        return self._background and self.settings.process and not self._process_failed

    def _worker(self) -> Executor:
        if self._executor is None:
            if self.in_process:
                # spawned, not forked: the aggregator has threads (DuckDB's, the NATS client's) a fork would copy
                self._executor = ProcessPoolExecutor(
                    max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                    initializer=_process_start, initargs=(self.settings.model_dump_json(),))  # fmt: skip
            else:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stragglers")
        return self._executor

    @property
    def backlogged(self) -> bool:
        """The engine has more records queued than ingest should add to (``ingest_waits_at_records``)."""
        return self.queued >= self.settings.ingest_waits_at_records

    @property
    def records(self) -> int:
        """Records folded into the engines so far (the ones still queued are not counted; in a process, as of its
        last evaluation)."""
        if self.in_process:
            return sum(result.records for result in self.clusters.values())
        return sum(engine.records for engine in self.engines.values())

    def observe(self, env: Envelope, recv_ns: int) -> None:
        summary = env.kind == "inspector_summary"
        if summary:
            self.summarizing[(env.cluster, env.node)] = recv_ns
        elif (env.cluster, env.node) in self.summarizing:
            return  # a sample of what the node's summaries carry
        room = self.settings.max_records - self.queued
        if room < len(env.records):
            if not self.dropped:
                log.warning("straggler engine queue full (aggregator.stragglers.max_records = %d): records dropped, "
                            "counted in the status's stragglers.dropped", self.settings.max_records)  # fmt: skip
            self.dropped += len(env.records) - max(room, 0)
        taken = env.records[: max(room, 0)]
        if taken:
            self.pending.append(_ENCODER.encode((env.cluster, summary, list(map(_ROW[summary], taken)))))
            self.queued += len(taken)
        self.last_recv_ns[env.cluster] = recv_ns
        finder = self.hang_finders.get(env.cluster)
        if finder is None:
            finder = self.hang_finders[env.cluster] = HangFinder(self.settings.hang_quiet_s)
        for rec in env.records:
            if summary:
                finder.add_summary(rec, recv_ns, env.node)
            else:
                finder.add(rec, recv_ns, env.node)

    def tick(self, now_ns: int) -> None:
        if self._running is not None and self._running.done():
            running, self._running = self._running, None
            self._picked_up(running)
        if self._running is not None or now_ns - self._last_eval_ns < self.settings.evaluate_every_s * NS:
            return
        self._last_eval_ns = now_ns
        for cluster, finder in list(self.hang_finders.items()):
            finder.forget_older_than(now_ns - int(self.settings.hang_retain_s * NS))
            if not finder.comm_ops:
                del self.hang_finders[cluster]
        horizon = now_ns - int(self.settings.retain_windows * self.settings.window_s * NS)
        gone = {cluster for cluster, ns in self.last_recv_ns.items() if ns < horizon}
        self.summarizing = {key: ns for key, ns in self.summarizing.items() if ns >= horizon}
        for cluster in gone:
            del self.last_recv_ns[cluster]
        batch, self.pending, self.queued = self.pending, [], 0
        self.taken.set()
        # The first run (the replay at start) is inline: a rule evaluated before it would see no findings and
        # resolve alerts that are still true, then fire them again.
        first, self._evaluated_once = not self._evaluated_once, True
        if not self._background or (self._executor is None and not batch):
            # nothing to hand over (no engine yet)
            self._set_findings(self._evaluate(_decoded(batch), gone, now_ns))
            return
        running = self._submit(batch, gone, now_ns)
        if first:
            self._picked_up(running)  # waited for
        else:
            self._running = running

    def _submit(self, batch: list[bytes], gone: set[str], now_ns: int) -> Future[dict[str, ClusterFindings]]:
        while self.in_process:
            try:
                return self._worker().submit(_process_evaluate, batch, gone, now_ns)
            except (BrokenExecutor, OSError) as exc:  # it died between evaluations, or cannot start: another
                self._engine_lost(exc)
        return self._worker().submit(self._evaluate, _decoded(batch), gone, now_ns)

    def _picked_up(self, running: Future[dict[str, ClusterFindings]]) -> None:
        try:
            self._set_findings(running.result())
        except Exception as exc:  # the engine process died (killed, out of memory): its engines are lost
            self._engine_lost(exc)
        else:
            self._lost_in_row = 0

    def _engine_lost(self, exc: BaseException) -> None:
        self.engine_restarts += 1
        self._lost_in_row += 1
        if self.in_process and self._lost_in_row >= MAX_LOST_IN_ROW:
            self._process_failed = True
            log.error("straggler engine process failed %d times in a row (%s); the engine runs on a thread from now "
                      "on", self._lost_in_row, exc)  # fmt: skip
        else:
            log.error("straggler engine failed (%s); starting it again, with empty engines", exc)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        self.engines = {}

    def hangs(
        self, cluster: str, now_ns: int, read_until: Callable[[str], int | None] | None = None
    ) -> list[Hang]:
        finder = self.hang_finders.get(cluster)
        return finder.hangs(now_ns, read_until) if finder else []

    def forget(self, nodes: set[NodeKey]) -> None:
        """Drop the nodes' processes in the hang finders (Inspector records age out by time, findings with them)."""
        self.summarizing = {key: ns for key, ns in self.summarizing.items() if key not in nodes}
        for cluster, finder in list(self.hang_finders.items()):
            finder.forget_nodes({node for c, node in nodes if c == cluster})
            if not finder.comm_ops:
                del self.hang_finders[cluster]

    def _set_findings(self, clusters: dict[str, ClusterFindings]) -> None:
        self.clusters = clusters
        for cluster, result in clusters.items():
            self._history += [{"evaluated_at": iso(result.evaluated_ns), "cluster": cluster,
                               "capture_model": result.capture_model, "records": result.records,
                               **{k: v for k, v in f.as_dict().items() if k not in ("evidence", "slow_comms")},
                               "evidence": f.evidence} for f in result.findings]  # fmt: skip

    def take_history(self) -> list[dict[str, object]]:
        """Findings of the evaluations since the last call, for the ``straggler_finding_history`` table."""
        rows, self._history = self._history, []
        return rows

    def _evaluate(self, batch: Records, gone: set[str], now_ns: int) -> dict[str, ClusterFindings]:
        for cluster in gone:
            self.engines.pop(cluster, None)
        for cluster, rec in batch:
            engine = self.engines.get(cluster)
            if engine is None:
                engine = self.engines[cluster] = StragglerEngine(self.params, offline=False)
            if _is_summary(rec):
                engine.add_summary(cast(InspectorSummaryRecord, rec))
            else:
                engine.add(cast(InspectorRecord, rec))
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
            out[cluster] = ClusterFindings(findings, engine.records, engine.capture_model, now_ns)
        return out


# -- the engine process ------------------------------------------------------------------------------------------------
def _positional(
    twin: type,
) -> tuple[Callable[[object], tuple[object, ...]], msgspec.msgpack.Decoder[object]]:
    """A record's values in field order, and their decoder into a struct read like the record's twin (same fields,
    types and constraints, laid out as an array): queued records take half the bytes of maps with field names."""
    fields = msgspec.structs.fields(twin)
    getter = operator.attrgetter(*(f.name for f in fields))
    row = msgspec.defstruct(f"Queued{twin.__name__}", [(f.name, f.type) for f in fields], array_like=True,
                            gc=False)  # fmt: skip
    return getter, msgspec.msgpack.Decoder(row)


_ROW_SUMMARY, _SUMMARY = _positional(InspectorSummaryRecord)
_ROW_RAW, _RAW = _positional(InspectorRecord)
_ROW = {True: _ROW_SUMMARY, False: _ROW_RAW}  # by "is a summary"
_QUEUED = msgspec.msgpack.Decoder(tuple[str, bool, list[msgspec.Raw]])
_ENCODER = msgspec.msgpack.Encoder(enc_hook=to_builtins)  # values of a pydantic record (tests) as plain data
_process_tracker: StragglerTracker | None = None  # in the engine process: its engines


def _is_summary(rec: InspectorRecord | InspectorSummaryRecord) -> bool:
    return hasattr(rec, "window_us")  # twins of both kinds are plain structs


def _decoded(batch: list[bytes]) -> Records:
    """The queued records, in order, each decoded as it is folded: the batch's records are never all alive at once (at
    1024 nodes a 2 s batch decoded whole held about 50,000 records beside its own bytes)."""
    decoded = (
        (cluster, (_SUMMARY if summary else _RAW).decode(raw))
        for cluster, summary, records in map(_QUEUED.decode, batch)
        for raw in records
    )
    return cast(Records, decoded)  # the twins of the records


def _process_start(settings_json: str) -> None:
    global _process_tracker
    _process_tracker = StragglerTracker(StragglerSettings.model_validate_json(settings_json))
    # Ctrl-C reaches the whole process group: the aggregator decides when this process ends
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), name="parent-watch", daemon=True).start()


def _exit_with_parent(parent: int) -> None:
    """An aggregator killed outright (SIGKILL, the OOM killer) cannot stop its engine process, which would wait for
    work forever holding the engines' memory: it stops itself once its parent is gone."""
    while os.getppid() == parent:
        time.sleep(PARENT_WATCH_S)
    os._exit(0)


def _process_evaluate(batch: list[bytes], gone: set[str], now_ns: int) -> dict[str, ClusterFindings]:
    tracker = _process_tracker
    assert tracker is not None, "the engine process starts with _process_start"
    # its previous findings: kept when one fails
    tracker.clusters = tracker._evaluate(_decoded(batch), gone, now_ns)
    return tracker.clusters
