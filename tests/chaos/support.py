"""Chaos helpers: the aggregator as a real child process (kill -9 it, read its peak RSS), hostile envelopes for every
field type, and checks on what the history holds."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import duckdb
import msgpack
import msgspec.inspect as mi
import nats

from ranksight.aggregator.runtime import ensure_stream
from ranksight.api.client import ApiUnavailable, query
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import RECORD_KINDS
from ranksight.settings import Settings
from tests.support import ranksight_cmd, settings_env, wait_for

MiB = 1 << 20
# The aggregator idles at about 170 MiB; hostile input or a crash must not add more than a bounded batch's worth.
RSS_BOUND = 600 * MiB


class AggregatorProcess:
    """``ranksight aggregator`` in a child process; its stderr goes to ``<state_dir>/aggregator.log``."""

    def __init__(self, settings: Settings, **env: str) -> None:
        self.settings = settings
        self.env = {**settings_env(settings), **env}
        self.log_path = settings.state_dir / "aggregator.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> AggregatorProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(ranksight_cmd("aggregator"), env=self.env, stderr=log)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    async def status(self) -> dict[str, Any] | None:
        try:
            response = await query(self.settings, "status", timeout=2)
        except ApiUnavailable:
            return None
        return response.meta if response.ok else None

    async def wait_ready(self, timeout: float = 60) -> dict[str, Any]:
        async def ready() -> dict[str, Any] | None:
            assert self.alive(), f"aggregator exited: {self.log()}"
            return await self.status()

        return await wait_for(ready, timeout=timeout, interval=0.2)  # type: ignore[no-any-return]

    def peak_rss(self) -> int:
        """Peak resident memory of the process so far (VmHWM), bytes."""
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmHWM")

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if not self.alive():
            return
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"aggregator did not stop: {self.log()}") from None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""


def db_rows(settings: Settings, sql: str) -> list[tuple[Any, ...]]:
    """Query the history once the aggregator has stopped (DuckDB locks the file it writes)."""
    with duckdb.connect(str(settings.db_path()), read_only=True) as con:
        return con.execute(sql).fetchall()


async def publish_raw(settings: Settings, messages: list[tuple[str, bytes]]) -> None:
    """Publish raw bytes (no message id: identical payloads are separate messages); the stream exists afterwards."""
    nc = await nats.connect(settings.nats.url)
    try:
        await ensure_stream(nc.jetstream(), settings)
        for subject, data in messages:
            await nc.publish(subject, data)  # core publish: the stream captures it, no ack round trip each
        await nc.flush()
    finally:
        await nc.close()


def good_once(settings: Settings, node: str) -> tuple[int, int]:
    """(rows, distinct records) of a synthetic agent's node: equal when each record is stored exactly once."""
    ((total, distinct),) = db_rows(
        settings, f"SELECT count(*), count(DISTINCT memory_used_bytes) FROM gpu WHERE node = '{node}'"
    )
    return total, distinct


# -- hostile envelopes ------------------------------------------------------------------------------------------
def _value(info: mi.Type) -> Any:
    if isinstance(info, mi.Metadata):
        return _value(info.type)
    if isinstance(info, mi.UnionType):
        return _value(next(t for t in info.types if not isinstance(t, mi.NoneType)))
    if isinstance(info, mi.LiteralType):
        return info.values[0]
    if isinstance(info, mi.ListType):
        return []
    if isinstance(info, mi.DictType):
        return {}
    if isinstance(info, mi.StructType):
        return {f.name: _value(f.type) for f in info.fields if f.required}
    return {mi.IntType: 1, mi.FloatType: 1.0, mi.StrType: "x", mi.BoolType: True}.get(type(info), "x")


def _fields(model: type) -> tuple[mi.Field, ...]:
    info = mi.type_info(model)
    assert isinstance(info, mi.StructType)
    return info.fields


def minimal_record(model: type) -> dict[str, Any]:
    return {f.name: _value(f.type) for f in _fields(model) if f.required}


