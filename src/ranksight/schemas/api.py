"""The one response shape of every query, on NATS and HTTP alike (datasette-style).

``next`` is set on a page of an answer too large for one NATS message: ask the same endpoint with ``{"next": token}``
for the following page (see ``aggregator/api/paging.py``); null on the last or only page.

``partial`` is true when sharded aggregators answered for the whole cluster and some shard did not answer in time;
``missing_shards`` names them (see ``aggregator/api/front.py``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

NEXT = "next"  # the request key of a follow-up page, and the response field that carries its token


class ApiResponse(BaseModel):
    ok: bool
    rows: list[dict[str, Any]] = []
    truncated: bool = False
    error: str | None = None
    meta: dict[str, Any] = {}
    next: str | None = None
    partial: bool = False
    missing_shards: list[str] = []

    @classmethod
    def success(
        cls, rows: list[dict[str, Any]], truncated: bool = False, meta: dict[str, Any] | None = None
    ) -> ApiResponse:
        return cls(ok=True, rows=rows, truncated=truncated, meta=meta or {})

    @classmethod
    def failure(cls, error: str) -> ApiResponse:
        return cls(ok=False, error=error)
