"""Raw Inspector records on a finding: complete evidence in history although agents publish raw records rate-limited.

When an alert of ``aggregator.raw_evidence.rules`` fires (``straggler``, ``collective_hang``, ``comm_hang``), the
aggregator works out the communicators it is about (a compute straggler's comms, a communication finding's slow comms,
a hang's stalled comms) and the agents whose processes are their ranks, from the membership live state keeps (the hang
finder's last ``coll_sn`` per rank and the agent each process reports through), and asks each agent for the raw records
of those comms within ``[fired - lookback_s, fired + lookahead_s]`` of dump time, page by page, on its
``inspector_raw`` command. The records are checked like ingested ones (the same typed records, bounded values), kept only
when they are of the comms and window asked, and written into the ``inspector`` table except those already there
(:data:`schemas.records.inspector.IDENTITY`). The alert's evidence then gains ``raw_records``, ``raw_inserted``,
``raw_complete``, ``raw_missing`` (what could not be had and why: an agent that does not answer, the record bound),
``raw_window`` and ``raw_comms``, in live state and in every stored transition of the alert. Bounded by settings: agent
requests in flight, findings pending, agents and records per finding, retries; a failure is evidence, never a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec
import nats.errors

from ranksight.aggregator.component_settings import RawEvidenceSettings
from ranksight.aggregator.models.hangs import HangFinder, Proc
from ranksight.aggregator.timefmt import iso, ns_of
from ranksight.errors import RanksightError
from ranksight.schemas.alerts import Alert
from ranksight.schemas.records.inspector import RawCursor, RawRecordsPage, RawRecordsRequest

if TYPE_CHECKING:
    from ranksight.aggregator.runtime import Aggregator

log = logging.getLogger(__name__)
COMMAND = "inspector_raw"


class RawFetchError(RanksightError):
    """An agent's records could not be had; the message is the reason recorded in ``raw_missing``."""


@dataclass(frozen=True)
class EvidenceAsk:
    """What one finding needs: the comms (ids) and window, and the agents to ask (the finding's own first)."""

    cluster: str
    comms: tuple[str, ...]
    nodes: tuple[str, ...]
    from_us: int
    to_us: int
    not_asked: tuple[dict[str, str], ...] = ()


@dataclass
class NodeResult:
    records: int = 0
    inserted: int = 0
    missing: str | None = None


@dataclass
class RawEvidenceStats:
    findings: int = 0
    records: int = 0
    inserted: int = 0
    incomplete: int = 0
    not_asked: int = 0  # findings beyond max_pending_findings


def affected(alert: Alert, finder: HangFinder | None) -> tuple[set[str], list[str]]:
    """(comm ids, hostnames of the finding) for one alert, from its evidence and the comm membership ``finder`` has."""
    ev = alert.evidence
    ops = finder.comm_ops if finder is not None else {}
    hosts: list[str] = []
    if alert.rule == "straggler":
        hosts = [str(ev.get("hostname") or alert.node)]
        if ev.get("kind") == "communication":
            labels = {str(c.get("comm")) for c in ev.get("slow_comms") or [] if isinstance(c, dict)}
            return {cid for (cid, _), c in ops.items() if c.label in labels or cid in labels}, hosts
        pid = ev.get("pid")  # None: a node-wide finding, every process of the host
        seen = finder.proc_seen if finder is not None else {}
        procs = {p for p in seen if p[0] == hosts[0] and (pid is None or p[1] == pid)}
        return {
            cid for (cid, _), c in ops.items() if any(proc in procs for _, proc in c.last.values())
        }, hosts
    rows = [
        r for key in ("lagging_ranks", "inspector_lagging") for r in ev.get(key) or [] if isinstance(r, dict)
    ]
    comms = {str(r["comm_id"]) for r in rows if r.get("comm_id")}
    hosts = list(dict.fromkeys(str(r["hostname"]) for r in rows if r.get("hostname")))
    return comms, hosts


