"""Every query endpoint's server binding, joined to its declaration: the handler that answers it and how sharded
aggregators' answers join.

The endpoints themselves (name, parameters, CLI presentation) are declared in :mod:`ranksight.api.endpoints`; each
handler binds itself beside the data it reads (``@handles("name", merge=...)``, :mod:`aggregator.api.endpoint`) in one
of :data:`HANDLER_MODULES`, and each declaration has exactly one binding (checked when this module loads). From
:data:`ENDPOINTS` come the NATS micro endpoints (:mod:`aggregator.api.service`), the HTTP routes and the OpenAPI
document (:mod:`aggregator.http`). Adding an endpoint is its declaration there and its handler in one of these modules.
"""

from __future__ import annotations

from typing import Any

from ranksight.aggregator.api import (
    actions,
    alerting,
    forensics,
    gpu_probes,
    markers,
    queries,
    ras_queries,
    views,
)
from ranksight.aggregator.api.endpoint import BINDINGS, Endpoint
from ranksight.api.endpoints import SPECS

# The modules whose handlers bind themselves when imported (above).
HANDLER_MODULES = (actions, alerting, forensics, gpu_probes, markers, queries, ras_queries, views)

if BINDINGS.keys() != SPECS.keys():
    raise RuntimeError(
        f"endpoints without a handler: {sorted(SPECS.keys() - BINDINGS.keys())}; "
        f"handlers without an endpoint: {sorted(BINDINGS.keys() - SPECS.keys())}"
    )
ENDPOINTS: dict[str, Endpoint[Any]] = {name: Endpoint(spec, *BINDINGS[name]) for name, spec in SPECS.items()}
