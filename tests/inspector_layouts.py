"""Rewrite Inspector v4.0 dump lines into the layouts of output formats v4.1-v4.4, byte for byte as the plugin's
writer prints them (NVIDIA/nccl ``plugins/profiler/inspector/inspector_json.cc``; the commits are in
``fixtures/inspector/layouts/PROVENANCE.md``).

What each layout changes, as that writer does it:

- every version: ``metadata.inspector_output_format_version`` is the version; the header always has ``comm_name``
  after ``id`` (``"unknown"`` for a communicator created without a name).
- v4.1 and later: each communicator's dump begins with a marker line ``{"header":H,"metadata":M,"dump_stats":S}``;
  S lists ``coll_records``, ``coll_dropped_total``, ``coll_dropped_since_last_dump``, then the same three for p2p;
  the dump's collectives come first, then its point-to-point operations.
- v4.2 and later: ``coll_perf`` has ``coll_algo`` and ``coll_proto`` right after ``coll``.
- v4.1 and v4.2: each record still carries its header and metadata; v4.3 and later: only ``{"coll_perf":...}`` or
  ``{"p2p_perf":...}``, the context being the marker's.
- v4.4 with proxy tracing on: S continues with the proxy counters and ``proxy_trace`` payloads follow the p2p ones.

A v4.0 dump is the lines of one communicator (same header) among a run of consecutive lines with the same
``dump_timestamp_us`` (the writer goes through its communicators one after the other, each dump under the output
lock; the real v4.0 writer stamps each line anew, so there a dump is one line, while the project's simulator stamps a
whole dump tick once and interleaves communicators). Doubles are copied as text (the writer prints ``%lf``), never re-formatted.

``python tests/inspector_layouts.py`` rewrites the committed fixtures of ``fixtures/inspector/layouts/``.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

LAYOUTS = ("v4.1", "v4.2", "v4.3", "v4.4")
_LINE = re.compile(rb'^\{"header":(\{[^{}]*\}),"metadata":(\{[^{}]*\}),"(coll_perf|p2p_perf)":(\{.*\})\}$')
_TS = re.compile(rb'"dump_timestamp_us":(\d+)')
_VERSION = b'"inspector_output_format_version":"v4.0"'


@dataclass
class Drops:
    """Operations a communicator's rings dropped since its previous dump, which the dump's marker reports (with the
    running totals, which the writer keeps per ring: they only grow)."""

    coll: int = 0
    p2p: int = 0


@dataclass
class _Dump:
    header: bytes
    metadata: bytes
    ts: bytes | None
    coll: list[bytes]
    p2p: list[bytes]


def _dumps(lines: Iterable[bytes]) -> list[_Dump]:
    dumps: list[_Dump] = []
    tick: dict[bytes, _Dump] = {}  # the dumps of the current dump time, by communicator
    for line in lines:
        match = _LINE.match(line.rstrip(b"\n"))
        if match is None:
            raise ValueError(f"not a v4.0 line: {line[:80]!r}")
        header, metadata, kind, perf = match.groups()
        found = _TS.search(metadata)
        ts = found.group(1) if found else None
        if dumps and dumps[-1].ts != ts:
            tick = {}
        dump = tick.get(header)
        if dump is None:
            dump = tick[header] = _Dump(header, metadata, ts, [], [])
            dumps.append(dump)
        (dump.coll if kind == b"coll_perf" else dump.p2p).append(perf)
    return dumps


def _header(header: bytes) -> bytes:
    if b'"comm_name":' in header:
        return header
    return re.sub(rb'^(\{"id":"[^"]*")', rb'\1,"comm_name":"unknown"', header)


def _coll(perf: bytes, version: str, algo: str, proto: str) -> bytes:
    if version < "v4.2":
        return perf
    return re.sub(rb'^(\{"coll":"[^"]*")', rb'\1,"coll_algo":"%s","coll_proto":"%s"' % (algo.encode(), proto.encode()),
                  perf)  # fmt: skip


def rewrite(
    lines: Iterable[bytes],
    version: str,
    drops: dict[int, Drops] | None = None,
    algo: str = "Ring",
    proto: str = "Simple",
    proxy: Sequence[bytes] = (),
) -> list[bytes]:
    """The v4.0 ``lines`` (one file) as the ``version`` writer prints them, each line ending in a newline.
    ``drops`` maps a dump's index to its marker's drop counters; ``proxy`` (v4.4 only) are ``proxy_trace`` payloads
    the first dump carries (the marker then lists the proxy counters, proxy tracing being on)."""
    assert version in LAYOUTS
    out: list[bytes] = []
    totals: dict[bytes, list[int]] = {}  # per communicator: coll and p2p drops so far
    for index, dump in enumerate(_dumps(lines)):
        header = _header(dump.header)
        meta = dump.metadata.replace(_VERSION, b'"inspector_output_format_version":"%s"' % version.encode())
        d = (drops or {}).get(index, Drops())
        total = totals.setdefault(header, [0, 0])
        total[0] += d.coll
        total[1] += d.p2p
        stats = (b'{"coll_records":%d,"coll_dropped_total":%d,"coll_dropped_since_last_dump":%d,'
                 b'"p2p_records":%d,"p2p_dropped_total":%d,"p2p_dropped_since_last_dump":%d'
                 % (len(dump.coll), total[0], d.coll, len(dump.p2p), total[1], d.p2p))  # fmt: skip
        traces = list(proxy) if version == "v4.4" and index == 0 else []
        if version == "v4.4" and proxy:
            stats += (b',"proxy_records":%d,"proxy_dropped_total":0,"proxy_dropped_since_last_dump":0,'
                      b'"proxy_ops_dropped_total":0,"proxy_ops_dropped_since_last_dump":0,'
                      b'"proxy_steps_overwritten_total":0,"proxy_steps_overwritten_since_last_dump":0,'
                      b'"proxy_output_mode":"flat","proxy_segment_step_capacity":%d,'
                      b'"proxy_pxn_skipped_process_total":0,"proxy_steps_enabled":0'
                      % (len(traces), PROXY_SEGMENT_STEPS))  # fmt: skip
        out.append(b'{"header":%s,"metadata":%s,"dump_stats":%s}}\n' % (header, meta, stats))
        bare = version >= "v4.3"
        payloads = [(b"coll_perf", _coll(p, version, algo, proto)) for p in dump.coll]
        payloads += [(b"p2p_perf", p) for p in dump.p2p] + [(b"proxy_trace", t) for t in traces]
        for kind, payload in payloads:
            if bare:
                out.append(b'{"%s":%s}\n' % (kind, payload))
            else:
                out.append(b'{"header":%s,"metadata":%s,"%s":%s}\n' % (header, meta, kind, payload))
    return out


# NCCL_INSP_PROXY_SEGMENT_STEPS: its definition is not in the stored upstream sources; any integer parses the same.
PROXY_SEGMENT_STEPS = 8
# One flat-mode ``proxy_op`` payload as the v4.4 writer prints it (record fields in its order; no ``is_final``, which
# only the nested mode writes; no ``event_trace_sn``, which needs the step trace switch).
PROXY_OP = (b'{"record_type":"proxy_op","record_sn":1,"parent_type":"coll","parent_sn":0,"proxy_op_sn":0,"rank":0,'
            b'"channel_id":0,"peer":1,"direction":"send","timing_source":"proxy_cpu","n_steps":8,'
            b'"chunk_size_bytes":524288,"n_steps_started":8,"n_steps_completed":8,"n_steps_dropped":0,'
            b'"trans_size_bytes":4194304,"total_us":120,"op_bw_gbs":0.034953,"event_trace_ts":{'
            b'"proxy_op_start_ts":1795505128933100,"proxy_op_in_progress_ts":1795505128933110,'
            b'"proxy_op_stop_ts":1795505128933220}}')  # fmt: skip

SOURCE = Path(__file__).resolve().parents[1] / "fixtures/inspector/nccl-2.28.9-h100-4rank/vm-pid3027.log.gz"
TARGET = Path(__file__).resolve().parents[1] / "fixtures/inspector/layouts"
FIXTURE_LINES = 60  # v4.0 lines of the source rewritten into each fixture
FIXTURE_DROPS = {3: Drops(coll=5), 7: Drops(coll=4)}


def source_lines() -> list[bytes]:
    with gzip.open(SOURCE, "rb") as fh:
        return fh.read().splitlines()[:FIXTURE_LINES]


def fixture_path(version: str) -> Path:
    return TARGET / f"nccl_{version}_layout_of_2.28.9_vm-pid3027.log"


def render() -> dict[Path, bytes]:
    """Each layout fixture's bytes."""
    lines = source_lines()
    return {fixture_path(v): b"".join(rewrite(lines, v, FIXTURE_DROPS, proxy=[PROXY_OP] if v == "v4.4" else []))
            for v in LAYOUTS}  # fmt: skip


def main() -> None:
    for path, data in render().items():
        path.write_bytes(data)


if __name__ == "__main__":
    main()
