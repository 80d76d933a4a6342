"""The server binding of a query endpoint: its contract (:class:`~ranksight.api.contract.EndpointSpec`) with the
handler that answers it and how sharded aggregators' answers join (the bindings are in
:mod:`aggregator.api.endpoints`). From the bindings come the NATS micro endpoints, the HTTP routes and the OpenAPI
document. :func:`answer` maps what a handler raises to the one response shape and status that both faces share.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic

from ranksight.aggregator.api.merge import Merge
from ranksight.api.contract import EndpointSpec, P, parse_params
from ranksight.core.redact import redact
from ranksight.errors import RefusedError, api_status
from ranksight.schemas.api import ApiResponse

if TYPE_CHECKING:
    from ranksight.aggregator.runtime import Aggregator
    from ranksight.core.config import Settings

log = logging.getLogger(__name__)


class Forbidden(RefusedError, PermissionError):
    """A request for something the aggregator does not allow (a path outside the export root); answered with 403."""


@dataclass(frozen=True)
class Endpoint(Generic[P]):
    """One query endpoint as the aggregator serves it. ``merge``: how sharded aggregators' answers are joined into one
    for the whole cluster (:mod:`aggregator.api.front`); None: the aggregator asked answers from its own data alone."""

    spec: EndpointSpec[P]
    handler: Callable[[Aggregator, P], Awaitable[ApiResponse]]
    merge: Merge[P] | None = None
    wait_s: Callable[[Settings], float] | None = None  # how long a client waits, when not the usual

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def params(self) -> type[P]:
        return self.spec.params

    @property
    def http(self) -> bool:
        return self.spec.http

    @property
    def summary(self) -> str:
        return (self.handler.__doc__ or f"the {self.name} query").strip().splitlines()[0]

    async def call(self, agg: Aggregator, params: dict[str, Any]) -> ApiResponse:
        return await self.handler(agg, parse_params(self.params, params))


async def answer(name: str, call: Callable[[], Awaitable[ApiResponse]]) -> tuple[ApiResponse, int]:
    """Run one endpoint call; its response and status: 200, 400 bad request, 403 refused (SQL, export path), 422 query
    failed (the table :data:`ranksight.errors.API_STATUS`), 500 internal error. The one mapping that the NATS service
    and the HTTP API share."""
    try:
        response = await call()
    except Exception as exc:
        if (known := api_status(exc)) is not None:
            status, prefix = known
            return ApiResponse.failure(f"{prefix}: {exc}"), status
        log.exception("endpoint %s failed", name)
        return ApiResponse.failure(redact(f"{type(exc).__name__}: {exc}")), 500
    return response, 200 if response.ok else 422
