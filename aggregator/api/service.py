"""The aggregator's query service on NATS (``nats.micro``: discoverable through ``$SRV.PING/INFO/STATS``).

Every endpoint takes a JSON object and answers one :class:`~schemas.api.ApiResponse`; an error is also reported in the
service error headers (``Nats-Service-Error``, ``Nats-Service-Error-Code``): 400 bad request (unknown or invalid
parameter), 403 SQL refused by the sandbox, 422 query failed (or timed out), 500 internal error.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from nats.aio.client import Client
from nats.micro import add_service
from nats.micro.request import Request
from nats.micro.service import Service

from aggregator.api.queries import ENDPOINTS, RequestError
from aggregator.api.sql import SqlFailed, SqlRefused
from schemas.api import ApiResponse

if TYPE_CHECKING:
    from aggregator.runtime import Aggregator

log = logging.getLogger(__name__)

SERVICE_NAME = "ranksight-aggregator"


def _handler(agg: Aggregator, name: str, errors: Counter[str]) -> Callable[[Request], Awaitable[None]]:
    query = ENDPOINTS[name]

    async def handle(request: Request) -> None:
        try:
            params: Any = json.loads(request.data) if request.data.strip() else {}
            if not isinstance(params, dict):
                raise RequestError("request body must be a JSON object")
            response = await query(agg, params)
        except (RequestError, json.JSONDecodeError) as exc:
            response, code = ApiResponse.failure(f"bad request: {exc}"), "400"
        except SqlRefused as exc:
            response, code = ApiResponse.failure(f"refused: {exc}"), "403"
        except SqlFailed as exc:
            response, code = ApiResponse.failure(f"query failed: {exc}"), "422"
        except Exception as exc:
            log.exception("endpoint %s failed", name)
            response, code = ApiResponse.failure(f"{type(exc).__name__}: {exc}"), "500"
        else:
            code = "" if response.ok else "422"
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
