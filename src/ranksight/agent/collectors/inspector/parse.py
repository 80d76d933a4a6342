"""Pure parser of Inspector JSONL lines: bytes in, typed operations out.

Format (``inspector_output_format_version`` "v4.0" in every release): one compact JSON object per line with ``header``,
``metadata`` and either ``coll_perf`` or ``p2p_perf``. Doubles have 6 decimals and NaN is the string ``"nan"``. The
capture model is detected by keys, never by the version string: the ring model (NCCL >= 2.30) writes ``comm_name`` in the
header or ``p2p_perf`` records; the sampled model (2.28-2.29) has neither.

Bandwidth is recomputed from size and time (a known RCCL build reported it 10x too high) and disagreements are flagged.

The line format is declared once as msgspec structs, so a line is checked and decoded in one C-level pass
(:func:`parse_op`; every field's type is checked, a wrong one is named in the error). Its result is the wire's record,
an :class:`~schemas.twins.InspectorRecord` (the msgspec twin of the model): what the agent's summarizer, raw sampler
and the offline analysis read, and what is published raw.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal

import msgspec

from ranksight.errors import ParseError
from ranksight.schemas.twins import InspectorRecord

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
_Line = msgspec.defstruct(
    "_Line",
    [
        ("header", _Header),
        ("metadata", _Metadata),
        ("coll_perf", _CollPerf | None, None),
        ("p2p_perf", _P2pPerf | None, None),
    ],
    gc=False,
)
_DECODER: msgspec.json.Decoder[Any] = msgspec.json.Decoder(_Line)
_AT = " - at `$."


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
    if not isinstance(obj.get("header"), dict) or not isinstance(obj.get("metadata"), dict):
        return InspectorParseError("missing header or metadata")
    if not isinstance(obj.get("coll_perf"), dict) and not isinstance(obj.get("p2p_perf"), dict):
        return InspectorParseError("neither coll_perf nor p2p_perf")
    what, _, where = message.partition(_AT)
    return InspectorParseError(f"{where.rstrip('`')}: {what}" if where else what)


def parse_op(line: bytes | str) -> InspectorRecord:
    """One line's operation (the agent's hot path); :class:`InspectorParseError` says why a line is not one."""
    obj = _decode(line)
    header, meta = obj.header, obj.metadata
    op_kind: Literal["coll", "p2p"]
    if obj.coll_perf is not None:
        perf, where, op_kind = obj.coll_perf, "coll_perf.coll", "coll"
    elif obj.p2p_perf is not None:
        perf, where, op_kind = obj.p2p_perf, "p2p_perf.p2p", "p2p"
    else:
        raise InspectorParseError("neither coll_perf nor p2p_perf")
    n_ranks, op, size = header.n_ranks, perf.op, perf.msg_size_bytes
    exec_us = _number(perf.exec_time_us, f"{where}_exec_time_us")
    busbw = _number(perf.busbw_gbs, f"{where}_busbw_gbs")
    bandwidths = bandwidths_gbs(op, n_ranks, size, exec_us)
    expected = bandwidths[1] if bandwidths else None
    mismatch = (
        expected is not None
        and busbw is not None
        and abs(busbw - expected) > BW_REL_TOLERANCE * max(expected, 1e-9)
    )
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


def parse_lines(
    lines: Iterable[bytes], on_error: Callable[[InspectorParseError], None]
) -> Iterator[InspectorRecord]:
    """Parse lines, skipping blank ones; each bad line goes to ``on_error`` and never stops the rest."""
    for line in lines:
        if not line.strip():
            continue
        try:
            yield parse_op(line)
        except InspectorParseError as exc:
            on_error(exc)