def _members(ops: dict[tuple[str, str], Any]) -> list[tuple[str, Proc]]:
    return [(cid, proc) for (cid, _), c in ops.items() for _, proc in c.last.values()]


def plan(alert: Alert, finder: HangFinder | None, settings: RawEvidenceSettings) -> EvidenceAsk:
    """The comms, window and agents one finding's raw records are asked from (pure)."""
    comms, hosts = affected(alert, finder)
    fired_us = ns_of(alert.started_at) // 1000
    window = (fired_us - int(settings.lookback_s * 1e6), fired_us + int(settings.lookahead_s * 1e6))
    if finder is None or not comms:
        why = "the communicators of the finding are not known to live state (no recent Inspector records)"
        return EvidenceAsk(alert.cluster, (), (), *window, ({"node": alert.node or "", "reason": why},))
    by_proc = {proc: node for proc, (_, node) in finder.proc_seen.items()}
    nodes: dict[str, bool] = {}  # agent node -> is it the finding's own
    for cid, proc in _members(finder.comm_ops):
        node = by_proc.get(proc)
        if cid in comms and node is not None:
            nodes[node] = nodes.get(node, False) or proc[0] in hosts
    ordered = sorted(nodes, key=lambda n: (not nodes[n], n))
    keep = settings.max_nodes_per_finding
    not_asked = tuple({"node": n, "reason": f"beyond max_nodes_per_finding ({keep})"} for n in ordered[keep:])
    return EvidenceAsk(alert.cluster, tuple(sorted(comms)), tuple(ordered[:keep]), *window, not_asked)


