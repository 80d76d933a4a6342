"""The parsers on the outputs of the real upstream server code (``fixtures/ras/upstream-server``): every version and
format says the same thing about the same job, placeholders are not processes, elided facts are marked unknown, and
the 2.26-2.28.x phantom communicators raise nothing."""

from __future__ import annotations

import pytest

from ranksight.agent.collectors.ras.capture import parse_capture
from ranksight.agent.collectors.ras.parse_json import parse_status_json
from ranksight.agent.collectors.ras.parse_text import parse_status_text
from ranksight.agent.collectors.ras.poll import merge_detail
from tests.conftest import FIXTURES

UPSTREAM = FIXTURES / "ras/upstream-server"


def load(name: str) -> bytes:
    return (UPSTREAM / name).read_bytes()


@pytest.mark.parametrize("name", sorted(p.name for p in UPSTREAM.glob("ref_*")))
def test_every_capture_parses_with_its_expected_health(name: str) -> None:
    expected = {"full": "failed", "healthy": "ok", "edge": "degraded", "nocomms": "failed"}[
        name.split("_")[3][:-4]
    ]
    out = parse_capture(load(name))
    if name == "ref_2.30.7_json_nocomms.txt":
        expected = "ok"  # the JSON writer has no job-level sections: why the collector polls text too
        assert out["job_sections"] is False
    assert out["health"] == expected


def test_json_placeholders_are_unknown_ranks_not_processes() -> None:
    text, body = (
        parse_status_text(load("ref_2.30.7_text_edge.txt")),
        parse_status_json(load("ref_2.30.7_json_edge.txt")),
    )
    assert (text.nodes, text.processes, text.gpus) == (4, 7, 8)
    assert (body.nodes, body.processes, body.gpus) == (4, 7, 8)  # was 5 / 8 / 16 with "unknown" / -1 counted
    comm = body.communicators[0]
    assert comm.missing_ranks == [7] and comm.unknown_ranks == list(range(8, 20))
    assert [(p.host, p.pid) for p in body.missing_processes] == [("10.0.0.3", 3101)]


def test_text_elided_rank_list_is_marked_incomplete() -> None:
    short, verbose = (
        parse_status_text(load("ref_2.30.7_text_edge.txt")),
        parse_status_text(load("ref_2.30.7_textv_edge.txt")),
    )
    assert (short.communicators[0].missing_ranks, short.communicators[0].complete) == ([], False)
    assert verbose.communicators[0].complete and verbose.communicators[0].missing_ranks == [7]
    assert verbose.communicators[0].unknown_ranks == list(range(8, 20))
    merged = merge_detail(short, parse_status_json(load("ref_2.30.7_json_edge.txt")))
    assert merged.communicators[0].complete and merged.communicators[0].missing_ranks == [7]


@pytest.mark.parametrize("fmt", ["text", "textv"])
def test_2_28_phantom_communicators_are_dropped(fmt: str) -> None:
    old = parse_status_text(load(f"ref_2.28.9_{fmt}_full.txt"))
    hashes = {c.hash for c in old.communicators}
    assert "0x429c000200000005" not in hashes  # "Missing communicator data from 257 ranks" in a 6-GPU job
    new = parse_status_text(load("ref_2.30.7_text_full.txt"))
    assert hashes <= {c.hash for c in new.communicators}
    assert all(c.complete for c in old.communicators)


def test_healthy_2_28_phantom_group_does_not_degrade() -> None:
    raw = load("ref_2.28.9_text_healthy.txt") .replace(
        b"    0         1         2         2         4         4   RUNNING      OK\n",
        b"    0         1         2         2         4         4   RUNNING      OK\n"
        b"    1         1         0         0         0         0      INIT  INCOMPLETE\n",
    ).replace(b"Errors\n======\n", b"Errors\n======\n\n#1-0 (429c000200000005) INCOMPLETE\n"
              b"  Missing communicator data from 257 ranks\n")  # fmt: skip
    status = parse_status_text(raw)
    assert status.health == "ok" and status.communicators == []


@pytest.mark.parametrize("version", ["2.28.9", "2.29.2", "2.30.7"])
def test_text_and_json_name_the_same_missing_and_dead_ranks(version: str) -> None:
    text, body = (
        parse_status_text(load(f"ref_{version}_text_full.txt")),
        parse_status_json(load(f"ref_{version}_json_full.txt")),
    )
    for a, b in (
        (text.missing_processes, body.missing_processes),
        (text.dead_processes, body.dead_processes),
    ):
        assert [(p.host, p.pid, p.gpus, p.comms) for p in a] == [(p.host, p.pid, p.gpus, p.comms) for p in b]
