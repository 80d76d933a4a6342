"""Inspector output formats v4.1-v4.4 (dump markers, bare v4.3 payloads, proxy traces) read like v4.0.

The layout fixtures are the real NCCL 2.28.9 plugin's v4.0 lines rewritten as each newer writer prints them
(``tests/inspector_layouts.py``; provenance in ``fixtures/inspector/layouts/PROVENANCE.md``)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import msgspec
import pytest

from ranksight.agent.collectors.inspector.dumps import DumpReader
from ranksight.agent.collectors.inspector.tailer import Tailer
from ranksight.aggregator.models.straggler.engine import analyze_records
from ranksight.aggregator.models.straggler.findings import StragglerParams
from ranksight.cli import build_parser
from ranksight.formats.inspector import DumpContext, InspectorParseError, parse_lines, parse_op
from ranksight.schemas.records import InspectorDumpStatsRecord, InspectorRecord
from ranksight.simulate.inspector import Fault, JobSpec, write_job
from tests.conftest import FIXTURES
from tests.inspector_layouts import (
    FIXTURE_DROPS,
    LAYOUTS,
    PROXY_OP,
    Drops,
    fixture_path,
    render,
    rewrite,
    source_lines,
)

# what a newer writer changes about the same operation: the header always names the communicator ("unknown"), which
# also makes it the ring capture model (v4.1 and later writers are the ring plugin)
_LAYOUT_FIELDS = ("comm_name", "capture_model")


def _plain(rec: InspectorRecord, skip: tuple[str, ...] = ()) -> dict[str, object]:
    return {k: v for k, v in msgspec.structs.asdict(rec).items() if k not in skip}


def _no_error(exc: InspectorParseError) -> None:
    raise AssertionError(exc)


def _read(lines: list[bytes]) -> tuple[list[InspectorRecord], list[InspectorDumpStatsRecord], list[str]]:
    errors: list[InspectorParseError] = []
    stats: list[InspectorDumpStatsRecord] = []
    records = list(parse_lines(lines, errors.append, on_stats=stats.append))
    return records, stats, [str(e) for e in errors]


def test_fixtures_are_what_the_generator_writes() -> None:
    assert {path: path.read_bytes() for path in render()} == render()


@pytest.mark.parametrize("version", LAYOUTS)
def test_every_layout_gives_the_v40_records(version: str) -> None:
    source, _, errors = _read(source_lines())
    assert not errors and len(source) == 60
    records, stats, errors = _read(fixture_path(version).read_bytes().splitlines())
    assert errors == []
    assert [_plain(r, _LAYOUT_FIELDS) for r in records] == [_plain(r, _LAYOUT_FIELDS) for r in source]
    assert {(r.comm_name, r.capture_model) for r in records} == {("unknown", "ring")}
    # one marker per dump (the sampled 2.28.9 plugin dumps one record per communicator per tick)
    assert len(stats) == len(records) and {s.format_version for s in stats} == {version}
    assert [s.coll_records for s in stats] == [1] * len(stats)
    assert {
        i: s.coll_dropped_since_last_dump for i, s in enumerate(stats) if s.coll_dropped_since_last_dump
    } == {i: d.coll for i, d in FIXTURE_DROPS.items()}
    assert [s.coll_dropped_total for s in stats] == [0] * 3 + [5] * 4 + [9] * 53  # running totals
    assert (stats[0].hostname, stats[0].pid, stats[0].rank, stats[0].comm_id) == (
        "vm",
        3027,
        0,
        source[0].comm_id,
    )
    assert (stats[0].proxy_records is not None) == (version == "v4.4")


def test_a_proxy_trace_is_counted_never_an_error() -> None:
    ctx = DumpContext()
    records = list(parse_lines(fixture_path("v4.4").read_bytes().splitlines(), _no_error, ctx))
    assert len(records) == 60 and ctx.proxy_traces == 1 and ctx.cut_short == 0


def test_the_earlier_v43_writer_with_self_contained_lines_reads_the_same() -> None:
    """An earlier "v4.3" writer (stored ``inspector_json.cc`` file id 65782884225) still wrote every line with its own
    header and metadata, and a communicator's ``proxy_trace`` lines before its marker: read as the v4.4 layout is, the
    same records, no bad line, no dump cut short."""
    source = source_lines()[:6]
    lines: list[bytes] = []
    for line in rewrite(source, "v4.2"):
        line = line.replace(
            b'"inspector_output_format_version":"v4.2"', b'"inspector_output_format_version":"v4.3"'
        )
        if b'"dump_stats"' in line:  # the comm's proxy traces come first, self-contained
            head = line[: line.index(b',"dump_stats"')]
            lines.append(head + b',"proxy_trace":' + PROXY_OP + b"}\n")
        lines.append(line)
    ctx = DumpContext()
    records = list(parse_lines(lines, _no_error, ctx))
    assert [_plain(r, _LAYOUT_FIELDS) for r in records] == [
        _plain(r, _LAYOUT_FIELDS) for r in map(parse_op, source)
    ]
    assert (ctx.proxy_traces, ctx.cut_short) == (6, 0)


def test_a_dump_cut_short_keeps_its_records_and_is_reported() -> None:
    lines = rewrite(source_lines()[:6], "v4.3")  # 6 dumps of one record: marker, payload, marker, payload...
    del lines[3]  # the second dump loses its record
    records, stats, errors = _read(lines)
    assert len(records) == 5 and len(stats) == 6
    assert errors == ["dump cut short: 1 announced record(s) missing"]  # the next marker closed it
    ctx = DumpContext()
    kept = list(parse_lines(lines, lambda _: None, ctx))
    assert len(kept) == 5 and (ctx.cut_short, ctx.missing) == (1, 1)
    assert ctx.close() == 0 and (ctx.cut_short, ctx.missing) == (1, 1)  # the last dump is complete


def test_a_file_ending_mid_dump_is_reported_with_its_complete_records() -> None:
    merged = [line.replace(b'"dump_timestamp_us":1795505128960626', b'"dump_timestamp_us":1795505128933568')
              for line in source_lines()[:1]] * 3  # fmt: skip
    lines = rewrite(merged, "v4.3")  # one dump of 3 records
    assert len(lines) == 4
    records, stats, errors = _read(lines[:3])
    assert len(records) == 2 and stats[0].coll_records == 3
    assert errors == ["dump cut short: 1 announced record(s) missing at the end"]


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ([b'{"coll_perf":{"coll":"AllReduce","coll_sn":0,"coll_msg_size_bytes":8}}'], "outside a v4.3 dump"),
        (
            rewrite(source_lines()[:1], "v4.3") * 1 + [rewrite(source_lines()[:1], "v4.3")[1]],
            "beyond the count",
        ),
        ([rewrite(source_lines()[:1], "v4.3")[0].replace(b'"header":', b'"headr":')], "without header"),
    ],
)
def test_bare_payloads_need_their_marker(lines: list[bytes], message: str) -> None:
    _, _, errors = _read(lines)
    assert len(errors) == 1 and message in errors[0]


def test_context_never_crosses_files(tmp_path: Path) -> None:
    lines = rewrite(source_lines()[:4], "v4.3")
    (tmp_path / "a-pid1.log").write_bytes(b"".join(lines[:3]))  # ends with a marker whose payload is in b
    (tmp_path / "b-pid2.log").write_bytes(b"".join(lines[3:]))
    reader = DumpReader(tmp_path)
    records = list(reader.records())
    assert len(records) == 1 + 2  # a: its complete dump; b: its own two dumps, never a's orphan payload
    assert reader.bad_lines == 2  # a's cut-short dump at its end, b's payload without context


def test_tailer_resumes_mid_dump_with_the_saved_marker(tmp_path: Path) -> None:
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    merged = [line.replace(b'"dump_timestamp_us":1795505128960626', b'"dump_timestamp_us":1795505128933568')
              for line in source_lines()[:1]] * 40  # fmt: skip
    data = b"".join(rewrite(merged, "v4.3"))  # one dump: a marker and 40 bare payloads
    (dumps / "vm-pid3027.log").write_bytes(data)
    state = tmp_path / "offsets.json"
    first = Tailer(dumps, state, chunk_bytes=4096)
    chunk = first.poll()[0]
    assert chunk.more and len(chunk.dump_stats) == 1 and 0 < len(chunk.records) < 40
    first.acked(chunk)
    first.save()
    second = Tailer(dumps, state, chunk_bytes=1 << 20)
    second.load()
    rest = second.poll()[0]
    assert rest.bad_lines == 0 and not rest.dump_stats
    assert len(chunk.records) + len(rest.records) == 40
    assert {r.pid for r in rest.records} == {3027}
    status = second.status()["files"][str(dumps / "vm-pid3027.log")]
    assert (status["dumps_cut_short"], status["records_missing"]) == (0, 0)
    # a state file without the marker (an older agent's) resumes without context: the payloads are bad, never misread
    third = Tailer(dumps, tmp_path / "old.json", chunk_bytes=1 << 20)
    third.files = {
        k: type(v)(v.inode, committed=v.committed, read=v.committed) for k, v in second.files.items()
    }
    third.files[chunk.path].read = chunk.end
    assert third.poll()[0].bad_lines == 40 - len(chunk.records)


def _one_dump(records: int, ts: bytes) -> list[bytes]:
    """One v4.3 dump of ``records`` copies of the fixture's first operation, dumped at ``ts`` (16 digits)."""
    merged = [line.replace(b'"dump_timestamp_us":1795505128933568', b'"dump_timestamp_us":' + ts)
              for line in source_lines()[:1]] * records  # fmt: skip
    return rewrite(merged, "v4.3")


