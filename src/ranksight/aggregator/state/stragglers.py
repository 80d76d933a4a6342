"""Online straggler analysis state: Inspector records folded into one incremental engine per cluster
(:mod:`aggregator.models.straggler`), evaluated on tick; the ``straggler`` rule (``aggregator.analysis.straggler_live``)
reports its findings.

Every record is folded in once (never re-analyzed); each evaluation judges the slices completed since the last one, a
sliding ``window_s`` horizon with a ``judge_every_s`` hop. In the aggregator this runs in the background
(``background=True``) and its result is picked up by a later tick, so the event loop never waits for it: ``observe`` only
queues records. The engines (:mod:`aggregator.models.engines`, all that the child imports: no pydantic, no DuckDB,
no nats-py) live in a child process (:class:`~aggregator.models.engines.EngineProcess`, started with the first
records): the aggregator's
Python threads share one interpreter lock, and at a thousand nodes ingest alone fills one core (``benchmarks/scale.py``).
Records are queued as msgpack arrays of their values, each envelope's as it is observed (they are plain numbers and
strings: a summary record takes a sixth of the memory it takes decoded, and at 1024 nodes the engine gets 2 s of them
at each evaluation), and go to the engine as they are, over a pipe; findings come back pickled. A child that dies is started again
with empty engines (``engine_restarts``). ``process = false``: a thread of the aggregator, which decodes the queue
itself.
A cluster whose records stop arriving (by receipt time) for ``retain_windows`` x ``window_s`` is forgotten and its
alerts resolve.

Each record is also folded, as it arrives, into the cluster's :class:`aggregator.models.hangs.HangFinder` (the last
``coll_sn`` per rank); the ``collective_hang`` rule asks it on every tick. A hung job is silent, so its collectives are
kept ``hang_retain_s`` (not the straggler horizon) after they last advanced.

Agents summarize (``inspector_summary``, per window) and publish raw records only at a bounded rate: summaries feed the
engine and the hang finder, and the raw records of a node that sent summaries within the last ``retain_windows`` x
``window_s`` are samples of what those carry, so they feed neither. An older agent's raw records feed both, as before.
"""

from __future__ import annotations

import asyncio
import logging
import operator
from collections.abc import Callable, Sequence
from concurrent.futures import BrokenExecutor, Executor, Future, ThreadPoolExecutor
from itertools import repeat
from typing import Any

from ranksight.aggregator.forgetting import NodeKey
from ranksight.aggregator.models.engines import (
    ClusterEngines,
    ClusterFindings,
    EngineProcess,
    decoded,
    params_of,
    process_evaluate,
    queue_entry,
)
from ranksight.aggregator.models.hangs import Hang, HangFinder
from ranksight.aggregator.models.straggler.settings import StragglerSettings
from ranksight.aggregator.timefmt import NS, iso
from ranksight.schemas.envelope import Envelope

__all__ = ["ClusterFindings", "StragglerTracker", "params_of"]

log = logging.getLogger(__name__)

# a record's rank within its cluster: (communicator, collective, host, pid)
_RANK = operator.attrgetter("comm_id", "op", "hostname", "pid")
# engine processes failing one after the other (none can start, or each is killed at once) before a thread takes over
MAX_LOST_IN_ROW = 3


