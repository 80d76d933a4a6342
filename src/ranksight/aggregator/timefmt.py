"""Time conversions, in one place: the unit (``NS``), ISO-8601 UTC text (the one format every API and alert uses) and
naive UTC datetimes (the form every TIMESTAMP column holds) from nanosecond timestamps and back."""

from __future__ import annotations

import datetime

NS = 1_000_000_000  # nanoseconds per second: every clock in the aggregator counts nanoseconds
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def iso(ns: int | None) -> str | None:
    if ns is None:
        return None
    return datetime.datetime.fromtimestamp(ns / 1e9, tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def ns_of(text: str) -> int:
    """Nanoseconds of an ISO-8601 time (UTC unless it carries an offset): the inverse of :func:`iso`."""
    value = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.UTC)
    return (value - EPOCH) // datetime.timedelta(microseconds=1) * 1000  # exact: no float rounding


def naive_utc(ns: int) -> datetime.datetime:
    """Naive UTC datetime of a nanosecond timestamp: the form every TIMESTAMP column holds."""
    return datetime.datetime.fromtimestamp(ns / 1e9, tz=datetime.UTC).replace(tzinfo=None)


def utc(value: datetime.datetime) -> datetime.datetime:
    """Naive UTC, the form every TIMESTAMP column holds; a naive input is taken as UTC."""
    if value.tzinfo is None:
        return value
    return value.astimezone(datetime.UTC).replace(tzinfo=None)