@pytest.mark.parametrize("restart", [False, True])
def test_a_file_rewritten_in_place_past_the_offset_is_read_again_from_its_start(
    tmp_path: Path, restart: bool
) -> None:
    """Hostile: the offset falls inside a dump (its marker and 1 of 3 payloads read); before the next read the file is
    truncated in place (same inode) and a new dump is written, longer than the offset, whose payloads lie at the
    offset. Resuming there would read them under the old dump's marker (its timestamp) and lose the new marker."""
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    log = dumps / "vm-pid3027.log"
    old, new = _one_dump(3, b"1795505128933568"), _one_dump(3, b"1795505129999999")
    assert len(old[0]) == len(new[0]) and old[1:] == new[1:]  # same layout: the offset lands on a new payload
    log.write_bytes(b"".join(old[:2]))  # the writer is mid-dump
    state = tmp_path / "offsets.json"
    tailer = Tailer(dumps, state)
    [chunk] = tailer.poll()
    assert len(chunk.records) == 1 and len(chunk.dump_stats) == 1
    tailer.acked(chunk)
    tailer.save()
    inode = log.stat().st_ino
    with log.open("r+b") as fh:  # rewritten in place: truncated, then written past the old offset
        fh.truncate(0)
        fh.write(b"".join(new))
    assert log.stat().st_ino == inode and log.stat().st_size > chunk.end
    if restart:
        tailer = Tailer(dumps, state)
        tailer.load()
    [again] = tailer.poll()
    assert again.bad_lines == 0 and again.first_error is None
    assert [s.dump_ts_us for s in again.dump_stats] == [1795505129999999]
    assert [r.dump_ts_us for r in again.records] == [1795505129999999] * 3
    assert again.end == log.stat().st_size


