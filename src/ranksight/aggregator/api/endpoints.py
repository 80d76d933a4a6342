"""Every query endpoint's server binding: the handler that answers it and how sharded aggregators' answers join.

The endpoints themselves (name, parameters, CLI presentation) are declared in :mod:`ranksight.api.endpoints`; each has
exactly one binding here (checked when this module loads). From :data:`ENDPOINTS` come the NATS micro endpoints
(:mod:`aggregator.api.service`), the HTTP routes and the OpenAPI document (:mod:`aggregator.http`). Adding an endpoint
is its declaration there, its handler beside the data it reads, and one line here.
"""

from __future__ import annotations

from typing import Any

from ranksight.aggregator.api import actions, alerting, forensics, queries, ras_queries, views
from ranksight.aggregator.api.endpoint import Endpoint
from ranksight.aggregator.api.gpu_probes import gpu_probes
from ranksight.aggregator.api.markers import markers
from ranksight.aggregator.api.merge import Merge
from ranksight.api import params
from ranksight.api.endpoints import SPECS

# How sharded aggregators' answers join (aggregator.api.merge). Not merged: sql (an aggregate or a LIMIT does not
# union; SQL across shards reads their Parquet exports), series (a rank's lateness needs every rank of its
# communicator, and a line can be split between two shards by a takeover), incidents (per-alert aggregates of one
# shard's history), the endpoints that write (export, drain, silence_add, silence_expire, action_approve, action_reject,
# action_undo) and those that ask one job's agents (job_dump, job_evidence).
BY_NODE: Merge[Any] = Merge(key=("cluster", "node"), order=("cluster", "node"), newest="last_seen")
ALERTS = Merge[params.AlertsParams](
    key=lambda p: ("fingerprint",) if p.state == "firing" else ("fingerprint", "state", "updated_at"),
    order=lambda p: ("-started_at",) if p.state == "firing" else ("-updated_at",),
    newest="updated_at", limit="limit")  # fmt: skip

# endpoint name -> (handler, merge)
_BINDINGS: dict[str, tuple[Any, Merge[Any] | None]] = {
    "status": (queries.status, BY_NODE),
    "nodes": (queries.nodes, BY_NODE),
    "alerts": (queries.alerts, ALERTS),
    "sql": (queries.sql, None),
    "export": (queries.export, None),
    "jobs": (ras_queries.jobs, Merge(key=("cluster", "job"), order=("cluster", "first_seen"), newest="last_poll")),
    "comms": (ras_queries.comms, Merge(key=("cluster", "job", "hash"), order=("cluster", "job", "hash"))),
    "gpus": (queries.gpus, Merge(key=("cluster", "node", "index"), order=("cluster", "node", "index"),
                                 newest="last_seen")),
    "nics": (queries.nics, Merge(key=("cluster", "node", "name"), order=("cluster", "node", "name"),
                                 newest="last_seen")),
    "links": (queries.links, Merge(key=("cluster", "src", "dst", "transport", "dst_addr"),
                                   order=("cluster", "src", "dst"), newest="measured")),
    "gpu_probes": (gpu_probes, Merge(key=("cluster", "node", "index"), order=("cluster", "node", "index"),
                                     newest="measured", counts=("discarded_busy",))),
    "markers": (markers, Merge(key=("cluster", "node", "pid", "time", "text"), order=("time", "node", "pid"),
                               limit="limit")),
    "stragglers": (queries.stragglers, Merge(key=("cluster", "hostname", "pid", "kind", "comm", "rank"),
                                             order=("cluster", "-slowdown"), newest="last_seen", counts=("records",))),
    "cluster_map": (views.cluster_map, Merge(key=("cluster", "node"), order=("cluster", "node"))),
    "series": (views.series, None),
    "drain": (alerting.drain, None),
    "drains": (alerting.drains, Merge(key=("cluster", "node"), order=("cluster", "node"), newest="since")),
    "silence_add": (alerting.silence_add, None),
    "silences": (alerting.silences, Merge(key=("id",), order=("-starts_at",))),
    "silence_expire": (alerting.silence_expire, None),
    "action_plan": (actions.action_plan, Merge(key=("id",), order=("-at",))),
    "actions": (actions.actions, Merge(key=("id",), order=("-at",), limit="limit")),
    "action_audit": (actions.action_audit, Merge(key=("id", "step", "step_at"), order=("-step_at",), limit="limit")),
    "action_approve": (actions.action_approve, None),
    "action_reject": (actions.action_reject, None),
    "action_undo": (actions.action_undo, None),
    "job_dump": (forensics.job_dump, None),
    "job_evidence": (forensics.job_dump, None),
    "incidents": (alerting.incidents, None),
}  # fmt: skip

if _BINDINGS.keys() != SPECS.keys():
    raise RuntimeError(
        f"endpoints without a binding: {sorted(SPECS.keys() - _BINDINGS.keys())}; "
        f"bindings without an endpoint: {sorted(_BINDINGS.keys() - SPECS.keys())}"
    )
ENDPOINTS: dict[str, Endpoint[Any]] = {name: Endpoint(spec, *_BINDINGS[name]) for name, spec in SPECS.items()}
