"""The aggregator's query service on NATS (``nats.micro``: discoverable through ``$SRV.PING/INFO/STATS``).

Every endpoint takes a JSON object and answers one :class:`~schemas.api.ApiResponse`; an error is also reported in the
service error headers (``Nats-Service-Error``, ``Nats-Service-Error-Code``): 400 bad request (unknown or invalid
parameter, or an expired ``next`` token), 403 SQL refused by the sandbox, 422 query failed (or timed out, or one row
over the NATS ``max_payload``), 500 internal error. An answer over ``max_payload`` goes back in pages (see
:mod:`aggregator.api.paging`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from nats.aio.client import Client
from nats.micro import add_service
from nats.micro.request import Request
from nats.micro.service import Service

from ranksight.aggregator.api.endpoint import Endpoint, answer
from ranksight.aggregator.api.endpoints import ENDPOINTS
from ranksight.aggregator.api.paging import PageCache, PageExpired, RowTooLarge, split_pages
from ranksight.aggregator.api.sql import SqlFailed
from ranksight.api.contract import RequestError
from ranksight.core.version import service_version
from ranksight.schemas.api import NEXT, ApiResponse

if TYPE_CHECKING:
    from ranksight.aggregator.runtime import Aggregator


log = logging.getLogger(__name__)
SERVICE_NAME = "ranksight-aggregator"
SHARD_SERVICE_NAME = "ranksight-shard"
_HEADER_SLACK = 1024  # bytes of the reply's subject and headers within max_payload


Answer = Callable[[Endpoint[Any], dict[str, Any]], Awaitable[ApiResponse]]


def _handler(agg: Aggregator, name: str, answer_with: Answer, errors: Counter[str], pages: PageCache, max_bytes: int,
             in_flight: set[asyncio.Task[None]]) -> Callable[[Request], Awaitable[None]]:  # fmt: skip
    endpoint = ENDPOINTS[name]
    cap = agg.settings.aggregator.query.max_requests_in_flight

    async def call(request: Request) -> ApiResponse:
        if len(in_flight) > cap:
            raise SqlFailed(
                f"busy: {cap} requests are being answered (aggregator.query.max_requests_in_flight)"
            )
        try:
            params: Any = json.loads(request.data) if request.data.strip() else {}
        except json.JSONDecodeError as exc:
            raise RequestError(f"body is not JSON: {exc}") from None
        if not isinstance(params, dict):
            raise RequestError("request body must be a JSON object")
        if NEXT in params:
            if set(params) != {NEXT} or not isinstance(params[NEXT], str):
                raise RequestError(f'a follow-up page is asked with {{"{NEXT}": "<token>"}} alone')
            try:
                return pages.take(params[NEXT])
            except PageExpired as exc:
                raise RequestError(str(exc)) from None
        try:
            return pages.first(split_pages(await answer_with(endpoint, params), max_bytes))
        except RowTooLarge as exc:
            raise SqlFailed(str(exc)) from None

    async def reply(request: Request) -> None:
        response, status = await answer(name, lambda: call(request))
        code = "" if status == 200 else str(status)
        body = response.model_dump_json().encode()
        try:
            if code:
                errors[code] += 1
                await request.respond_error(code, response.error or "error", data=body)
            else:
                await request.respond(body)
        except Exception as exc:  # the connection closed meanwhile (shutdown): the client sees its timeout
            log.debug("reply to %s not sent: %s", name, exc)

    async def handle(request: Request) -> None:
        # nats-py runs one subscription's callbacks one after another: each request gets its own task, so that a
        # slow SQL query does not hold every later request of its endpoint in line.
        task = asyncio.create_task(reply(request), name=f"api-{name}")
        in_flight.add(task)
        task.add_done_callback(in_flight.discard)

    return handle


async def start_services(nc: Client, agg: Aggregator) -> list[Service]:
    """The shared service (any aggregator answers; for the whole cluster when sharded, through the query front) and
    this aggregator's own (``ranksight-shard``, on ``<prefix>.api.shard.<shard_id>``: its data alone)."""
    cfg = agg.settings.aggregator.query
    pages = PageCache(cfg.page_cache_bytes, cfg.page_ttl_s)
    max_bytes = nc.max_payload - _HEADER_SLACK
    in_flight: set[asyncio.Task[None]] = set()
    shard_id = agg.settings.aggregator.shards.name()

    async def own_data(endpoint: Endpoint[Any], params: dict[str, Any]) -> ApiResponse:
        return await endpoint.call(agg, params)

    services = []
    for name, group, answer_with, metadata in [
        (SERVICE_NAME, agg.subjects.api_group(), agg.front.call, {}),
        (SHARD_SERVICE_NAME, agg.subjects.shard_api_group(shard_id), own_data, {"shard_id": shard_id}),
    ]:
        # Answered errors are replies, not handler exceptions, so nats.micro's num_errors does not see them: each
        # endpoint's STATS ``data`` carries its error replies by code instead.
        errors: dict[str, Counter[str]] = {e: Counter() for e in ENDPOINTS}
        service = await add_service(
            nc,
            name=name,
            version=service_version(agg.version),
            description="ranksight aggregator query API",
            metadata={"cluster": agg.settings.cluster, **metadata},
            stats_handler=lambda stats, errors=errors: {"errors_by_code": dict(errors[stats.name])},
        )
        endpoints = service.add_group(name=group)
        for e in ENDPOINTS:
            handler = _handler(agg, e, answer_with, errors[e], pages, max_bytes, in_flight)
            await endpoints.add_endpoint(name=e, handler=handler)
        services.append(service)
    return services
