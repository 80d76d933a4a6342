"""A captured RAS output of any kind (text status, JSON status, MONITOR text or JSON) -> one normalized result.

This is the shape ``ranksight parse ras --json`` prints; format detection is by content, never by file name.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ranksight.agent.collectors.ras.errors import RasParseError
from ranksight.agent.collectors.ras.parse_json import parse_status_json
from ranksight.agent.collectors.ras.parse_monitor import parse_monitor
from ranksight.agent.collectors.ras.parse_text import parse_status_text
from ranksight.schemas.records.ras import RasEvent, RasStatus
from ranksight.schemas.structs import to_builtins

if TYPE_CHECKING:  # a type only: the agent process does not load the pydantic models
    from ranksight.schemas.records.ras import RasHealth

FAILURE_EVENT_WORDS = ("DEAD", "ABORT", "ERROR")


def detect_format(data: bytes) -> str:
    text = data.decode("utf-8", errors="replace").lstrip()
    if text.startswith("OK\n"):
        text = text[3:].lstrip()
    if text.startswith("{"):
        try:
            obj, _ = json.JSONDecoder().raw_decode(text)
        except ValueError:  # the missing-comma bug, or a number too long: the JSON parser says what is wrong
            return "json"
        return (
            "monitor" if isinstance(obj, dict) and "event" in obj and "communicators" not in obj else "json"
        )
    if text.startswith("[") and "] " in text.split("\n", 1)[0]:
        return "monitor"
    return "text"


def event_health(events: list[RasEvent]) -> RasHealth:
    return "failed" if any(w in e.event.upper() for e in events for w in FAILURE_EVENT_WORDS) else "ok"


def status_summary(status: RasStatus) -> dict[str, Any]:
    out = to_builtins(status)
    for counted in ("nodes", "processes", "gpus"):
        del out[counted]
    out["summary"] = {"nodes": status.nodes, "processes": status.processes, "gpus": status.gpus}
    out["events"] = []
    return out


def parse_capture(data: bytes) -> dict[str, Any]:
    """Parse and normalize; raises :class:`RasParseError` on anything else."""
    if not data.strip():
        raise RasParseError("empty input")
    fmt = detect_format(data)
    if fmt == "monitor":
        events = parse_monitor(data)
        return {
            "format": "monitor", "version": None, "health": event_health(events),
            "summary": {"nodes": None, "processes": None, "gpus": None}, "communicators": [],
            "missing_processes": [], "dead_processes": [], "mismatches": [], "timeouts": 0,
            "events": to_builtins(events),
        }  # fmt: skip
    status = parse_status_json(data) if fmt == "json" else parse_status_text(data)
    return status_summary(status)
