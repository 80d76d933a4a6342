"""ranksight's per-process dump file: torch's Flight Recorder keys plus a ``ranksight`` key (who, when, every thread's
Python stack), written as JSON by the agent from a ``ranksight.client`` dump reply (:mod:`ranksight.client.dumps`).

The reply's Flight Recorder bytes are torch's JSON, or its pickle where the call sites were asked for (the JSON has
none): read here as JSON or with :class:`~.load.PlainUnpickler` only, then checked by :func:`~.load.parse_dump` before
the file is kept, so a dump that reaches the aggregator is already known to parse.
"""

from __future__ import annotations

import json
from typing import Any

from ranksight.core.flightrec.load import DumpError, RankDump, check_plain_size, load_plain, parse_dump

_IDENTITY_KEYS = ("rank", "local_rank", "world_size", "job", "pid", "host")


def _plain(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return value.decode("utf-8", "replace")
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    raise TypeError(f"{type(value).__name__} in a dump")


def bundle_from_reply(identity: dict[str, Any], reply: dict[str, Any], source: str) -> tuple[bytes, RankDump]:
    """The JSON file for one process and its parsed form; :class:`DumpError` when the reply is not a dump."""
    recorded = reply.get("flight_recorder")
    if recorded is None:
        torch_part: dict[str, Any] = {"version": "", "entries": [], "pg_status": {}, "pg_config": {}}
    elif isinstance(recorded, bytes):
        torch_part, _ = load_plain(recorded, source)
        check_plain_size(torch_part, len(recorded) + 4096)
        if not isinstance(torch_part, dict):
            raise DumpError(f"{source}: the Flight Recorder dump is a {type(torch_part).__name__}, not a map")
    else:
        raise DumpError(f"{source}: flight_recorder is a {type(recorded).__name__}, not bytes")
    meta = {key: identity.get(key) for key in _IDENTITY_KEYS}
    meta.update(time_ns=reply.get("time_ns"), threads=reply.get("threads") or [], error=reply.get("error"),
                gpu=reply.get("gpu"))  # fmt: skip
    try:
        data = json.dumps({**torch_part, "ranksight": meta}, default=_plain, sort_keys=True).encode()
    except (TypeError, ValueError, RecursionError) as exc:
        raise DumpError(f"{source}: not plain data: {exc}") from None
    return data, parse_dump(data, source)


def bundle_from_torch_file(data: bytes, source: str, host: str, time_ns: int, rank: int | None = None,
                           **identity: Any) -> tuple[bytes, RankDump]:  # fmt: skip
    """A dump torch wrote or served itself (a watchdog timeout's file, the worker server's answer) as ranksight's
    file: its rank ``rank``, else from the file's name; ``time_ns`` (the file's time) as the dump time; ``identity``
    (``pid``, ``world_size``, ``job``) where the caller knows it."""
    dump = parse_dump(data, source, rank=rank)
    raw, _ = load_plain(data, source)
    check_plain_size(raw, len(data) + 4096)
    meta = {"rank": dump.rank, "host": host, "time_ns": time_ns, "source": source, "threads": [],
            **{k: v for k, v in identity.items() if k in _IDENTITY_KEYS and v is not None}}  # fmt: skip
    try:
        out = json.dumps({**raw, "ranksight": meta}, default=_plain, sort_keys=True).encode()
    except (TypeError, ValueError, RecursionError) as exc:
        raise DumpError(f"{source}: not plain data: {exc}") from None
    return out, parse_dump(out, source)


def trim_bundle(bundle: dict[str, Any], entries_per_group: int) -> dict[str, Any]:
    """``bundle`` with only the last ``entries_per_group`` entries of each process group (by record id, which torch
    numbers in enqueue order): the ops where ranks diverge are the latest."""
    entries = [e for e in bundle.get("entries") or [] if isinstance(e, dict)]
    kept: dict[str, int] = {}
    chosen = []
    for entry in sorted(entries, key=lambda e: -int(e.get("record_id") or 0)):
        group = str((entry.get("process_group") or [""])[0])
        if kept.get(group, 0) < entries_per_group:
            kept[group] = kept.get(group, 0) + 1
            chosen.append(entry)
    return {**bundle, "entries": chosen[::-1], "entries_dropped": len(entries) - len(chosen)}
