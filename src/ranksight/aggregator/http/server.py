"""The HTTP server (aiohttp, in the aggregator's event loop): ``/api/<endpoint>``, ``/openapi.json``, ``/metrics``,
``/events`` and the web page at ``/``.

``/api/<endpoint>`` validates the query string with the endpoint's parameter model, then calls the very function the
NATS service calls, and answers the same :class:`~schemas.api.ApiResponse` with the NATS service's error codes as HTTP
statuses (400, 403, 422, 500; 401 for a missing or wrong bearer token).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import time
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest

from ranksight.aggregator.api.endpoint import answer
from ranksight.aggregator.api.endpoints import ENDPOINTS
from ranksight.aggregator.api.sql import SqlError
from ranksight.aggregator.http.events import LiveEvents
from ranksight.aggregator.http.guard import ConnectionGuard
from ranksight.aggregator.http.metrics import metrics_registry
from ranksight.aggregator.http.openapi import HTTP_ENDPOINTS, openapi_document
from ranksight.aggregator.report import JobNotFound, job_report
from ranksight.schemas.api import ApiResponse

if TYPE_CHECKING:
    from ranksight.aggregator.runtime import Aggregator

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
TOKEN_PARAM = "access_token"  # for EventSource and links, which cannot send an Authorization header
KEEPALIVE_S = 15.0
PUBLIC_PATHS = frozenset({"/"})  # the page holds no data; it sends the token it is given with each request
# The page's scripts and styles (the vendored chart library) hold no data either, so they are public too.
STATIC_PREFIX = "/static/"
STATIC_DIR = resources.files("ranksight.aggregator.http").joinpath("static")


class HttpFace:
    """Owned by the aggregator: ``start()`` in ``run``, ``stop()`` on shutdown; ``events`` gets each tick's changes."""

    def __init__(self, agg: Aggregator) -> None:
        self.agg = agg
        self.settings = agg.settings.aggregator.http
        self.events = LiveEvents(self.settings.sse_queue_size)
        self.registry, self.latency = metrics_registry(agg, self.events, self.settings.metrics_max_series)
        self.url: str | None = None
        self.guard: ConnectionGuard | None = None
        self._runner: web.AppRunner | None = None
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        if not self.settings.enabled:
            return
        # handler_cancellation: a client that hangs up ends its handler (an /events stream unsubscribes at once)
        runner = web.AppRunner(self._app(), access_log=None, shutdown_timeout=2.0, handler_cancellation=True,
                               keepalive_timeout=self.settings.idle_timeout_s)  # fmt: skip
        await runner.setup()
        assert runner.server is not None
        self.guard = ConnectionGuard(
            runner.server, self.settings.max_connections, self.settings.header_timeout_s
        )
        try:
            server = await asyncio.get_running_loop().create_server(
                self.guard, self.settings.host, self.settings.port
            )
        except OSError as exc:  # the HTTP face is secondary: ingest and the NATS API go on without it
            log.error("HTTP server not started on %s:%s: %s", self.settings.host, self.settings.port, exc)
            await runner.cleanup()
            return
        self._runner, self._server = runner, server
        host, port = server.sockets[0].getsockname()[:2]
        self.url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"
        log.info("HTTP API on %s", self.url)

    async def stop(self) -> None:
        self.events.close()
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def _app(self) -> web.Application:
        app = web.Application(middlewares=[self._auth])
        app.router.add_get("/", self._page)
        app.router.add_static(STATIC_PREFIX, str(STATIC_DIR))
        app.router.add_get("/openapi.json", self._openapi)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/events", self._stream)
        app.router.add_get("/reports/{job}.html", self._report)
        for name in HTTP_ENDPOINTS:
            app.router.add_get(f"/api/{name}", self._endpoint(name))
        return app

    @web.middleware
    async def _auth(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        token = self.settings.token
        if token is None or request.path in PUBLIC_PATHS or request.path.startswith(STATIC_PREFIX):
            return await handler(request)
        header = request.headers.get("Authorization", "")
        given = (
            header.removeprefix("Bearer ")
            if header.startswith("Bearer ")
            else request.query.get(TOKEN_PARAM, "")
        )
        if not hmac.compare_digest(given.encode(), token.get_secret_value().encode()):
            body = ApiResponse.failure("unauthorized: a valid bearer token is required").model_dump_json()
            return web.Response(status=401, text=body, content_type="application/json",
                                headers={"WWW-Authenticate": "Bearer"})  # fmt: skip
        return await handler(request)

    def _endpoint(self, name: str) -> Handler:
        endpoint = ENDPOINTS[name]

        async def handle(request: web.Request) -> web.StreamResponse:
            started = time.monotonic()
            params: dict[str, Any] = {k: v for k, v in request.query.items() if k != TOKEN_PARAM}

            response, status = await answer(name, lambda: self.agg.front.call(endpoint, params))
            self.latency.labels(name).observe(time.monotonic() - started)
            return web.Response(
                status=status, text=response.model_dump_json(), content_type="application/json"
            )

        return handle

    async def _page(self, request: web.Request) -> web.StreamResponse:
        html = STATIC_DIR.joinpath("index.html").read_text()
        return web.Response(text=html, content_type="text/html")

    async def _report(self, request: web.Request) -> web.StreamResponse:
        """A job's report, rendered from history now (a running job's so far): one self-contained HTML file."""
        try:
            text = await job_report(self.agg.sandbox, self.agg.settings.aggregator.report, request.match_info["job"],
                                    request.query.get("cluster") or None,
                                    self.agg.settings.aggregator.query.sql_time_limit_s)  # fmt: skip
        except JobNotFound as exc:
            return web.Response(status=404, text=f"{exc}\n", content_type="text/plain")
        except SqlError as exc:
            return web.Response(status=503, text=f"the report could not be read from history: {exc}\n",
                                content_type="text/plain")  # fmt: skip
        return web.Response(text=text, content_type="text/html")

    async def _openapi(self, request: web.Request) -> web.StreamResponse:
        return web.json_response(openapi_document(self.agg.version, self.settings.token is not None))

    async def _metrics(self, request: web.Request) -> web.StreamResponse:
        body = generate_latest(self.registry)  # reads live state: on the loop, where state is consistent
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_PLAIN_0_0_4})

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        """Server-sent events: ``alert`` (a transition) and ``node`` (a node changed state), JSON data."""
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        client = self.events.subscribe()
        try:
            await response.write(b"retry: 2000\nevent: hello\ndata: {}\n\n")
            while not client.dropped:
                try:
                    item = await asyncio.wait_for(client.queue.get(), KEEPALIVE_S)
                except TimeoutError:
                    await response.write(b": keepalive\n\n")
                    continue
                if item is None:
                    break
                name, data = item
                await response.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
        except ConnectionResetError:
            pass  # the client went away
        finally:
            self.events.unsubscribe(client)
        with contextlib.suppress(ConnectionResetError, RuntimeError):
            await response.write_eof()
        return response
