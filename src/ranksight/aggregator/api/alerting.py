"""Alerting endpoints: planned changes (node drains), maintenance windows (silences) and the incidents view.

``drain``, ``silence_add`` and ``silence_expire`` change state, so they are NATS endpoints only (like ``export``);
``drains``, ``silences`` and ``incidents`` read, and are on the HTTP API too. A drain or silence is stored first, then
applied to the alert engine, then handed to the Alertmanager pusher, so an aggregator restart keeps it.
"""

from __future__ import annotations

import datetime
import time
import uuid
from typing import TYPE_CHECKING, Any

from ranksight.aggregator.api.endpoint import handles
from ranksight.aggregator.api.merge import Merge
from ranksight.aggregator.api.queries import history_rows
from ranksight.aggregator.timefmt import NS, iso, ns_of, utc
from ranksight.api.contract import RequestError
from ranksight.api.params import (
    DrainParams,
    DrainsParams,
    IncidentsParams,
    SilenceAddParams,
    SilenceExpireParams,
    SilencesParams,
)
from ranksight.schemas.alerts import Matcher, Silence
from ranksight.schemas.api import ApiResponse

if TYPE_CHECKING:
    from ranksight.aggregator.runtime import Aggregator


@handles("drain")
async def drain(agg: Aggregator, p: DrainParams) -> ApiResponse:
    """Mark nodes as expected to go silent (maintenance, removal), or end that; rows: the drained nodes."""
    cluster = p.cluster or agg.settings.cluster
    if any(not n.strip() for n in p.nodes):
        raise RequestError("a node name must not be empty")
    await agg.store.call(agg.store.set_drained, cluster, p.nodes, not p.undrain, p.reason)
    keys = {(cluster, n) for n in p.nodes}
    agg.engine.drained = agg.engine.drained - keys if p.undrain else agg.engine.drained | keys
    if agg.lead is not None:  # sharded: every shard, so whichever leads, applies it from the KV bucket
        await agg.lead.book.put_drains(cluster, p.nodes, not p.undrain, p.reason)
    return await drains(agg, DrainsParams())


async def drain_known(agg: Aggregator, cluster: str, node: str, drained: bool, reason: str) -> None:
    """A drain another shard received (sharded aggregators): stored and applied here too, when it is news."""
    if ((cluster, node) in agg.engine.drained) == drained:
        return
    await agg.store.call(agg.store.set_drained, cluster, [node], drained, reason)
    key = {(cluster, node)}
    agg.engine.drained = agg.engine.drained | key if drained else agg.engine.drained - key


@handles("drains", merge=Merge(key=("cluster", "node"), order=("cluster", "node"), newest="since"))
async def drains(agg: Aggregator, p: DrainsParams) -> ApiResponse:
    """Nodes drained now (expected to be silent): cluster, node, since, reason."""
    rows = await agg.store.call(agg.store.drained_nodes)
    return ApiResponse.success([r for r in rows if p.cluster in (None, r["cluster"])])


def _ns(value: datetime.datetime) -> int:
    return ns_of(utc(value).isoformat())


@handles("silence_add")
async def silence_add(agg: Aggregator, p: SilenceAddParams) -> ApiResponse:
    """Add a maintenance window: matching alerts are not announced (alert subjects) and Alertmanager silences them."""
    try:
        matchers = [Matcher.parse(m) for m in p.matchers]
    except ValueError as exc:
        raise RequestError(str(exc)) from None
    now = time.time_ns() // 1000 * 1000  # whole microseconds: what an ISO time keeps
    starts = _ns(p.starts_at) if p.starts_at else now
    if (p.duration_s is None) == (p.ends_at is None):
        raise RequestError("give exactly one of duration_s and ends_at")
    ends = starts + int(p.duration_s * NS) if p.duration_s is not None else _ns(p.ends_at)  # type: ignore[arg-type]
    if ends <= max(starts, now):
        raise RequestError("the silence would end before it starts (or in the past)")
    limit = agg.settings.aggregator.alerts.max_silences
    if len(agg.engine.silences) >= limit:
        raise RequestError(f"too many silences: {limit} active or pending (aggregator.alerts.max_silences)")
    silence = Silence(id=str(uuid.uuid4()), matchers=matchers, starts_at=iso(starts) or "", ends_at=iso(ends) or "",
                      created_by=p.created_by, comment=p.comment)  # fmt: skip
    await _save_silence(agg, silence)
    agg.engine.silences[silence.id] = silence
    agg.alertmanager.silence_changed(silence)
    return ApiResponse.success([silence_row(silence, now)])


