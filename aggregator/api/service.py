"""The aggregator's query service on NATS (``nats.micro``: discoverable through ``$SRV.PING/INFO/STATS``).

Every endpoint takes a JSON object and answers one :class:`~schemas.api.ApiResponse`; an error is also reported in the
service error headers (``Nats-Service-Error``, ``Nats-Service-Error-Code``): 400 bad request (unknown or invalid
parameter), 403 SQL refused by the sandbox, 422 query failed (or timed out), 500 internal error.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from nats.aio.client import Client
from nats.micro import add_service
from nats.micro.request import Request
from nats.micro.service import Service

from aggregator.api.queries import ENDPOINTS, RequestError, answer
from schemas.api import ApiResponse

if TYPE_CHECKING:
    from aggregator.runtime import Aggregator


SERVICE_NAME = "ranksight-aggregator"


def _handler(agg: Aggregator, name: str, errors: Counter[str]) -> Callable[[Request], Awaitable[None]]:
    query = ENDPOINTS[name]

    async def handle(request: Request) -> None:
        async def call() -> ApiResponse:
            try:
                params: Any = json.loads(request.data) if request.data.strip() else {}
            except json.JSONDecodeError as exc:
                raise RequestError(f"body is not JSON: {exc}") from None
            if not isinstance(params, dict):
                raise RequestError("request body must be a JSON object")
            return await query(agg, params)

        response, status = await answer(name, call)
        code = "" if status == 200 else str(status)
        body = response.model_dump_json().encode()
        if code:
            errors[code] += 1
            await request.respond_error(code, response.error or "error", data=body)
        else:
            await request.respond(body)

    return handle


async def start_service(nc: Client, agg: Aggregator) -> Service:
    # Answered errors are replies, not handler exceptions, so nats.micro's num_errors does not see them: each
    # endpoint's STATS ``data`` carries its error replies by code instead.
    errors: dict[str, Counter[str]] = {name: Counter() for name in ENDPOINTS}
    service = await add_service(
        nc,
        name=SERVICE_NAME,
        version=agg.version,
        description="ranksight aggregator query API",
        metadata={"cluster": agg.settings.cluster},
        stats_handler=lambda stats: {"errors_by_code": dict(errors[stats.name])},
    )
    group = service.add_group(name=agg.subjects.api_group())
    for name in ENDPOINTS:
        await group.add_endpoint(name=name, handler=_handler(agg, name, errors[name]))
    return service
