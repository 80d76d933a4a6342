"""Pure parser of one Inspector JSONL line (bytes in, :class:`InspectorRecord` out).

Format (``inspector_output_format_version`` "v4.0" in every release): one compact JSON object per line with ``header``,
``metadata`` and either ``coll_perf`` or ``p2p_perf``. Doubles have 6 decimals and NaN is the string ``"nan"``. The
capture model is detected by keys, never by the version string: the ring model (NCCL >= 2.30) writes ``comm_name`` in the
header or ``p2p_perf`` records; the sampled model (2.28-2.29) has neither.

Bandwidth is recomputed from size and time (a known RCCL build reported it 10x too high) and disagreements are flagged.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal

from ranksight.errors import ParseError
from ranksight.schemas.records import InspectorRecord

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


def _number(value: Any, field: str) -> float | None:
    """A double field: a JSON number, or the string "nan" (which becomes None)."""
    if value is None or value == "nan":
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InspectorParseError(f"{field}: expected a number, got {value!r}")
    return None if math.isnan(value) else float(value)


def _int(obj: dict[str, Any], key: str, where: str) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InspectorParseError(f"{where}.{key}: expected an integer, got {value!r}")
    return value


def _str(obj: dict[str, Any], key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise InspectorParseError(f"{where}.{key}: expected a string, got {value!r}")
    return value


def _optional_str(obj: dict[str, Any], key: str, where: str) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise InspectorParseError(f"{where}.{key}: expected a string, got {value!r}")
    return value


def parse_line(line: bytes | str) -> InspectorRecord:
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InspectorParseError(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise InspectorParseError("not a JSON object")
    header, meta = obj.get("header"), obj.get("metadata")
    if not isinstance(header, dict) or not isinstance(meta, dict):
        raise InspectorParseError("missing header or metadata")
    op_kind: Literal["coll", "p2p"]
    if isinstance(obj.get("coll_perf"), dict):
        perf, prefix, op_kind = obj["coll_perf"], "coll", "coll"
    elif isinstance(obj.get("p2p_perf"), dict):
        perf, prefix, op_kind = obj["p2p_perf"], "p2p", "p2p"
    else:
        raise InspectorParseError("neither coll_perf nor p2p_perf")
    where = f"{prefix}_perf"
    n_ranks = _int(header, "n_ranks", "header")
    op = _str(perf, prefix, where)
    size = _int(perf, f"{prefix}_msg_size_bytes", where)
    exec_us = _number(perf.get(f"{prefix}_exec_time_us"), f"{where}.{prefix}_exec_time_us")
    busbw = _number(perf.get(f"{prefix}_busbw_gbs"), f"{where}.{prefix}_busbw_gbs")
    bandwidths = bandwidths_gbs(op, n_ranks, size, exec_us)
    expected = bandwidths[1] if bandwidths else None
    mismatch = (
        expected is not None
        and busbw is not None
        and abs(busbw - expected) > BW_REL_TOLERANCE * max(expected, 1e-9)
    )
    ring = "comm_name" in header or op_kind == "p2p"
    nnodes = header.get("nnodes")
    # Every field is checked above or here, so the record is built without a second validation pass (the parser
    # is the agent's hot path; the aggregator validates the wire form again).
    return InspectorRecord.model_construct(
        comm_id=_str(header, "id", "header"),
        comm_name=_optional_str(header, "comm_name", "header"),
        rank=_int(header, "rank", "header"),
        n_ranks=n_ranks,
        nnodes=nnodes if isinstance(nnodes, int) and not isinstance(nnodes, bool) else None,
        hostname=_str(meta, "hostname", "metadata"),
        pid=_int(meta, "pid", "metadata"),
        op_kind=op_kind,
        op=op,
        sn=_int(perf, f"{prefix}_sn", where),
        peer=perf.get("p2p_peer") if isinstance(perf.get("p2p_peer"), int) else None,
        msg_size_bytes=size,
        exec_time_us=exec_us,
        timing_source=_optional_str(perf, f"{prefix}_timing_source", where),
        algobw_gbs=_number(perf.get(f"{prefix}_algobw_gbs"), f"{where}.{prefix}_algobw_gbs"),
        busbw_gbs=busbw,
        dump_ts_us=_int(meta, "dump_timestamp_us", "metadata"),
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
            yield parse_line(line)
        except InspectorParseError as exc:
            on_error(exc)