class RawEvidence:
    """Asks agents for a finding's raw records when its alert fires (``submit`` on tick; the work runs in tasks)."""

    def __init__(self, settings: RawEvidenceSettings) -> None:
        self.settings = settings
        self.stats = RawEvidenceStats()
        self._tasks: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(settings.max_concurrent_requests)  # agent requests in flight

    def submit(self, agg: Aggregator, transitions: list[Alert]) -> None:
        """Start fetching for each alert of the configured rules that fires now."""
        cfg = self.settings
        if not cfg.enabled or agg.nc is None:
            return
        for alert in transitions:
            if alert.state != "firing" or alert.rule not in cfg.rules:
                continue
            state = agg.analysis_state or agg.state
            ask = plan(alert, state.stragglers.hang_finders.get(alert.cluster), cfg)
            if len(self._tasks) >= cfg.max_pending_findings:
                self.stats.not_asked += 1
                why = f"not asked: {cfg.max_pending_findings} findings were waiting for records (max_pending_findings)"
                ask = EvidenceAsk(ask.cluster, ask.comms, (), ask.from_us, ask.to_us,
                                  tuple({"node": n, "reason": why} for n in ask.nodes) + ask.not_asked)  # fmt: skip
            task = asyncio.create_task(
                self._complete(agg, alert, ask), name=f"raw-evidence-{alert.fingerprint}"
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def collect(self, agg: Aggregator, ask: EvidenceAsk) -> dict[str, Any]:
        """Fetch and write one finding's raw records; the evidence keys that say what it got."""
        budget = [self.settings.max_records_per_finding]
        try:
            results = await asyncio.gather(*(self._fetch_node(agg, ask, node, budget) for node in ask.nodes))
        except Exception:  # a bug must not lose the alert's evidence keys: say what happened
            log.exception("raw records of comms %s failed", ", ".join(ask.comms))
            results = [NodeResult(missing="internal error (see the aggregator log)") for _ in ask.nodes]
        missing = [*ask.not_asked, *({"node": n, "reason": r.missing} for n, r in zip(ask.nodes, results, strict=True)
                                     if r.missing)]  # fmt: skip
        records, inserted = sum(r.records for r in results), sum(r.inserted for r in results)
        s = self.stats
        s.findings, s.records, s.inserted = s.findings + 1, s.records + records, s.inserted + inserted
        s.incomplete += bool(missing)
        return {
            "raw_records": records,
            "raw_inserted": inserted,
            "raw_complete": not missing,
            "raw_missing": missing,
            "raw_window": [iso(ask.from_us * 1000), iso(ask.to_us * 1000)],
            "raw_comms": list(ask.comms),
        }

    async def _complete(self, agg: Aggregator, alert: Alert, ask: EvidenceAsk) -> None:
        evidence = await self.collect(agg, ask)
        active = agg.engine.active.get(alert.fingerprint)
        if active is not None and active.started_at == alert.started_at:
            active.evidence = {**active.evidence, **evidence}
        await agg.store.call(agg.store.add_alert_evidence, alert.fingerprint, alert.started_at, evidence)

    async def _fetch_node(
        self, agg: Aggregator, ask: EvidenceAsk, node: str, budget: list[int]
    ) -> NodeResult:
        """Every page of one agent's records, written as they come; ``budget`` is the finding's records left."""
        result = NodeResult()
        subject = agg.subjects.agent(ask.cluster, node, COMMAND)
        wanted = set(ask.comms)
        cursor: RawCursor | None = None
        for _ in range(self.settings.max_pages_per_node):
            if budget[0] <= 0:
                result.missing = (
                    f"more records than max_records_per_finding ({self.settings.max_records_per_finding})"
                )
                return result
            asked = min(self.settings.page_records, budget[0])
            budget[0] -= asked
            req = RawRecordsRequest(comms=list(ask.comms), from_us=ask.from_us, to_us=ask.to_us, cursor=cursor,
                                    max_records=asked)  # fmt: skip
            try:
                last = cursor
                page, cursor = await self._request(agg, subject, msgspec.json.encode(req))
                if cursor and last and (cursor.file, cursor.offset) <= (last.file, last.offset):
                    raise RawFetchError(f"bad answer: its next page ({cursor}) does not come after the last")
            except RawFetchError as exc:
                budget[0] += asked
                result.missing = str(exc)
                return result
            # only what was asked: an agent cannot write other comms or times into history this way
            got = [r for r in page.records if (r.comm_id in wanted or r.comm_name in wanted)
                   and ask.from_us <= r.dump_ts_us <= ask.to_us][:asked]  # fmt: skip
            budget[0] += asked - len(got)
            result.records += len(got)
            result.inserted += await agg.store.call(
                agg.store.insert_raw_inspector, ask.cluster, node, page.incarnation, got, time.time_ns()
            )
            if cursor is None:
                return result
        result.missing = f"more pages than max_pages_per_node ({self.settings.max_pages_per_node})"
        return result

    async def _request(self, agg: Aggregator, subject: str, body: bytes) -> tuple[Any, RawCursor | None]:
        """One page (a :class:`RawRecordsPage`) and its checked ``next``; retried while the agent does not
        answer."""
        cfg = self.settings
        assert agg.nc is not None
        reason = "no agent answers"
        for attempt in range(cfg.retries + 1):
            if attempt:
                await asyncio.sleep(cfg.retry_delay_s)
            async with self._slots:
                try:
                    msg = await agg.nc.request(subject, body, timeout=cfg.request_timeout_s)
                except nats.errors.NoRespondersError:
                    reason = "no agent answers (down, or its inspector collector is off)"
                    continue
                except nats.errors.TimeoutError:
                    reason = f"no answer within {cfg.request_timeout_s} s"
                    continue
            refused = (msg.headers or {}).get("Nats-Service-Error")
            if refused:
                raise RawFetchError(f"the agent refused: {refused}")
            try:
                page = msgspec.convert(json.loads(msg.data), RawRecordsPage)
                return page, RawCursor(file=page.next.file, offset=page.next.offset) if page.next else None
            except (ValueError, msgspec.ValidationError) as exc:
                raise RawFetchError(f"bad answer: {' '.join(str(exc).split())[:300]}") from None
        raise RawFetchError(f"{reason} ({cfg.retries + 1} tries)")
