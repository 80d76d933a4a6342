"""Pure decoding of one ``ranksight.client`` packet (wire format: :mod:`ranksight.client`) into an ``AppRecord``.

The agent fills in the timeouts the process did not choose, from ``[agent.collectors.app]``, so the aggregator judges
each rank by the timeouts recorded with its facts (as it judges every fact by the TTL its agent gave it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from ranksight.errors import ParseError
from ranksight.schemas.codec import DecodeError, unpack
from ranksight.schemas.records import AppRecord

SUPPORTED_VERSION = 1


class AppMessageError(ParseError):
    """A packet that is not a valid client message; the message says why."""


@dataclass(frozen=True)
class Timeouts:
    heartbeat_s: float
    initial_s: float
    section_s: float
    per_section: dict[str, float] = field(default_factory=dict)

    def for_section(self, name: str) -> float:
        return self.per_section.get(name, self.section_s)


# wire key -> record field, where they differ
_RENAMED = {"t": "event", "job": "job_id", "ts": "client_ts", "open": "open_sections", "sid": "section_id"}


def parse_message(data: bytes, timeouts: Timeouts) -> AppRecord:
    try:
        raw = unpack(data)
    except DecodeError as exc:
        raise AppMessageError(str(exc)) from None
    if not isinstance(raw, dict):
        raise AppMessageError(f"message is a {type(raw).__name__}, not a map")
    version = raw.pop("v", None)
    if version != SUPPORTED_VERSION:
        raise AppMessageError(f"unsupported wire version {version!r}")
    values: dict[str, Any] = {_RENAMED.get(k, k): v for k, v in raw.items() if isinstance(k, str)}
    event = values.get("event")
    if event in ("start", "heartbeat"):
        values.setdefault("timeout_s", timeouts.heartbeat_s)
        if event == "start":
            values.setdefault("initial_timeout_s", timeouts.initial_s)
    elif event == "section_open" and isinstance(values.get("section"), str):
        values.setdefault("timeout_s", timeouts.for_section(values["section"]))
    try:
        # lax, as the pydantic model was: "3" or 3.0 for an integer; the record's types and bounds still apply
        return msgspec.convert(values, AppRecord, strict=False)
    except msgspec.ValidationError as exc:
        raise AppMessageError(str(exc)) from None


def dump_hello(data: bytes) -> dict[str, Any] | None:
    """The ``listen`` packet a process's dump connection opens with (:mod:`ranksight.client.dumps`), else None."""
    try:
        raw = unpack(data)
    except DecodeError:
        return None
    if isinstance(raw, dict) and raw.get("v") == SUPPORTED_VERSION and raw.get("t") == "listen":
        return raw
    return None
