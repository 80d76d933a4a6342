"""The server binding of a query endpoint: its contract (:class:`~ranksight.api.contract.EndpointSpec`) with the
handler that answers it and how sharded aggregators' answers join. A handler binds itself where it is written
(:func:`handles`); :mod:`aggregator.api.endpoints` joins the bindings to the declarations. From them come the NATS micro
endpoints, the HTTP routes and the OpenAPI document. :func:`answer` maps what a handler raises to the one response
shape and status that both faces share.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ranksight.aggregator.api.merge import Merge
from ranksight.api.contract import EndpointSpec, P, parse_params
from ranksight.core.redact import redact
from ranksight.errors import RefusedError, api_status
from ranksight.schemas.api import ApiResponse

if TYPE_CHECKING:
    from ranksight.aggregator.runtime import Aggregator
    from ranksight.aggregator.settings import AggregatorView

log = logging.getLogger(__name__)
Handler = Callable[["Aggregator", Any], Awaitable[ApiResponse]]
H = TypeVar("H", bound=Handler)
# endpoint name -> (handler, merge), as the handler modules bind them when imported
BINDINGS: dict[str, tuple[Handler, Merge[Any] | None]] = {}


def handles(name: str, merge: Merge[Any] | None = None) -> Callable[[H], H]:
    """Bind the decorated handler to endpoint ``name`` (declared in :mod:`ranksight.api.endpoints`). ``merge``: how
    sharded aggregators' answers join into one for the whole cluster; None (an answer that does not union: an
    aggregate, a write, one job's agents) answers from the asked aggregator's own data alone."""

    def bind(handler: H) -> H:
        if name in BINDINGS:
            raise RuntimeError(f"endpoint {name!r} is bound twice: {BINDINGS[name][0].__qualname__} and "
                               f"{handler.__qualname__}")  # fmt: skip
        BINDINGS[name] = (handler, merge)
        return handler

    return bind


class Forbidden(RefusedError, PermissionError):
    """A request for something the aggregator does not allow (a path outside the export root); answered with 403."""


@dataclass(frozen=True)
class Endpoint(Generic[P]):
    """One query endpoint as the aggregator serves it. ``merge``: how sharded aggregators' answers are joined into one
    for the whole cluster (:mod:`aggregator.api.front`); None: the aggregator asked answers from its own data alone."""

    spec: EndpointSpec[P]
    handler: Callable[[Aggregator, P], Awaitable[ApiResponse]]
    merge: Merge[P] | None = None
    wait_s: Callable[[AggregatorView], float] | None = None  # how long a client waits, when not the usual

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
