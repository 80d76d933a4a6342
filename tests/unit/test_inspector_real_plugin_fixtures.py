"""Files the real, unmodified NCCL Inspector plugin wrote (fixtures/inspector/real-plugin-*: 2.28.9, 2.29.3, 2.30.7 at
1 s dumps, a healthy job and one with a steady 1.5x straggler; see each PROVENANCE.md): what the parser and the
straggler engine make of them."""

from __future__ import annotations

import itertools
import re
from collections import defaultdict
from pathlib import Path

import pytest

from ranksight.agent.collectors.inspector.dumps import DumpReader
from ranksight.aggregator.models.straggler.engine import analyze_records
from ranksight.aggregator.models.straggler.findings import Finding
from ranksight.schemas.records import InspectorRecord

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "inspector"
VERSIONS = ("2.28.9", "2.29.3", "2.30.7")
SAMPLED = ("2.28.9", "2.29.3")


def _fixture(version: str, case: str) -> Path:
    return FIXTURES / f"real-plugin-{version}-1s-{case}"


def _records(version: str, case: str) -> list[InspectorRecord]:
    reader = DumpReader(_fixture(version, case))
    records = list(reader.records())
    assert reader.bad_lines == 0
    return records


def _straggler(version: str) -> tuple[str, int]:
    """The slow process, as its fixture's PROVENANCE.md names it (node 1, GPU 1)."""
    text = (_fixture(version, "compute_1.5") / "PROVENANCE.md").read_text()
    match = re.search(r"1/1 = (node\d+)-pid(\d+)", text)
    assert match
    return match[1], int(match[2])


@pytest.mark.parametrize("case", ["compute_1.5", "healthy"])
@pytest.mark.parametrize("version", VERSIONS)
def test_every_line_the_plugin_wrote_is_read_with_its_capture_model(version: str, case: str) -> None:
    records = _records(version, case)
    files = sorted(p.name for p in _fixture(version, case).glob("*.log.gz"))
    assert len(files) == 8  # one per rank
    assert {f"{r.hostname}-pid{r.pid}.log.gz" for r in records} == set(files)
    assert {r.hostname for r in records} == {"node000", "node001", "node002", "node003"}
    assert {r.capture_model for r in records} == {"sampled" if version in SAMPLED else "ring"}
    assert all(r.timing_source == "kernel_gpu" and not r.bw_mismatch for r in records)
    if version in SAMPLED:
        assert all(r.op_kind == "coll" and r.comm_name is None for r in records)  # no Send/Recv, no names
    else:
        assert {r.op for r in records if r.op_kind == "p2p"} == {"Send", "Recv"}
        assert min(r.msg_size_bytes for r in records) >= 8192  # the 4 KiB DP bucket is filtered out
        assert "dp-s0-g0" in {r.comm_name for r in records}


@pytest.mark.parametrize("version", SAMPLED)
def test_the_sampled_plugins_write_one_op_per_communicator_per_tick_of_any_type(version: str) -> None:
    ticks: dict[tuple[str, int, str], list[int]] = defaultdict(list)
    types: dict[str, set[str]] = defaultdict(set)
    for r in _records(version, "compute_1.5"):
        ticks[(r.hostname, r.pid, r.comm_id)].append(r.dump_ts_us)
        types[r.comm_id].add(r.op)
    for stamps in ticks.values():
        assert all(b - a > 800_000 for a, b in itertools.pairwise(sorted(stamps)))
    # a DP communicator runs ReduceScatters and an AllGather: its one slot shows both
    assert any(ops == {"ReduceScatter", "AllGather"} for ops in types.values())


@pytest.mark.parametrize("version", VERSIONS)
def test_no_finding_on_a_healthy_job(version: str) -> None:
    assert analyze_records(_records(version, "healthy")).stragglers == []


def test_the_ring_plugin_at_1s_names_the_straggler_process() -> None:
    found = analyze_records(_records("2.30.7", "compute_1.5")).stragglers
    assert [(f.hostname, f.pid, f.kind) for f in found] == [(*_straggler("2.30.7"), "compute")]


def _steady(f: Finding) -> bool:
    pattern = getattr(f, "pattern", None)
    return pattern == "steady" if isinstance(pattern, str) else f.duty_cycle >= 0.75


def test_the_ring_plugin_at_1s_gives_the_straggler_its_slowdown_and_steady_pattern() -> None:
    (found,) = analyze_records(_records("2.30.7", "compute_1.5")).stragglers
    assert abs(found.slowdown - 1.5) / 1.5 <= 0.15
    assert _steady(found)


@pytest.mark.parametrize(
    "version",
    [
        "2.28.9",
        "2.29.3",
    ],
)
def test_a_sampled_capture_never_blames_the_wrong_thing(version: str) -> None:
    """8 s of a 1.5x straggler in 1 s single-slot samples may be too little to name it, but never enough to name
    anything else."""
    host, pid = _straggler(version)
    found = analyze_records(_records(version, "compute_1.5")).stragglers
    assert all((f.hostname, f.pid, f.kind) == (host, pid, "compute") for f in found)
