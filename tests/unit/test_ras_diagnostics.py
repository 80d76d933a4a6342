"""RAS DIAGNOSTICS replies (NCCL 2.31 and later) parsed into findings, on replies rendered from the server's own format strings
(``tests/ras_diagnostics_replies.py``); the hosts behind a finding's ranks from a JSON status; the profiler mask values
CONTROL accepts, case by case as RCCL's microtests of the server's parser state them."""

from __future__ import annotations

import types
from typing import Any

import pytest

from ranksight.agent.collectors.ras.control import ALL_EVENTS, parse_profiler_mask, profile_value
from ranksight.agent.collectors.ras.errors import RasParseError
from ranksight.agent.collectors.ras.parse_diagnostics import parse_diagnostics, rank_hosts
from ranksight.simulate.cluster import ras_status_json
from ranksight.simulate.inspector import JobSpec, comms
from tests.ras_diagnostics_replies import COMM, render

FILES = {path.name: data for path, data in render().items()}


def test_fixtures_are_what_the_generator_writes() -> None:
    assert {path: path.read_bytes() for path in render()} == render()


def test_a_healthy_run() -> None:
    report = parse_diagnostics(FILES["nccl_2.32_diagnostics_healthy_4node_32rank.txt"])
    assert (report.status, report.host, report.pid, report.peers, report.scope, report.completed_ms) == (
        "ok", "node000", 41234, 32, "job", 48.3)  # fmt: skip
    assert len(report.findings) == 7 and {f.kind for f in report.findings} == {"ok"}
    assert {f.comm for f in report.findings if f.comm} == {f"0x{COMM:x}"}


def test_every_inconsistency_class_with_its_ranks_and_hosts() -> None:
    report = parse_diagnostics(FILES["nccl_2.32_diagnostics_inconsistent_4node_32rank.txt"])
    assert report.status == "ok"
    by_kind: dict[str, list[Any]] = {}
    for f in report.findings:
        by_kind.setdefault(f.kind, []).append(f)
    assert set(by_kind) == {"ok", "cuda_driver", "ecc_uncorrected", "nvlink_inactive", "nvlink_speed", "nccl_env",
                            "xid", "nvidia_driver"}  # fmt: skip
    [cuda] = by_kind["cuda_driver"]
    assert (cuda.ranks, cuda.ranks_total, cuda.reference_rank, cuda.reference_value) == (
        [8, 9, 10, 11, 12, 13, 14, 15], 9, 0, "13000")  # a set cut at eight ranks keeps its total  # fmt: skip
    assert by_kind["ecc_uncorrected"][0].ranks == [17] and by_kind["nvlink_inactive"][0].ranks == [24, 25]
    [xid] = by_kind["xid"]
    assert (xid.check, xid.hosts, xid.tag) == ("Xid 79", ["node003"], "info")
    # the NCCL environment check's per-value lines carry no comm: they take the mismatch line's
    env = by_kind["nccl_env"]
    assert {f.comm for f in env} == {f"0x{COMM:x}"} and [f.ranks for f in env if f.ranks][-1] == [8]
    # Xid 63 needs no action: an [OK] line
    assert any(f.check == "Xid 63" and f.kind == "ok" for f in by_kind["ok"])


# RCCL's port of the GPU checks (ROCm/rocm-systems projects/rccl/src/ras/diagnostics_gpu.cc @ 07c8611e), each line
# formatted from its format string with RAS_DIAG_DRIVER_LABEL "HIP driver version", RAS_DIAG_LINK_LABEL "XGMI",
# RAS_DIAG_GPU_SOURCE "AMD SMI", RAS_DIAG_LINK_SPEED_OK ""; the line prefix is NCCL's (RCCL's diagnostics.cc not read)
RCCL_LINES = [
    ("[INFO] HIP driver version: mismatch across 16 ranks in comm 0x1f2e, rank(s) {9} differ from rank 0 (60342131)",
     "cuda_driver"),
    ("[INFO] XGMI: link-count mismatch across 16 ranks in comm 0x1f2e, rank(s) {3} differ from rank 0 (7)",
     "nvlink_count"),
    ("[INFO] XGMI: inactive link(s) on rank(s) {3,4} across 16 ranks in comm 0x1f2e", "nvlink_inactive"),
    ("[OK]   XGMI: 7 links per GPU, all active across 16 ranks in comm 0x1f2e", "ok"),
    ("[INFO] ECC: unavailable via AMD SMI across 16 ranks in comm 0x1f2e", "unavailable"),
    ("[INFO] GPU inventory: 8 GPUs per node consistent across 16 ranks in comm 0x1f2e, GPU model unavailable via "
     "AMD SMI", "unavailable"),
]  # fmt: skip


