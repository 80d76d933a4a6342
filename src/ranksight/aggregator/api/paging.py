"""Answers larger than one NATS message: split into pages that each fit ``max_payload``, the rest kept for a while.

The first page goes back as the reply, with a ``next`` token (datasette-style); asking the same endpoint with the body
``{"next": "<token>"}`` returns the following page, until a page has ``next: null``. Every page repeats ``truncated``
and ``meta``. Pages are kept at most ``aggregator.query.page_ttl_s`` and ``page_cache_bytes`` in all (oldest dropped
first); a token that is gone is a bad request ("run the query again").
"""

from __future__ import annotations

import json
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass

from ranksight.errors import RanksightError
from ranksight.schemas.api import NEXT, ApiResponse

_ENVELOPE_SLACK = 256  # bytes of `"next": "<token>"` and separators on top of rows and the other fields


class PageExpired(RanksightError, LookupError):
    """The ``next`` token is unknown, expired or dropped for space."""


class RowTooLarge(RanksightError, ValueError):
    """One row alone does not fit in a message."""


def split_pages(response: ApiResponse, max_bytes: int) -> list[ApiResponse]:
    """``response`` as pages whose JSON each fits in ``max_bytes`` (one page when it fits already)."""
    if len(response.model_dump_json().encode()) <= max_bytes:
        return [response]
    fixed = len(response.model_copy(update={"rows": []}).model_dump_json()) + _ENVELOPE_SLACK
    pages: list[ApiResponse] = []
    rows: list[dict[str, object]] = []
    size = fixed
    for i, row in enumerate(response.rows):
        row_bytes = len(json.dumps(row, separators=(",", ":"), default=str)) + 1
        if fixed + row_bytes > max_bytes:
            raise RowTooLarge(
                f"row {i + 1} alone is {row_bytes} bytes, over the NATS max_payload of {max_bytes}"
            )
        if size + row_bytes > max_bytes:
            pages.append(response.model_copy(update={"rows": rows}))
            rows, size = [], fixed
        rows.append(row)
        size += row_bytes
    pages.append(response.model_copy(update={"rows": rows}))
    return pages


@dataclass
class _Pending:
    pages: list[ApiResponse]
    size: int
    expires: float


class PageCache:
    """Pages of answers not yet asked for, by token; bounded in bytes and in time."""

    def __init__(self, max_bytes: int, ttl_s: float) -> None:
        self.max_bytes = max_bytes
        self.ttl_s = ttl_s
        self._pending: OrderedDict[str, _Pending] = OrderedDict()
        self._size = 0

    def first(self, pages: list[ApiResponse]) -> ApiResponse:
        """The first page, with a ``next`` token for the rest (kept here) when there is more than one."""
        if len(pages) == 1:
            return pages[0]
        return pages[0].model_copy(update={NEXT: self._keep(pages[1:])})

    def take(self, token: str) -> ApiResponse:
        """The page a token stands for, with a token for the one after it."""
        self._expire(time.monotonic())
        pending = self._pending.pop(token, None)
        if pending is None:
            raise PageExpired("the next token is unknown or expired (pages are kept aggregator.query.page_ttl_s); "
                              "run the query again")  # fmt: skip
        self._size -= pending.size
        page, rest = pending.pages[0], pending.pages[1:]
        return page.model_copy(update={NEXT: self._keep(rest) if rest else None})

    def _keep(self, pages: list[ApiResponse]) -> str:
        now = time.monotonic()
        self._expire(now)
        size = sum(len(p.model_dump_json()) for p in pages)
        while self._pending and self._size + size > self.max_bytes:
            _, dropped = self._pending.popitem(last=False)
            self._size -= dropped.size
        token = secrets.token_urlsafe(16)
        self._pending[token] = _Pending(pages, size, now + self.ttl_s)
        self._size += size
        return token

    def _expire(self, now: float) -> None:
        while self._pending:
            token, oldest = next(iter(self._pending.items()))
            if oldest.expires > now:
                break
            del self._pending[token]
            self._size -= oldest.size