class StragglerTracker:
    kinds = frozenset({"inspector", "inspector_summary"})

    def __init__(self, settings: StragglerSettings | None = None) -> None:
        # queued by observe, folded in on evaluation: per envelope, (cluster, is a summary, its records' values in
        # field order) as msgpack
        self.pending: list[bytes] = []
        self.queued = 0  # records in pending
        self.summarizing: dict[NodeKey, int] = {}  # nodes that send summaries: receipt time of the latest
        # (cluster, host) -> (the node whose agent reports that host's processes, receipt time of its latest records)
        self.host_nodes: dict[tuple[str, str], tuple[str, int]] = {}
        self.foreign = 0  # records naming a host another node's agent reports: not analyzed
        # per cluster, (comm_id, collective, host, pid) -> receipt time of its latest records: the ranks followed
        self.followed_ranks: dict[str, dict[tuple[str, str, str, int], int]] = {}
        self.untracked = 0  # records of ranks beyond max_ranks: not analyzed
        self.dropped = 0  # records dropped because the queue was full (the worker fell behind)
        # set when a tick hands the queue to the engine (a waiting ingest goes on)
        self.taken = asyncio.Event()
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
        # the engines on a worker thread (``process = false``, or the process failed); touched only by the evaluation
        self.local = ClusterEngines(self.params)

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
                self._executor = EngineProcess(self.params)
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
        return self.local.records

    def observe(self, env: Envelope, recv_ns: int) -> None:
        summary = env.kind == "inspector_summary"
        if summary:
            self.summarizing[(env.cluster, env.node)] = recv_ns
        elif (env.cluster, env.node) in self.summarizing:
            return  # a sample of what the node's summaries carry
        records = self._tracked(env.cluster, self._own(env, recv_ns), recv_ns)
        room = self.settings.max_records - self.queued
        if room < len(records):
            if not self.dropped:
                log.warning("straggler engine queue full (aggregator.stragglers.max_records = %d): records dropped, "
                            "counted in the status's stragglers.dropped", self.settings.max_records)  # fmt: skip
            self.dropped += len(records) - max(room, 0)
        taken = records[: max(room, 0)]
        if taken:
            self.pending.append(queue_entry(env.cluster, summary, taken))
            self.queued += len(taken)
        self.last_recv_ns[env.cluster] = recv_ns
        finder = self.hang_finders.get(env.cluster)
        if finder is None:
            finder = self.hang_finders[env.cluster] = HangFinder(self.settings.hang_quiet_s)
        for rec in records:
            if summary:
                finder.add_summary(rec, recv_ns, env.node)
            else:
                finder.add(rec, recv_ns, env.node)

    @property
    def _retain_ns(self) -> int:
        """How long a cluster, a summarizing node or a host's node is remembered after its last records."""
        return int(self.settings.retain_windows * self.settings.window_s * NS)

    def _own(self, env: Envelope, recv_ns: int) -> Sequence[Any]:
        """The envelope's records of hosts its node reports. A record names its process's host (the one the
        communicator knows), and one node's agent reads that host's dump files: the first node whose records name a
        host holds it while they keep coming (within ``retain_windows`` x ``window_s``; then the next node to name it
        takes it, as when a job's pod starts again elsewhere), and another node's records naming it are counted
        (``foreign``), not analyzed. A peer publishing in another host's name would otherwise make that host's
        processes slow or incomplete (``late``) to the engine, its collectives stalled or advancing to the hang finder,
        and its raw evidence asked from the peer."""
        release_ns = recv_ns - self._retain_ns
        hosts = {rec.hostname for rec in env.records}
        foreign = set()
        for host in hosts:
            key = (env.cluster, host)
            node, seen_ns = self.host_nodes.get(key, (env.node, recv_ns))
            if node == env.node:
                self.host_nodes[key] = (node, max(seen_ns, recv_ns))
            elif seen_ns < release_ns:  # its node fell silent about it: taken over
                self.host_nodes[key] = (env.node, recv_ns)
            else:
                foreign.add(host)
        if not foreign:
            return env.records
        kept = [rec for rec in env.records if rec.hostname not in foreign]
        if not self.foreign:
            log.warning("Inspector records of node %s name hosts another node's agent reports (%s): not analyzed, "
                        "counted in the status's stragglers.foreign", env.node, ", ".join(sorted(foreign)[:4]))  # fmt: skip
        self.foreign += len(env.records) - len(kept)
        return kept

    def _tracked(self, cluster: str, records: Sequence[Any], recv_ns: int) -> Sequence[Any]:
        """``records`` of the ranks followed, and of new ones while fewer than ``max_ranks`` are (first come); the
        others are counted (``untracked``), not analyzed."""
        ranks = self.followed_ranks.setdefault(cluster, {})
        keys = list(map(_RANK, records))
        limit = self.settings.max_ranks
        followed = sum(map(len, self.followed_ranks.values()))
        if followed + len(keys) > limit:  # near the bound: which of them are new, and is there room for them
            new = dict.fromkeys(key for key in keys if key not in ranks)
            if len(new) > limit - followed:
                refused = set(list(new)[max(0, limit - followed) :])
                kept = [i for i, key in enumerate(keys) if key not in refused]
                if not self.untracked:
                    log.warning("%d ranks are followed already (aggregator.stragglers.max_ranks): records of further "
                                "ones are not analyzed, counted in the status's stragglers.untracked", limit)  # fmt: skip
                self.untracked += len(keys) - len(kept)
                keys, records = [keys[i] for i in kept], [records[i] for i in kept]
        ranks.update(zip(keys, repeat(recv_ns)))
        return records

    def _keep_ranks(self, keep: Callable[[str, tuple[str, str, str, int], int], bool]) -> None:
        """Forget the followed ranks that ``keep(cluster, rank, receipt ns of its latest records)`` refuses."""
        self.followed_ranks = {cluster: kept for cluster, ranks in self.followed_ranks.items()
                               if (kept := {rank: ns for rank, ns in ranks.items() if keep(cluster, rank, ns)})}  # fmt: skip

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
        horizon = now_ns - self._retain_ns
        gone = {cluster for cluster, ns in self.last_recv_ns.items() if ns < horizon}
        self.summarizing = {key: ns for key, ns in self.summarizing.items() if ns >= horizon}
        self.host_nodes = {key: held for key, held in self.host_nodes.items() if held[1] >= horizon}
        # a rank is followed as long as the engine or the hang finder may hold it
        since_ns = now_ns - max(self._retain_ns, int(self.settings.hang_retain_s * NS))
        self._keep_ranks(lambda _cluster, _rank, seen_ns: seen_ns >= since_ns)
        for cluster in gone:
            del self.last_recv_ns[cluster]
        batch, self.pending, self.queued = self.pending, [], 0
        self.taken.set()
        # The first run (the replay at start) is inline: a rule evaluated before it would see no findings and
        # resolve alerts that are still true, then fire them again.
        first, self._evaluated_once = not self._evaluated_once, True
        if not self._background or (self._executor is None and not batch):
            # nothing to hand over (no engine yet)
            self._set_findings(self.local.evaluate(decoded(batch), gone, now_ns))
            return
        running = self._submit(batch, gone, now_ns)
        if first:
            self._picked_up(running)  # waited for
        else:
            self._running = running

    def _submit(self, batch: list[bytes], gone: set[str], now_ns: int) -> Future[dict[str, ClusterFindings]]:
        while self.in_process:
            try:
                return self._worker().submit(process_evaluate, batch, gone, now_ns)
            except (BrokenExecutor, OSError) as exc:  # it died between evaluations, or cannot start: another
                self._engine_lost(exc)
        return self._worker().submit(self.local.evaluate, decoded(batch), gone, now_ns)

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
        self.local = ClusterEngines(self.params)

    def hangs(
        self, cluster: str, now_ns: int, read_until: Callable[[str], int | None] | None = None
    ) -> list[Hang]:
        finder = self.hang_finders.get(cluster)
        return finder.hangs(now_ns, read_until) if finder else []

    def forget(self, nodes: set[NodeKey]) -> None:
        """Drop the nodes' processes in the hang finders and the ranks followed on their hosts (Inspector records age
        out by time, findings with them)."""
        self.summarizing = {key: ns for key, ns in self.summarizing.items() if key not in nodes}
        gone = {key for key, held in self.host_nodes.items() if (key[0], held[0]) in nodes}  # (cluster, host)
        self.host_nodes = {key: held for key, held in self.host_nodes.items() if key not in gone}
        self._keep_ranks(lambda cluster, rank, _seen_ns: (cluster, rank[2]) not in gone)
        for cluster, finder in list(self.hang_finders.items()):
            finder.forget_nodes({node for c, node in nodes if c == cluster})
            if not finder.comm_ops:
                del self.hang_finders[cluster]

    def _set_findings(self, clusters: dict[str, ClusterFindings]) -> None:
        self.clusters = clusters
        for cluster, result in clusters.items():
            self._history += [{"evaluated_at": iso(result.evaluated_ns), "cluster": cluster,
                               "capture_model": result.capture_model, "records": result.records,
                               **{k: v for k, v in f.as_dict().items() if k not in ("evidence", "slow_comms", "coverage")},
                               "evidence": f.evidence} for f in result.findings]  # fmt: skip

    def take_history(self) -> list[dict[str, object]]:
        """Findings of the evaluations since the last call, for the ``straggler_finding_history`` table."""
        rows, self._history = self._history, []
        return rows