async def _save_silence(agg: Aggregator, silence: Silence) -> None:
    await agg.store.call(agg.store.save_silence, silence)
    if agg.lead is not None:  # sharded: every shard, so whichever leads, applies it from the KV bucket
        await agg.lead.book.put_silence(silence)


async def silence_known(agg: Aggregator, silence: Silence) -> None:
    """A silence another shard received or expired (sharded aggregators): stored and applied here too."""
    await agg.store.call(agg.store.save_silence, silence)
    if ns_of(silence.ends_at) <= time.time_ns():
        agg.engine.silences.pop(silence.id, None)
    else:
        agg.engine.silences[silence.id] = silence


@handles("silence_expire")
async def silence_expire(agg: Aggregator, p: SilenceExpireParams) -> ApiResponse:
    """End a silence now."""
    silence = agg.engine.silences.get(p.id)
    if silence is None:
        raise RequestError(f"no active or pending silence {p.id!r}")
    now = time.time_ns() // 1000 * 1000  # whole microseconds: what an ISO time keeps
    expired = silence.model_copy(
        update={"ends_at": iso(now), "starts_at": iso(min(now, ns_of(silence.starts_at)))}
    )
    await _save_silence(agg, expired)
    del agg.engine.silences[p.id]
    agg.alertmanager.silence_changed(expired)
    return ApiResponse.success([silence_row(expired, now)])


@handles("silences", merge=Merge(key=("id",), order=("-starts_at",)))
async def silences(agg: Aggregator, p: SilencesParams) -> ApiResponse:
    """Silences (maintenance windows), newest first."""
    now = time.time_ns() // 1000 * 1000  # whole microseconds: what an ISO time keeps
    since = 0 if p.state == "all" else now
    found = await agg.store.call(agg.store.silences, since)
    return ApiResponse.success([silence_row(s, now) for s in reversed(found)])


def silence_row(silence: Silence, now_ns: int) -> dict[str, Any]:
    starts, ends = ns_of(silence.starts_at), ns_of(silence.ends_at)
    state = "expired" if ends <= now_ns else "pending" if starts > now_ns else "active"
    return {"id": silence.id, "state": state, "matchers": " ".join(str(m) for m in silence.matchers),
            "starts_at": silence.starts_at, "ends_at": silence.ends_at, "created_by": silence.created_by,
            "comment": silence.comment}  # fmt: skip


_INCIDENTS_SQL = """
WITH t AS (
    SELECT * FROM alert_history WHERE {where}
)
SELECT fingerprint, any_value(rule) AS rule, any_value(severity) AS severity, any_value(cluster) AS cluster,
       any_value(node) AS node, any_value(job) AS job, any_value(entity) AS entity,
       arg_max(summary, updated_at) AS summary,
       min(started_at) AS fired, max(updated_at) FILTER (state = 'resolved') AS resolved,
       arg_max(state, updated_at) AS state,
       count(*) FILTER (state = 'firing') AS firings,
       count(*) FILTER (state = 'firing') - 1 AS flaps,
       coalesce(sum(duration_s), 0) AS resolved_duration_s
FROM t GROUP BY fingerprint ORDER BY fired DESC LIMIT ?
"""


# not merged: per-alert aggregates of one shard's history
@handles("incidents")
async def incidents(agg: Aggregator, p: IncidentsParams) -> ApiResponse:
    """One row per alert (fingerprint) from history: fired, resolved, duration, flaps (times it fired again)."""
    where, args = ["TRUE"], []
    for key in ("cluster", "rule", "node"):
        if getattr(p, key) is not None:
            where.append(f"{key} = ?")
            args.append(getattr(p, key))
    if p.since is not None:
        where.append("updated_at >= ?")
        args.append(utc(p.since))
    rows = await agg.sandbox.run(
        history_rows, _INCIDENTS_SQL.format(where=" AND ".join(where)), [*args, p.limit + 1]
    )
    now = time.time_ns() // 1000 * 1000  # whole microseconds: what an ISO time keeps
    for row in rows:
        end_ns = now if row["state"] == "firing" else ns_of(row["resolved"])
        row["duration_s"] = round((end_ns - ns_of(row["fired"])) / NS, 3)
        del row["resolved_duration_s"]
        if row["state"] == "firing":
            row["resolved"] = None
    return ApiResponse.success(rows[: p.limit], truncated=len(rows) > p.limit)
