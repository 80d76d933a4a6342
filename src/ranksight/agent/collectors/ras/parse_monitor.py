"""MONITOR output (NCCL >= 2.29) -> :class:`RasEvent` records, incrementally.

Text mode sends one line per event, ``[%s] %s: %s %s\\n`` (time, event, peer description, details; the details may be
empty, leaving a trailing space). The peer is ``Process P on node H managing GPU(s) G[ (NVML N)]``, or for a peer the
server cannot name its address ``10.9.9.9<1234>`` (JSON: ``"peer": {"addr": ...}``), kept as ``addr``. JSON mode sends pretty-printed objects back to back (not one per line), so objects are
split with a raw decoder, not by lines. :class:`MonitorDecoder` is fed socket chunks and yields complete events; a
partial line or object waits for more bytes.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ranksight.agent.collectors.ras.errors import RasParseError
from ranksight.agent.collectors.ras.facts import parse_gpus, sane_count
from ranksight.schemas.records.ras import RasEvent

MAX_PENDING = 1 << 20  # an event never comes near this; more means the peer is not speaking MONITOR
_LINE = re.compile(r"^\[(?P<time>[^\]]*)\] (?P<event>[A-Za-z0-9_]+): ?(?P<rest>.*)$")
_PEER = re.compile(r"^Process (-?\d+) on node (\S+) managing GPUs? (\S+)(?: \(NVML ([^)]*)\))? ?(.*)$")
_ADDR = re.compile(r"^(\S+<\d+>) ?(.*)$")
_DECODER = json.JSONDecoder()


def event_from_text(line: str) -> RasEvent:
    m = _LINE.match(line)
    if m is None:
        raise RasParseError(f"not a MONITOR line: {line[:200]!r}")
    rest = m.group("rest")
    if (peer := _PEER.match(rest)) is not None:
        gpus = parse_gpus(peer.group(3))
        return RasEvent(
            time=m.group("time"), event=m.group("event"), host=peer.group(2), pid=sane_count(int(peer.group(1))),
            gpus=gpus, nvml_gpus=parse_gpus(peer.group(4)) if peer.group(4) else gpus, details=peer.group(5).strip(),
        )  # fmt: skip
    if (addr := _ADDR.match(rest)) is not None:
        return RasEvent(time=m.group("time"), event=m.group("event"), addr=addr.group(1),
                        details=addr.group(2).strip())  # fmt: skip
    return RasEvent(time=m.group("time"), event=m.group("event"), details=rest.strip())


def _devices(value: Any) -> list[int]:
    return [d for d in value if isinstance(d, int)][:64] if isinstance(value, list) else []


def event_from_json(obj: Any) -> RasEvent:
    if not isinstance(obj, dict) or not isinstance(obj.get("event"), str):
        raise RasParseError("not a MONITOR JSON event: no 'event' string")
    raw_peer = obj.get("peer")
    peer: dict[str, Any] = raw_peer if isinstance(raw_peer, dict) else {}
    pid = peer.get("pid")
    return RasEvent(
        time=str(obj["timestamp"]) if obj.get("timestamp") is not None else None,
        event_group=str(obj["group"]) if obj.get("group") is not None else None,
        event=obj["event"],
        host=str(peer["host"]) if peer.get("host") is not None else None,
        pid=sane_count(pid) if isinstance(pid, int) else None,
        gpus=_devices(peer.get("cuda_devs")),
        nvml_gpus=_devices(peer.get("nvml_devs")),
        addr=str(peer["addr"]) if peer.get("addr") is not None else None,
        details=str(obj.get("details") or ""),
    )


class MonitorDecoder:
    """Feed bytes, get events. Detects text vs JSON from the first non-blank byte."""

    def __init__(self) -> None:
        self.buffer = ""
        self.json_mode: bool | None = None

    def feed(self, data: bytes) -> list[RasEvent]:
        self.buffer += data.decode("utf-8", errors="replace")
        if len(self.buffer) > MAX_PENDING:
            raise RasParseError(f"MONITOR data without an event boundary for {MAX_PENDING} bytes")
        events: list[RasEvent] = []
        while True:
            text = self.buffer.lstrip()
            if not text:
                self.buffer = ""
                return events
            if self.json_mode is None:
                self.json_mode = text.startswith("{")
            if self.json_mode:
                try:
                    obj, end = _DECODER.raw_decode(text)
                except json.JSONDecodeError:
                    if "}" in text and _complete_object(text):
                        raise RasParseError("invalid JSON in MONITOR stream") from None
                    self.buffer = text
                    return events
                except ValueError as exc:  # a number too long to convert (Python's int limit)
                    raise RasParseError(f"invalid JSON in MONITOR stream: {exc}") from None
                events.append(event_from_json(obj))
                self.buffer = text[end:]
            else:
                line, sep, rest = text.partition("\n")
                if not sep:
                    self.buffer = text
                    return events
                events.append(event_from_text(line.rstrip("\r")))
                self.buffer = rest

    def close(self) -> list[RasEvent]:
        """End of input: anything left must parse on its own."""
        events = self.feed(b"\n")
        if self.buffer.strip():
            raise RasParseError(f"incomplete MONITOR event at end of input: {self.buffer[:200]!r}")
        return events


def _complete_object(text: str) -> bool:
    """Whether braces balance somewhere (outside strings): then a decode error is real, not a partial object."""
    depth, in_string, escaped = 0, False, False
    for ch in text:
        if in_string:
            escaped, in_string = (False, True) if escaped else (ch == "\\", ch != '"')
        elif ch == '"':
            in_string = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth <= 0:
                return True
    return False


def parse_monitor(data: bytes) -> list[RasEvent]:
    """A whole captured MONITOR output. The ``OK`` that acknowledges the MONITOR command is skipped."""
    text = data.decode("utf-8", errors="replace").lstrip()
    if text.startswith("OK\n"):
        text = text[3:]
    decoder = MonitorDecoder()
    events = decoder.feed(text.encode())
    events += decoder.close()
    if not events:
        raise RasParseError("no MONITOR events found")
    return events
