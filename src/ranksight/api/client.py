"""Client side of the query service, used by the CLI (and by anyone scripting against the API).

:func:`query` asks the aggregator's NATS service. An answer larger than one NATS message comes in pages (``next``
token, :mod:`aggregator.api.paging`): it asks for each following page and returns the whole answer as one response.
:func:`query_http` asks the aggregator's HTTP API instead (setting ``api_url``; the read-only endpoints), which answers
whole. The NATS client is imported only by what uses it: a command answered over HTTP never loads it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ranksight.core.redact import redact
from ranksight.errors import RanksightError
from ranksight.schemas.api import NEXT, ApiResponse

if TYPE_CHECKING:
    from nats.aio.client import Client

    from ranksight.api.settings import ApiView


class ApiUnavailable(RanksightError, RuntimeError):
    """No aggregator answered (not running, or unreachable)."""


class MalformedAnswer(ApiUnavailable, ValueError):
    """What answered is not the API's response shape (not an aggregator, or a broken one): no usable answer."""


def parse_answer(subject: str, data: bytes) -> ApiResponse:
    """The response in ``data``, or :class:`MalformedAnswer` saying where it first breaks the response shape."""
    try:
        return ApiResponse.model_validate_json(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(map(str, first["loc"])) or "the answer"
        raise MalformedAnswer(f"malformed answer on {subject}: {where}: {first['msg']} ({exc.error_count()} "
                              f"problem{'s' if exc.error_count() > 1 else ''}, {len(data)} bytes)") from None  # fmt: skip


async def query(settings: ApiView, endpoint: str, params: dict[str, Any] | None = None,
                timeout: float = 10.0) -> ApiResponse:  # fmt: skip
    import nats.errors

    from ranksight.core.natsconn import NatsUnreachable, NatsUrlError, connect
    from ranksight.schemas.subjects import Subjects

    try:
        nc = await connect(
            settings.nats, name="ranksight-cli", max_reconnect_attempts=0, allow_reconnect=False
        )
    except NatsUrlError:
        raise  # asked wrongly, not unavailable
    except NatsUnreachable as exc:
        raise ApiUnavailable(str(exc)) from None
    try:
        return await request_pages(nc, Subjects(settings.subject_prefix).api(endpoint), params or {}, timeout)
    except nats.errors.NoRespondersError:
        raise ApiUnavailable(
            redact(f"no aggregator answers on {settings.nats.url} (is it running?)")
        ) from None
    except nats.errors.TimeoutError:
        raise ApiUnavailable(f"the aggregator did not answer within {timeout}s") from None
    finally:
        await nc.close()


async def request_pages(nc: Client, subject: str, params: dict[str, Any], timeout: float) -> ApiResponse:
    """Ask ``subject`` and every following page; the whole answer as one response (nats-py errors pass through)."""
    msg = await nc.request(subject, json.dumps(params).encode(), timeout=timeout)
    response = parse_answer(subject, msg.data)
    rows = response.rows
    while response.ok and response.next:
        msg = await nc.request(subject, json.dumps({NEXT: response.next}).encode(), timeout=timeout)
        response = parse_answer(subject, msg.data)
        rows.extend(response.rows)
    return response if not response.ok else response.model_copy(update={"rows": rows})


def query_http(settings: ApiView, endpoint: str, params: dict[str, Any] | None = None,
               timeout: float = 10.0) -> ApiResponse:  # fmt: skip
    """The answer of the aggregator's HTTP API at ``settings.api_url`` (``GET /api/<endpoint>``, the parameters in
    the query string, the bearer token of ``aggregator.http.token``): the same response shape as over NATS."""
    from urllib.error import HTTPError, URLError
    from urllib.parse import urlencode
    from urllib.request import Request, urlopen

    assert settings.api_url is not None
    where = f"{settings.api_url.rstrip('/')}/api/{endpoint}"
    query_string = urlencode({k: _query_value(v) for k, v in (params or {}).items()})
    token = settings.aggregator.http.token
    headers = {"Authorization": f"Bearer {token.get_secret_value()}"} if token is not None else {}
    try:
        with urlopen(Request(f"{where}?{query_string}", headers=headers), timeout=timeout) as answer:
            data = answer.read()
    except HTTPError as exc:  # 400, 401, 403, 422, 500 carry the response shape too
        data = exc.read()
    except (URLError, OSError) as exc:  # refused, no such host, timed out
        reason = getattr(exc, "reason", exc)
        raise ApiUnavailable(
            redact(f"no aggregator answers on {settings.api_url} (api_url): {reason}")
        ) from None
    return parse_answer(redact(where), data)


def _query_value(value: Any) -> str:
    """A parameter as the query string carries it (``true``, not Python's ``True``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