def _is_int(info: mi.Type) -> bool:
    if isinstance(info, mi.Metadata):
        return _is_int(info.type)
    if isinstance(info, mi.UnionType):
        members = [type(t.type if isinstance(t, mi.Metadata) else t) for t in info.types]
        return mi.IntType in members and mi.FloatType not in members
    return isinstance(info, mi.IntType)


def envelope(kind: str, node: str, agent: str, records: list[Any] | None = None, **fields: Any) -> bytes:
    """Envelope bytes of one ``kind`` record (a minimal valid one unless ``records``); ``fields`` override the rest."""
    env = {"type": f"ranksight.ev.v1.{kind}", "cluster": "test", "node": node, "agent": agent, "seq": 1,
           "ts": time.time_ns(), "ttl": 10.0,
           "records": records if records is not None else [minimal_record(RECORD_KINDS[kind].model)]}  # fmt: skip
    env.update(fields)
    return msgpack.packb({key: value for key, value in env.items() if value is not _OMIT})


def compact_envelope(kind: str, node: str, agent: str, records: list[dict[str, Any]], **keys: Any) -> bytes:
    """A compact envelope (a column per field of ``records``, which share their keys); ``keys`` override its own."""
    names = list(records[0])
    batch = {"record_version": 1, "count": len(records), "fields": names,
             "columns": [[r[name] for r in records] for name in names], "constants": {}}  # fmt: skip
    return envelope(kind, node, agent, records=_OMIT, **{**batch, **keys})


_OMIT: Any = object()


def poison_pills(node: str) -> list[tuple[str, bytes, str]]:
    """(kind, payload, expected dead-letter reason): every integer field of every kind at 2^63 (in a map-form record,
    in a compact column and in a compact constant), every envelope number out of range, non-finite TTLs, an empty
    heartbeat, the end of time as ``ts``, compact batches whose columns do not line up or are of a newer version."""
    pills: list[tuple[str, bytes, str]] = []
    agent = f"{node}-inc"
    for kind, declared in RECORD_KINDS.items():
        model = declared.model
        for field in _fields(model):
            name = field.name
            if _is_int(field.type):
                record = {**minimal_record(model), name: 2**63}
                pills.append((kind, envelope(kind, node, agent, [record]), "bad_record"))
                good = {**minimal_record(model), name: 1}
                pills.append((kind, compact_envelope(kind, node, agent, [good, record]), "bad_record"))
                one = compact_envelope(kind, node, agent, [good], fields=[], columns=[], constants=record)
                pills.append((kind, one, "bad_record"))
    two = [{"index": 0, "power_w": 1.0}, {"index": 1, "power_w": 2.0}]
    for keys, reason in [
        ({"columns": [[0, 1], [1.0]]}, "bad_envelope"),  # a column of another length
        ({"columns": [[0, 1]]}, "bad_envelope"),  # a column list of another length
        ({"fields": ["power_w"], "columns": [[1.0, 2.0]]}, "bad_record"),  # a required column missing
        ({"columns": [["0", "1"], [1.0, 2.0]]}, "bad_record"),  # wrong type
        (
            {"fields": [], "columns": [], "constants": {"index": 1}, "count": 100_000},
            "bad_envelope",
        ),  # expansion
        ({"record_version": 2}, "unsupported_version"),
        ({"count": None}, "bad_envelope"),
    ]:
        pills.append(("gpu", compact_envelope("gpu", node, agent, two, **keys), reason))
    for name, bad in [("seq", 2**63), ("seq", 2**64 - 1), ("ts", 2**63), ("ttl", float("inf")), ("ttl", float("nan")),
                      ("ttl", float("-inf"))]:  # fmt: skip
        assert name in Envelope.__struct_fields__
        pills.append(("gpu", envelope("gpu", node, agent, **{name: bad}), "bad_envelope"))
    pills.append(("heartbeat", envelope("heartbeat", node, agent, []), "bad_envelope"))
    pills.append(("heartbeat", envelope("heartbeat", node, agent, ts=2**63 - 1), "ts_out_of_range"))
    pills.append(("gpu", envelope("gpu", node, agent, ttl=1e300), "ttl_out_of_range"))
    return pills
