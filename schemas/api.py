"""The one response shape of every query, on NATS and HTTP alike (datasette-style)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class ApiResponse(BaseModel):
    ok: bool
    rows: list[dict[str, Any]] = []
    truncated: bool = False
    error: str | None = None
    meta: dict[str, Any] = {}

    @classmethod
    def success(
        cls, rows: list[dict[str, Any]], truncated: bool = False, meta: dict[str, Any] | None = None
    ) -> ApiResponse:
        return cls(ok=True, rows=rows, truncated=truncated, meta=meta or {})

    @classmethod
    def failure(cls, error: str) -> ApiResponse:
        return cls(ok=False, error=error)
