"""Pure parser of Inspector JSONL lines: bytes in, typed operations out.

Formats (``metadata.inspector_output_format_version``; the upstream writer is ``inspector_json.cc`` of NVIDIA/nccl
``plugins/profiler/inspector``):

- v4.0 (every release to 2.30): one compact JSON object per line with ``header``, ``metadata`` and either
  ``coll_perf`` or ``p2p_perf``. Doubles have 6 decimals and NaN is the string ``"nan"``.
- v4.1: each communicator's dump begins with a *marker* line (``header``, ``metadata``, ``dump_stats``: record counts
  and ring drop counters); the records after it still carry their own header and metadata.
- v4.2: ``coll_perf`` gains ``coll_algo`` and ``coll_proto`` (read and ignored).
- v4.3 and v4.4: the marker carries ``header`` and ``metadata`` once; the lines after it are bare payloads
  (``{"coll_perf":...}``, ``{"p2p_perf":...}``, ``{"proxy_trace":...}``) that take their context from the marker, as
  many of each kind as it announced. Context is per file and never crosses files (:class:`DumpContext`).

``proxy_trace`` payloads (proxy-thread tracing, off by default) are counted, not modelled; so are the event payloads
another build of the plugin writes in self-contained v4.1 lines when its verbose dump is on (``proxy_op``,
``proxy_step``, ``proxy_ctrl``, ``group``, ``group_api``, ``coll_api``, ``p2p_api``, ``kernel_launch``,
``net_plugin``, each with header and metadata and no marker). The capture model is
detected by keys, never by the version string: the ring model (NCCL >= 2.30) writes ``comm_name`` in the header or
``p2p_perf`` records; the sampled model (2.28-2.29) has neither.

Bandwidth is recomputed from size and time (a known RCCL build reported it 10x too high) and disagreements are flagged.

The line format is declared once as msgspec structs, so a line is checked and decoded in one C-level pass
(every field's type is checked, a wrong one is named in the error). An operation becomes the wire's record, an
:class:`~schemas.records.InspectorRecord`: what the agent's summarizer, raw sampler and the offline analysis read, and
what is published raw; a marker becomes an :class:`~schemas.records.InspectorDumpStatsRecord`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from ranksight.errors import ParseError
from ranksight.schemas.records import InspectorDumpStatsRecord, InspectorRecord

# busbw = algbw x factor(n); traffic = msg x n for the gathering/scattering collectives.
_GATHER_LIKE = frozenset({"AllGather", "ReduceScatter"})
BW_REL_TOLERANCE = 0.05


class InspectorParseError(ParseError):
    """A line that is not a valid Inspector record; the message says why."""


def bandwidths_gbs(
    op: str, n_ranks: int, msg_bytes: int, exec_us: float | None
) -> tuple[float, float] | None:
    """(algbw, busbw) in GB/s the plugin should report for this operation (None when it cannot be computed)."""
    if exec_us is None or not exec_us > 0 or n_ranks < 1:
        return None
    traffic = msg_bytes * n_ranks if op in _GATHER_LIKE else msg_bytes
    algbw = traffic / 1e9 / (exec_us / 1e6)
    if op == "AllReduce":
        factor = 2 * (n_ranks - 1) / n_ranks
    elif op in _GATHER_LIKE:
        factor = (n_ranks - 1) / n_ranks
    else:
        factor = 1.0
    return algbw, algbw * factor


def busbw_check(op: str, n_ranks: int, msg_bytes: int, exec_us: float | None,
                busbw: float | None) -> tuple[float | None, bool]:  # fmt: skip
    """The bus bandwidth the plugin should report (None when it cannot be computed), and whether the reported one is
    off from it by more than :data:`BW_REL_TOLERANCE` (a broken build)."""
    bandwidths = bandwidths_gbs(op, n_ranks, msg_bytes, exec_us)
    expected = bandwidths[1] if bandwidths else None
    off = (
        expected is not None
        and busbw is not None
        and abs(busbw - expected) > BW_REL_TOLERANCE * max(expected, 1e-9)
    )
    return expected, off


# -- the line format -------------------------------------------------------------------------------------------------
class _Header(msgspec.Struct, gc=False):
    id: str
    rank: int
    n_ranks: int
    nnodes: Any = None  # kept when an integer
    comm_name: str | msgspec.UnsetType | None = msgspec.UNSET  # present (even null): the ring model


class _Metadata(msgspec.Struct, gc=False):
    hostname: str
    pid: int
    dump_timestamp_us: int
    inspector_output_format_version: str = "v4.0"


class _DumpStats(msgspec.Struct, gc=False):
    coll_records: int
    coll_dropped_total: int
    coll_dropped_since_last_dump: int
    p2p_records: int
    p2p_dropped_total: int
    p2p_dropped_since_last_dump: int
    proxy_records: int | None = None
    proxy_dropped_total: int | None = None
    proxy_dropped_since_last_dump: int | None = None
    proxy_ops_dropped_total: int | None = None
    proxy_ops_dropped_since_last_dump: int | None = None
    proxy_steps_overwritten_total: int | None = None  # v4.4
    proxy_steps_overwritten_since_last_dump: int | None = None
    proxy_pxn_skipped_process_total: int | None = None


# A double of the plugin: a number, or "nan" (checked after decoding)
_Double = float | str | None
_PERF_FIELDS: list[tuple[str, Any] | tuple[str, Any, Any]] = [
    ("op", str),
    ("sn", int),
    ("msg_size_bytes", int),
    ("exec_time_us", _Double, None),
    ("timing_source", str | None, None),
    ("algobw_gbs", _Double, None),
    ("busbw_gbs", _Double, None),
    ("peer", Any, None),  # kept when an integer (p2p only)
]


def _perf(prefix: str) -> type[msgspec.Struct]:
    """``coll_perf`` / ``p2p_perf``: the same fields, their keys prefixed (``coll``, ``coll_sn``, ...)."""
    keys = {name: f"{prefix}_{name}" for name, *_ in _PERF_FIELDS} | {"op": prefix, "peer": "p2p_peer"}
    return msgspec.defstruct(f"_{prefix}_perf", _PERF_FIELDS, rename=keys, gc=False)


_CollPerf, _P2pPerf = _perf("coll"), _perf("p2p")
_EVENT_PAYLOADS = ("proxy_op", "proxy_step", "proxy_ctrl", "group", "group_api", "coll_api", "p2p_api",
                   "kernel_launch", "net_plugin")  # fmt: skip
_Line = msgspec.defstruct(
    "_Line",
    [
        ("header", _Header | None, None),
        ("metadata", _Metadata | None, None),
        ("coll_perf", _CollPerf | None, None),
        ("p2p_perf", _P2pPerf | None, None),
        ("proxy_trace", dict[str, Any] | None, None),  # counted, not modelled
        *((key, dict[str, Any] | None, None) for key in _EVENT_PAYLOADS),  # counted, not modelled
        ("dump_stats", _DumpStats | None, None),
    ],
    gc=False,
)
_DECODER: msgspec.json.Decoder[Any] = msgspec.json.Decoder(_Line)
_AT = " - at `$."
_NO_PAYLOAD = "neither coll_perf nor p2p_perf (nor proxy_trace, dump_stats)"
_PAYLOADS = ("coll_perf", "p2p_perf", "proxy_trace", *_EVENT_PAYLOADS)
# the layout whose payload lines lean on their marker (v4.3 and later); compared as (major, minor)
_BARE_PAYLOADS_FROM = (4, 3)


def _number(value: float | str | None, field: str) -> float | None:
    """A double field: a number, or the string "nan" (which becomes None; JSON itself has no NaN)."""
    if value is None or value == "nan":
        return None
    if isinstance(value, str):
        raise InspectorParseError(f"{field}: expected a number, got {value!r}")
    return value


def _decode(line: bytes | str) -> Any:
    try:
        return _DECODER.decode(line)
    except msgspec.ValidationError as exc:
        raise _rejection(line, str(exc)) from None
    except (msgspec.DecodeError, RecursionError) as exc:  # RecursionError: nested too deep
        raise InspectorParseError(f"not JSON: {exc}") from None


def _rejection(line: bytes | str, message: str) -> InspectorParseError:
    """Why valid JSON is not a line of the format: its shape first, then the first field msgspec refused (only bad
    lines pay for this second look)."""
    try:
        obj = msgspec.json.decode(line)
    except RecursionError:  # a deep nest where a field was expected
        return InspectorParseError(f"not JSON: nested too deep ({message})")
    if not isinstance(obj, dict):
        return InspectorParseError("not a JSON object")
    if not any(isinstance(obj.get(key), dict) for key in (*_PAYLOADS, "dump_stats")):
        return InspectorParseError(_NO_PAYLOAD)
    what, _, where = message.partition(_AT)
    return InspectorParseError(f"{where.rstrip('`')}: {what}" if where else what)


def _version(text: str) -> tuple[int, int]:
    major, _, minor = text.removeprefix("v").partition(".")
    try:
        return int(major), int(minor or 0)
    except ValueError:
        return 0, 0


def _operation(obj: Any, header: _Header, meta: _Metadata) -> InspectorRecord:
    op_kind: Literal["coll", "p2p"]
    if obj.coll_perf is not None:
        perf, where, op_kind = obj.coll_perf, "coll_perf.coll", "coll"
    else:
        perf, where, op_kind = obj.p2p_perf, "p2p_perf.p2p", "p2p"
    n_ranks, op, size = header.n_ranks, perf.op, perf.msg_size_bytes
    exec_us = _number(perf.exec_time_us, f"{where}_exec_time_us")
    busbw = _number(perf.busbw_gbs, f"{where}_busbw_gbs")
    expected, mismatch = busbw_check(op, n_ranks, size, exec_us, busbw)
    ring = header.comm_name is not msgspec.UNSET or op_kind == "p2p"
    nnodes, peer = header.nnodes, perf.peer
    return InspectorRecord(
        comm_id=header.id,
        comm_name=None if header.comm_name is msgspec.UNSET else header.comm_name,
        rank=header.rank,
        n_ranks=n_ranks,
        nnodes=nnodes if type(nnodes) is int else None,
        hostname=meta.hostname,
        pid=meta.pid,
        op_kind=op_kind,
        op=op,
        sn=perf.sn,
        peer=peer if type(peer) is int else None,
        msg_size_bytes=size,
        exec_time_us=exec_us,
        timing_source=perf.timing_source,
        algobw_gbs=_number(perf.algobw_gbs, f"{where}_algobw_gbs"),
        busbw_gbs=busbw,
        dump_ts_us=meta.dump_timestamp_us,
        capture_model="ring" if ring else "sampled",
        busbw_expected_gbs=expected,
        bw_mismatch=mismatch,
    )


def _dump_stats(header: _Header, meta: _Metadata, stats: _DumpStats) -> InspectorDumpStatsRecord:
    return InspectorDumpStatsRecord(
        comm_id=header.id,
        comm_name=None if header.comm_name is msgspec.UNSET else header.comm_name,
        rank=header.rank,
        n_ranks=header.n_ranks,
        hostname=meta.hostname,
        pid=meta.pid,
        dump_ts_us=meta.dump_timestamp_us,
        format_version=meta.inspector_output_format_version,
        **msgspec.structs.asdict(stats),
    )


def _payload_kind(obj: Any) -> str | None:
    """The one payload a line carries (None: none); two in one line is not the format."""
    kinds = [key for key in _PAYLOADS if getattr(obj, key) is not None]
    if len(kinds) > 1:
        raise InspectorParseError(f"more than one payload in a line: {', '.join(kinds)}")
    return kinds[0] if kinds else None


def parse_op(line: bytes | str) -> InspectorRecord:
    """One self-contained line's operation (v4.0-v4.2: header and metadata on every line); a marker, a bare v4.3
    payload or a proxy trace is an :class:`InspectorParseError` here (read files with :class:`DumpContext`)."""
    obj = _decode(line)
    if obj.dump_stats is not None:
        raise InspectorParseError("a dump_stats marker, not an operation")
    kind = _payload_kind(obj)
    if kind is None:
        raise InspectorParseError(_NO_PAYLOAD)
    if kind not in ("coll_perf", "p2p_perf"):
        raise InspectorParseError(f"a {kind} record, not an operation")
    if obj.header is None or obj.metadata is None:
        raise InspectorParseError("missing header or metadata")
    return _operation(obj, obj.header, obj.metadata)


@dataclass
class DumpContext:
    """What one file's lines mean given the lines before them: the open dump's marker (header, metadata and the
    payloads it announced that have not been read yet). One per file, never shared: a v4.3 payload line that
    follows no marker of its own file is an error, not the previous process's record.

    A new marker while the previous dump still expects payloads means that dump was cut short (the process died or
    the file was truncated mid-dump): its records read so far are kept and the shortfall is counted (``cut_short``
    dumps, ``missing`` records).
    :meth:`snapshot` and :meth:`restore` carry the open dump across a restart, so a saved offset inside a dump resumes
    with its marker."""

    header: _Header | None = None
    metadata: _Metadata | None = None
    remaining: dict[str, int] = field(default_factory=dict)
    bare: bool = False  # the open dump's payload lines have no context of their own (v4.3 and later)
    cut_short: int = 0
    missing: int = 0
    proxy_traces: int = 0
    other_events: int = 0  # the event payloads of the plugin's other build (see the module docstring)

    def read(self, line: bytes | str) -> InspectorRecord | InspectorDumpStatsRecord | None:
        """The line's record: an operation, a dump marker's stats, or None (a proxy trace, counted). Raises
        :class:`InspectorParseError` for a line that is not the format or that its context does not allow."""
        obj = _decode(line)
        if obj.dump_stats is not None:
            return self._marker(obj)
        kind = _payload_kind(obj)
        if kind is None:
            raise InspectorParseError(_NO_PAYLOAD)
        if obj.header is None and obj.metadata is None:
            if not self.bare or self.header is None or self.metadata is None:
                raise InspectorParseError(
                    f"{kind} without header or metadata outside a v4.3 dump (no marker before it)"
                )
            if self.remaining.get(kind, 0) <= 0:
                raise InspectorParseError(f"{kind} beyond the count its dump_stats marker announced")
            self.remaining[kind] -= 1
            header, meta = self.header, self.metadata
        elif obj.header is None or obj.metadata is None:
            raise InspectorParseError("missing header or metadata")
        else:
            header, meta = obj.header, obj.metadata
            if self.header is not None and self.remaining.get(kind, 0) > 0 and header.id == self.header.id:
                self.remaining[kind] -= 1  # v4.1/v4.2: a marker's records still carry their context
        if kind == "proxy_trace":
            self.proxy_traces += 1
            return None
        if kind in _EVENT_PAYLOADS:
            self.other_events += 1
            return None
        return _operation(obj, header, meta)

    def _marker(self, obj: Any) -> InspectorDumpStatsRecord:
        if obj.header is None or obj.metadata is None:
            raise InspectorParseError("dump_stats marker without header or metadata")
        self.close()
        stats: _DumpStats = obj.dump_stats
        counts = {"coll_perf": stats.coll_records, "p2p_perf": stats.p2p_records,
                  "proxy_trace": stats.proxy_records or 0}  # fmt: skip
        if any(n < 0 for n in counts.values()):
            raise InspectorParseError("dump_stats: negative record count")
        self.header, self.metadata, self.remaining = obj.header, obj.metadata, counts
        self.bare = _version(obj.metadata.inspector_output_format_version) >= _BARE_PAYLOADS_FROM
        return _dump_stats(obj.header, obj.metadata, stats)

    def close(self) -> int:
        """End the open dump (a new marker, or the file's end when it is read whole); the payloads it still
        expected are missing: returns how many (0: complete)."""
        short = sum(self.remaining.values())
        if short:
            self.cut_short += 1
            self.missing += short
        self.header, self.metadata, self.remaining, self.bare = None, None, {}, False
        return short

    def snapshot(self) -> dict[str, Any] | None:
        """The open dump as plain JSON values (None: no dump open), to save beside a file offset."""
        if self.header is None or not any(self.remaining.values()):
            return None
        return {"header": msgspec.to_builtins(self.header), "metadata": msgspec.to_builtins(self.metadata),
                "remaining": dict(self.remaining), "bare": self.bare}  # fmt: skip

    @classmethod
    def restore(cls, saved: Any) -> DumpContext:
        """The context :meth:`snapshot` saved; a fresh one when ``saved`` is None or not a snapshot (a corrupt
        state file: the payloads after the offset are then reported as without context, never misattributed)."""
        if saved is None:
            return cls()
        try:
            return cls(header=msgspec.convert(saved["header"], _Header),
                       metadata=msgspec.convert(saved["metadata"], _Metadata),
                       remaining=msgspec.convert(saved["remaining"], dict[str, int]),
                       bare=msgspec.convert(saved["bare"], bool))  # fmt: skip
        except (KeyError, TypeError, msgspec.ValidationError):
            return cls()


def parse_lines(
    lines: Iterable[bytes],
    on_error: Callable[[InspectorParseError], None],
    context: DumpContext | None = None,
    on_stats: Callable[[InspectorDumpStatsRecord], None] | None = None,
) -> Iterator[InspectorRecord]:
    """Parse lines, skipping blank ones; each bad line goes to ``on_error`` and never stops the rest; each dump
    marker's stats go to ``on_stats``; a dump cut short (its records are kept) is reported to ``on_error`` too.
    ``context`` is the file's (its lines continue); without one, ``lines`` are a whole file and a dump still open at
    their end is cut short as well."""
    whole = context is None
    ctx = DumpContext() if context is None else context
    for line in lines:
        if not line.strip():
            continue
        missing = ctx.missing
        try:
            rec = ctx.read(line)
        except InspectorParseError as exc:
            on_error(exc)
            continue
        if ctx.missing > missing:
            on_error(
                InspectorParseError(f"dump cut short: {ctx.missing - missing} announced record(s) missing")
            )
        if type(rec) is InspectorRecord:
            yield rec
        elif rec is not None and on_stats is not None:
            on_stats(rec)  # type: ignore[arg-type]
    if whole:
        short = ctx.close()
        if short:
            on_error(InspectorParseError(f"dump cut short: {short} announced record(s) missing at the end"))
