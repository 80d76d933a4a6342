"""The RAS parsers, and the fake server that stands in for RAS in the tests, against a real NCCL 2.28.9 RAS server
(``fixtures/ras/nccl-2.28.9-h100``: PyTorch jobs of 1, 2 and 4 ranks on one H100; see its PROVENANCE section).

Every status of the same moment says the same in text and JSON; a rank that stopped issuing collectives is the one
named behind; a killed rank is the missing process and rank; the 2.28.9 JSON bug (no comma after ``nvml_dev`` in a
missing rank) is in the real bytes; and the fake answers the protocol as the real server did.
"""

from __future__ import annotations

import ast
import asyncio
import json
import re
from pathlib import Path

import pytest

from ranksight.agent.collectors.ras.parse_json import parse_status_json
from ranksight.agent.collectors.ras.parse_text import parse_status_text
from ranksight.schemas.records.ras import RasStatus
from ranksight.simulate.ras_server import PROFILES, FakeRasServer
from tests.conftest import FIXTURES

REAL = FIXTURES / "ras/nccl-2.28.9-h100"
COMM_2, COMM_4 = "0xf51afcfe9bd22ea9", "0xcfff7cc6f2419b84"

# moment -> health, comm flags, missing ranks, missing process pids, (lagging rank, its pid) per behind collective
EXPECTED: dict[str, tuple[str, list[str], list[int], list[int], set[tuple[int, int | None]]]] = {
    "1rank": ("ok", [], [], [], set()),
    "2rank_healthy": ("ok", [], [], [], set()),
    "2rank_rank1_stopped": ("warning", ["MISMATCH"], [], [], {(1, 897)}),
    "4rank_healthy": ("ok", [], [], [], set()),
    "4rank_hang10": ("warning", ["MISMATCH"], [], [], {(2, 3030)}),
    "4rank_hang24": ("warning", ["MISMATCH"], [], [], {(2, 3030)}),
    "4rank_dead4": ("failed", ["INCOMPLETE", "ERROR"], [2], [3030], set()),
    "4rank_dead13": ("failed", ["INCOMPLETE", "ERROR"], [2], [3030], set()),
}


def both(moment: str) -> tuple[RasStatus, RasStatus]:
    return (
        parse_status_text((REAL / f"{moment}_status.txt").read_bytes()),
        parse_status_json((REAL / f"{moment}_status.json").read_bytes()),
    )


@pytest.mark.parametrize("moment", sorted(EXPECTED))
def test_text_and_json_of_one_moment_say_the_same(moment: str) -> None:
    health, flags, missing, pids, lagging = EXPECTED[moment]
    for status in both(moment):
        assert status.version == "2.28.9", status.format
        assert status.health == health, status.format
        if status.format == "text" and not flags:
            assert status.communicators == []  # text lists only the communicators with a problem
            continue
        [comm] = status.communicators
        assert (comm.errors, comm.missing_ranks) == (flags, missing), status.format
        assert [p.pid for p in status.missing_processes] == pids, status.format
        assert {(r.rank, r.pid) for r in comm.lagging_ranks} == lagging, status.format
        assert status.dead_processes == []  # 13 s after a kill -9 the server still calls it missing, not dead
    text, body = both(moment)
    assert (text.nodes, text.processes, text.gpus) == (body.nodes, body.processes, body.gpus)
    assert [c.hash for c in text.communicators] == [c.hash for c in body.communicators if c.errors]


def test_a_rank_that_stopped_is_named_behind_by_the_grouped_count_line() -> None:
    # 4 ranks: "3 ranks have launched up to operation 1104" then the one behind, by name
    text, body = both("4rank_hang24")
    for status in (text, body):
        behind = {(r.collective, r.count, r.peers_count) for r in status.communicators[0].lagging_ranks}
        assert behind == {("AllGather", 551, 552), ("AllReduce", 1102, 1104)}, status.format
    assert body.communicators[0].op_counts["AllReduce"] == 1104


def test_a_killed_rank_is_missing_and_its_peer_reports_the_remote_error() -> None:
    text, body = both("4rank_dead13")
    [proc] = text.missing_processes
    assert (proc.host, proc.pid, proc.gpus, proc.comms) == ("127.0.0.1", 3030, [0], {COMM_4: [2]})
    assert any("Remote process error" in line for line in text.communicators[0].evidence)
    assert body.missing_processes[0].pid == 3030 and body.communicators[0].missing_ranks == [2]


def test_the_real_2_28_9_json_has_the_missing_comma_and_still_parses() -> None:
    data = (REAL / "4rank_dead13_status.json").read_bytes()
    with pytest.raises(json.JSONDecodeError):
        json.loads(data)
    assert re.search(rb'"nvml_dev": 0\n\s+"status"', data)
    assert parse_status_json(data).communicators[0].missing_ranks == [2]


def test_op_counts_of_a_one_rank_job_stay_zero() -> None:
    body = parse_status_json((REAL / "1rank_status.json").read_bytes())
    assert (body.nodes, body.processes, body.gpus) == (1, 1, 1)
    assert set(body.communicators[0].op_counts.values()) == {0}  # NCCL copies locally, never counts


def exchanges(transcript: Path) -> list[tuple[bytes, bytes]]:
    """(command sent, what came back) of a rawras.py transcript: a reply line, or a status body to EOF."""
    pairs: list[tuple[bytes, bytes]] = []
    for line in transcript.read_text().splitlines():
        _, kind, data = line.split(maxsplit=2)
        if kind == "sent":
            pairs.append((ast.literal_eval(data), b""))
        elif kind == "recv":
            command, got = pairs[-1]
            pairs[-1] = (command, got + ast.literal_eval(data))
    return pairs


@pytest.mark.parametrize("transcript", ["1rank_protocol_errors", "1rank_monitor_unsupported", "1rank_status"])
async def test_the_fake_answers_every_command_as_the_real_2_28_9_server(transcript: str) -> None:
    real = exchanges(REAL / f"{transcript}.transcript")
    status = (REAL / "1rank_status.txt").read_bytes()
    async with FakeRasServer(PROFILES["2.28.9"], status, (REAL / "1rank_status.json").read_bytes()) as fake:
        reader, writer = await asyncio.open_connection(fake.host, fake.port)
        try:
            for command, reply in real:
                writer.write(command)
                if command in (b"STATUS\n", b"VERBOSE STATUS\n"):  # the body, then the server closes
                    assert await asyncio.wait_for(reader.read(), 5) == reply
                else:
                    assert await asyncio.wait_for(reader.readline(), 5) == reply, command
        finally:
            writer.close()
