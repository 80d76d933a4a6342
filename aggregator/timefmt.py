"""ISO-8601 UTC formatting of nanosecond timestamps, the one format every API and alert uses."""

from __future__ import annotations

import datetime


def iso(ns: int | None) -> str | None:
    if ns is None:
        return None
    return datetime.datetime.fromtimestamp(ns / 1e9, tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