@pytest.mark.parametrize(("line", "kind"), RCCL_LINES)
def test_rccls_amd_lines_get_the_same_kinds(line: str, kind: str) -> None:
    reply = (f"mi300-0:5150 NCCL DIAG === RAS Diagnostics ===\nmi300-0:5150 NCCL DIAG {line}\n"
             "mi300-0:5150 NCCL DIAG RAS diagnostics completed in 12.5 ms across 16 RAS peers\n").encode()  # fmt: skip
    [finding] = parse_diagnostics(reply).findings
    assert finding.kind == kind and finding.comm == "0x1f2e"


@pytest.mark.parametrize(
    ("name", "status"),
    [
        ("nccl_2.32_diagnostics_busy.txt", "busy"),
        ("nccl_2.32_diagnostics_json_format.txt", "error"),
        ("nccl_2.30_diagnostics_unknown_command.txt", "unsupported"),
    ],
)
def test_what_a_busy_or_older_server_answers(name: str, status: str) -> None:
    report = parse_diagnostics(FILES[name])
    assert report.status == status and report.message == FILES[name].decode().strip() and not report.findings


def test_a_reply_cut_before_its_completion_line_is_incomplete_and_keeps_its_findings() -> None:
    data = FILES["nccl_2.32_diagnostics_inconsistent_4node_32rank.txt"]
    cut = b"".join(data.splitlines(keepends=True)[:4])
    report = parse_diagnostics(cut)
    assert report.status == "incomplete" and len(report.findings) == 3 and report.peers is None


@pytest.mark.parametrize("data", [b"", b"\n\n", b"hello world\n", b"h:1 NCCL DIAG " + b"x" * 5000 + b"\n"])
def test_what_is_not_a_diagnostics_reply(data: bytes) -> None:
    with pytest.raises(RasParseError):
        parse_diagnostics(data)


def test_hosts_of_the_ranks_from_a_json_status() -> None:
    spec = JobSpec(nodes=4, gpus_per_node=8, pp=2)
    phases = comms(spec)
    job: Any = types.SimpleNamespace(
        spec=spec, phases=phases, counts={c.comm_id: 1 for p in phases for c in p}
    )
    body = ras_status_json(job, missing={(3, 1)})
    world = max((c for p in phases for c in p), key=lambda c: len({node for node, _ in c.members}))
    ranks = set(range(len(world.members)))
    assert len({world.members[r][0] for r in ranks}) > 1  # the ranks sit on different hosts
    wanted = {world.comm_id: ranks}
    hosts = rank_hosts(body, wanted)
    expected = {r: spec.hostname(world.members[r][0]) for r in ranks}
    assert hosts == {world.comm_id: expected}
    assert rank_hosts(b"not json", wanted) == {} and rank_hosts(body, {"0xdead": {0}}) == {}


@pytest.mark.parametrize(
    ("value", "mask"),
    [
        ("none", 0), ("NONE", 0), ("all", ALL_EVENTS), ("ALL", ALL_EVENTS), ("0x10", 0x10), ("42", 42), ("010", 8),
        ("0", 0), ("-1", None), ("123abc", None), ("", None), ("group", 1), ("GROUP,Coll", 3), ("bogus", None),
        ("group,bogus", None), ("x" * 1100, None), ("1_0", None), ("0b1", None), ("coll,,p2p", 6), (",", 0),
        (" coll", None), ("coll ", None), ("0x" + "f" * 1100, None),
        ("group,coll,p2p,proxyop,proxystep,proxyctrl,kernelch,netplugin,groupapi,collapi,p2papi,kernellaunch,"
         "cecoll,cesync,cebatch", ALL_EVENTS),
    ],
)  # fmt: skip
def test_profiler_mask_values_as_the_server_parses_them(value: str, mask: int | None) -> None:
    assert parse_profiler_mask(value) == mask


def test_profile_on_and_off() -> None:
    assert parse_profiler_mask(profile_value("off")) == 0
    assert (
        parse_profiler_mask(profile_value("on")) == 0b1000110
    )  # coll, p2p, kernel channels: what Inspector uses
    assert profile_value("coll,p2p") == "coll,p2p"