def test_a_simulated_job_dumped_as_v40_and_v43_gives_the_same_findings(tmp_path: Path) -> None:
    spec = JobSpec(nodes=2, gpus_per_node=4, steps=80, faults=[Fault("gpu", node=1, gpu=2, factor=1.5)])
    v40, v43 = tmp_path / "v40", tmp_path / "v43"
    v43.mkdir()
    for path in write_job(spec, v40):
        with path.open("rb") as fh:
            (v43 / path.name).write_bytes(b"".join(rewrite(fh.read().splitlines(), "v4.3")))
    params = StragglerParams()
    old, new = DumpReader(v40), DumpReader(v43)
    a, b = analyze_records(old.records(), params), analyze_records(new.records(), params)
    assert old.bad_lines == new.bad_lines == 0
    assert a.records == b.records > 0
    assert a.stragglers and [f.as_dict() for f in a.stragglers] == [f.as_dict() for f in b.stragglers]
    assert (a.stragglers[0].hostname, a.stragglers[0].rank) == ("node001", b.stragglers[0].rank)


def test_gzip_layout_reads_like_plain(tmp_path: Path) -> None:
    (tmp_path / "vm-pid3027.log.gz").write_bytes(gzip.compress(fixture_path("v4.3").read_bytes()))
    assert len(list(DumpReader(tmp_path).records())) == 60


def test_the_event_payloads_of_the_plugins_other_v41_build_are_counted() -> None:
    """A build of the plugin (stored file id 56738988629 of ``inspector_json.cc``, format "v4.1" without markers)
    writes, with its verbose dump on, self-contained lines whose payload is an event (``coll_api``, ``proxy_op``,
    ...): counted, never a bad line, never an operation."""
    head = source_lines()[0].split(b',"coll_perf":')[0].replace(b'"v4.0"', b'"v4.1"')
    events = [head + b',"coll_api":{"start_ts":1,"stop_ts":9,"duration_us":8,"rank":0,"func":"AllReduce",'
                     b'"count":1048576,"datatype":"ncclFloat32","graph_captured":"false","root":0}}',
              head + b',"kernel_launch":{"start_ts":1,"stop_ts":2,"duration_us":1,"rank":0}}']  # fmt: skip
    ctx = DumpContext()
    records = list(parse_lines([*events, source_lines()[0]], _no_error, ctx))
    assert len(records) == 1 and ctx.other_events == 2


