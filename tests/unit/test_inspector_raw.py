"""The agent's raw-records reader (``inspector_raw``): the records of some comms within a dump-time window, paged
within bounds, only from the dump directory's own regular files; hostile requests are refused."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from msgspec.structs import replace

from ranksight.agent.collectors.inspector.raw import RawLimits, check_request, read_page
from ranksight.formats.inspector import parse_op
from ranksight.schemas.records.inspector import RawCursor, RawRecordsRequest
from ranksight.schemas.structs import to_builtins
from ranksight.simulate.inspector import JobSpec, write_job
from tests.inspector_layouts import rewrite

# a request as the agent reads it: from JSON (as it comes on NATS) and from plain values
VALIDATORS: list[Callable[[dict[str, object]], object]] = [
    lambda body: msgspec.json.decode(msgspec.json.encode(body), type=RawRecordsRequest),
    lambda body: msgspec.convert(body, RawRecordsRequest),
]


def without_none(values: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in values.items() if value is not None}


LIMITS = RawLimits(max_records=100_000, max_bytes=1 << 30, scan_bytes=1 << 30, max_window_s=3600)
Key = tuple[str, int, str, str, int, int]


def key(values: dict[str, object]) -> Key:
    return (str(values["hostname"]), int(str(values["pid"])), str(values["comm_id"]), str(values["op"]),
            int(str(values["sn"])), int(str(values["dump_ts_us"])))  # fmt: skip


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, object]]]:
    directory = tmp_path_factory.mktemp("dump")
    files = write_job(JobSpec(nodes=2, gpus_per_node=2, steps=200), directory)
    records = [
        without_none(to_builtins(parse_op(line))) for f in files for line in f.read_bytes().splitlines()
    ]
    return directory, records


def expected(records: list[dict[str, object]], comms: set[str], lo: int, hi: int) -> set[Key]:
    return {key(r) for r in records if (r["comm_id"] in comms or r.get("comm_name") in comms)
            and lo <= int(str(r["dump_ts_us"])) <= hi}  # fmt: skip


def window(records: list[dict[str, object]]) -> tuple[int, int]:
    times = sorted(int(str(r["dump_ts_us"])) for r in records)
    return times[len(times) // 3], times[2 * len(times) // 3]


def all_pages(directory: Path, req: RawRecordsRequest, limits: RawLimits) -> tuple[list[Key], int]:
    got: list[Key] = []
    pages = 0
    while True:
        page = read_page(directory, req, limits)
        pages += 1
        got += [key(r) for r in page.records]
        if page.next is None:
            return got, pages
        req = replace(req, **{"cursor": page.next})


def test_the_records_of_the_asked_comms_and_window_exactly(job: tuple[Path, list[dict[str, object]]]) -> None:
    directory, records = job
    lo, hi = window(records)
    comm_id = str(records[0]["comm_id"])
    by_name = str(next(r["comm_name"] for r in records if r["comm_id"] != comm_id))  # a comm named, not by id
    req = RawRecordsRequest(comms=[comm_id, by_name], from_us=lo, to_us=hi)
    got, pages = all_pages(directory, req, LIMITS)
    want = expected(records, {comm_id, by_name}, lo, hi)
    assert pages == 1 and len(got) == len(set(got)) and set(got) == want and len(want) > 100


def test_pages_bounded_in_records_bytes_and_scan_add_up_without_overlap(
    job: tuple[Path, list[dict[str, object]]],
) -> None:
    directory, records = job
    lo, hi = window(records)
    comms = {str(r["comm_id"]) for r in records[:50]}
    req = RawRecordsRequest(comms=sorted(comms), from_us=lo, to_us=hi)
    want = expected(records, comms, lo, hi)
    for limits in (RawLimits(37, 1 << 30, 1 << 30, 3600), RawLimits(10_000, 8192, 1 << 30, 3600),
                   RawLimits(10_000, 1 << 30, 20_000, 3600)):  # fmt: skip
        got, pages = all_pages(directory, req, limits)
        assert pages > 3 and len(got) == len(set(got)) and set(got) == want
    page = read_page(directory, replace(req, **{"max_records": 5}), LIMITS)  # the asker's own bound
    assert len(page.records) == 5 and page.next is not None


def test_the_window_start_is_found_by_bisection_not_by_reading_the_file(tmp_path: Path) -> None:
    path = write_job(JobSpec(nodes=2, gpus_per_node=1, steps=3000), tmp_path)[0]
    lines = path.read_bytes().splitlines()
    last = parse_op(lines[-1])
    lo = parse_op(lines[-200]).dump_ts_us
    page = read_page(
        tmp_path, RawRecordsRequest(comms=[last.comm_id], from_us=lo, to_us=last.dump_ts_us), LIMITS
    )
    assert page.records and page.scanned_bytes < path.stat().st_size / 10
    assert {r["dump_ts_us"] for r in page.records} >= {last.dump_ts_us, lo}


def test_only_regular_files_of_the_dump_directory_are_read(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    files = write_job(JobSpec(nodes=2, gpus_per_node=1, steps=50), outside)
    rec = parse_op(files[0].read_bytes().splitlines()[0])
    dump = tmp_path / "dump"
    dump.mkdir()
    (dump / "elsewhere.log").symlink_to(files[0])  # a link out of the directory is not followed
    os.mkfifo(dump / "pipe.log")  # would block a plain open forever
    (dump / "sub").mkdir()
    (dump / "sub" / files[0].name).write_bytes(files[0].read_bytes())  # not directly in the directory
    req = RawRecordsRequest(comms=[rec.comm_id], from_us=0, to_us=2**62)
    page = read_page(dump, req, LIMITS)
    assert page.records == [] and page.next is None
    assert read_page(tmp_path / "missing", req, LIMITS).records == []


def test_a_cursor_names_a_file_of_the_listing_and_never_opens_a_path(
    job: tuple[Path, list[dict[str, object]]],
) -> None:
    directory, records = job
    for validate in VALIDATORS:
        with pytest.raises(ValueError, match=r"cursor\.file"):
            validate(
                {
                    "comms": ["x"],
                    "from_us": 0,
                    "to_us": 1,
                    "cursor": {"file": "../../etc/passwd", "offset": 0},
                }
            )
    # a name after every dump file: nothing more to read; an offset past a file's end: that file is done
    req = RawRecordsRequest(comms=[str(records[0]["comm_id"])], from_us=0, to_us=2**62)
    assert (
        read_page(directory, replace(req, **{"cursor": RawCursor(file="zzz", offset=0)}), LIMITS).records
        == []
    )
    name = sorted(p.name for p in directory.iterdir())[-1]
    past = replace(req, **{"cursor": RawCursor(file=name, offset=2**40)})
    assert read_page(directory, past, LIMITS).records == []


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"comms": [], "from_us": 0, "to_us": 1}, "comms"),
        ({"comms": ["x"], "from_us": 5, "to_us": 1}, "before from_us"),
        ({"comms": ["x"], "from_us": -1, "to_us": 1}, "from_us"),
        ({"comms": ["x"], "from_us": 0, "to_us": 1, "path": "/etc"}, "path"),
        ({"comms": ["x" * 300], "from_us": 0, "to_us": 1}, "comms"),
        ({"comms": ["x"] * 2000, "from_us": 0, "to_us": 1}, "comms"),
        ({"comms": ["x"], "from_us": 0, "to_us": 1, "max_records": 0}, "max_records"),
        ({"comms": ["x"], "from_us": 0, "to_us": 2**63}, "to_us"),
    ],
)
@pytest.mark.parametrize("validate", VALIDATORS, ids=["json", "values"])
def test_hostile_requests_are_refused_with_the_field_named(
    body: dict[str, object], error: str, validate: Callable[[dict[str, object]], object]
) -> None:
    with pytest.raises(ValueError, match=error):  # pydantic's and msgspec's validation errors are ValueErrors
        validate(body)


def test_a_window_wider_than_the_setting_is_refused() -> None:
    req = RawRecordsRequest(comms=["x"], from_us=0, to_us=7200 * 10**6)
    with pytest.raises(ValueError, match="raw_max_window_s"):
        check_request(req, LIMITS)


def test_v43_dumps_page_alike_resuming_inside_a_dump_with_its_marker(
    job: tuple[Path, list[dict[str, object]]], tmp_path: Path
) -> None:
    """The same job's files in the v4.3 layout (bare payloads after a marker): every page, also one whose cursor
    falls inside a dump, gives the records of the v4.0 files."""
    directory, records = job
    for path in sorted(directory.iterdir()):
        (tmp_path / path.name).write_bytes(b"".join(rewrite(path.read_bytes().splitlines(), "v4.3")))
    lo, hi = window(records)
    comms = {str(r["comm_id"]) for r in records[:50]}
    req = RawRecordsRequest(comms=sorted(comms), from_us=lo, to_us=hi)
    want = expected(records, comms, lo, hi)
    for limits in (LIMITS, RawLimits(37, 1 << 30, 1 << 30, 3600), RawLimits(10_000, 1 << 30, 20_000, 3600)):
        got, _ = all_pages(tmp_path, req, limits)
        assert len(got) == len(set(got)) and set(got) == want and len(want) > 100