def test_the_real_2289_job_rewritten_as_v43_names_the_same_straggler(tmp_path: Path) -> None:
    """The real plugin's dumps of a job whose rank 2 (pid 3030) arrives late, as written (v4.0) and rewritten as the
    v4.3 writer prints them: the same records and the same straggler. (The newer writer always names the
    communicator, which reads as the ring capture model, so the slowdown estimate differs; who is slow does not.)"""
    source = FIXTURES / "inspector/nccl-2.28.9-h100-4rank"
    for path in sorted(source.glob("*.log.gz")):
        with gzip.open(path, "rb") as fh:
            (tmp_path / path.name.removesuffix(".gz")).write_bytes(
                b"".join(rewrite(fh.read().splitlines(), "v4.3"))
            )
    old, new = DumpReader(source), DumpReader(tmp_path)
    a, b = (
        analyze_records(old.records(), StragglerParams()),
        analyze_records(new.records(), StragglerParams()),
    )
    assert old.bad_lines == new.bad_lines == 0 and a.records == b.records > 6000
    assert (a.capture_model, b.capture_model) == ("sampled", "ring")
    assert [(f.hostname, f.pid, f.kind) for f in a.stragglers] == [
        (f.hostname, f.pid, f.kind) for f in b.stragglers
    ]
    assert [(f.hostname, f.pid) for f in b.stragglers] == [("vm", 3030)]


@pytest.mark.parametrize("version", ["v4.3", "v4.4"])
def test_the_real_2307_plugin_job_rewritten_as_v43_gives_the_same_findings(
    tmp_path: Path, version: str
) -> None:
    """The job run through the real 2.30.7 plugin (ring capture, 1 s dumps, a steady 1.5x straggler; see the
    fixture's PROVENANCE.md), as the plugin wrote it (v4.0) and rewritten as the newer writer prints the same records:
    every record read back, and the same findings, field for field (slowdown, pattern, confidence, coverage)."""
    source = FIXTURES / "inspector/real-plugin-2.30.7-1s-compute_1.5"
    for path in sorted(source.glob("*.log.gz")):
        with gzip.open(path, "rb") as fh:
            (tmp_path / path.name.removesuffix(".gz")).write_bytes(
                b"".join(rewrite(fh.read().splitlines(), version))
            )
    old, new = DumpReader(source), DumpReader(tmp_path)
    a, b = (
        analyze_records(old.records(), StragglerParams()),
        analyze_records(new.records(), StragglerParams()),
    )
    assert old.bad_lines == new.bad_lines == 0 and a.records == b.records > 1000
    assert (a.capture_model, b.capture_model) == ("ring", "ring")
    assert len(a.stragglers) == 1 and [f.as_dict() for f in a.stragglers] == [
        f.as_dict() for f in b.stragglers
    ]


def test_analyze_inspector_cites_the_dump_markers_drop_counters_in_a_findings_coverage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Offline as live: the straggler of the real 2.28.9 job, rewritten as v4.3 with drops in its second dump of each
    communicator, carries ``coverage.ring_drops`` from its own markers, and the drops among what was left out."""
    source = FIXTURES / "inspector/nccl-2.28.9-h100-4rank"
    for path in sorted(source.glob("*.log.gz")):
        with gzip.open(path, "rb") as fh:
            lines = rewrite(fh.read().splitlines(), "v4.3", drops={1: Drops(coll=5)})
        (tmp_path / path.name.removesuffix(".gz")).write_bytes(b"".join(lines))
    argv = ["analyze", "inspector", str(tmp_path), "--json"]
    args = build_parser(argv).parse_args(argv)
    assert args.func(args) == 0
    (finding,) = json.loads(capsys.readouterr().out)["stragglers"]
    drops = finding["coverage"]["ring_drops"]
    assert (finding["pid"], drops["processes"], drops["dropped"]) == (3030, 1, 5 * drops["communicators"])
    assert drops["records"] > 0 and 0 < drops["dropped_share"] < 1
    assert any("dropped" in item for item in finding["coverage"]["left_out"])
