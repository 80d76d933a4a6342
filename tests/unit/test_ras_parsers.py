"""RAS parsers on every captured fixture (expected facts asserted), plus fuzzing: truncations and byte noise raise
nothing but :class:`RasParseError`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ranksight.agent.collectors.ras.capture import detect_format, parse_capture
from ranksight.agent.collectors.ras.errors import RasParseError
from ranksight.agent.collectors.ras.parse_json import parse_status_json
from ranksight.agent.collectors.ras.parse_monitor import MonitorDecoder, parse_monitor
from ranksight.agent.collectors.ras.parse_text import parse_status_text
from ranksight.schemas.structs import to_builtins
from tests.conftest import FIXTURES

RAS = FIXTURES / "ras"


def load(name: str) -> bytes:
    return (RAS / name).read_bytes()


def test_every_fixture_is_covered() -> None:
    names = {p.name for p in RAS.iterdir() if p.is_file() and p.name != "PROVENANCE.md"}
    provenance = (RAS / "PROVENANCE.md").read_text()
    assert names == set(EXPECTED) | {"rcclras_2.28.3_stderr_connection_reset.txt"}
    assert all(f"`{n}`" in provenance for n in names)


# name -> (format, version, health, summary, {hash: (size, status, errors, missing)}, missing procs, dead procs,
#          mismatches, timeouts)
EXPECTED: dict[str, tuple] = {
    "rccl_2.28.3_text_status_healthy_1node_8gpu.txt": (
        "text", "2.28.3", "ok", (1, 8, 8), {}, [], [], [], 0),
    "rccl_2.28.3_text_status_incomplete_1node_missing_rank6.txt": (
        "text", "2.28.3", "degraded", (1, 8, 8),
        {"0x3b2fe521bf43bc04": (8, "RUNNING", ["INCOMPLETE"], [6])},
        [("10.194.132.77", 3467978, [6])], [], [], 0),
    "rccl_2.28.3_text_status_incomplete_2node_missing_rank3.txt": (
        "text", "2.28.3", "degraded", (2, 16, 16),
        {"0x488feb6f1c97a0e1": (16, "RUNNING", ["INCOMPLETE"], [3])},
        [("10.245.40.180", 3534512, [3])], [], [], 0),
    "nccl_2.24_docs_fragment_errors_dead_process.txt": (
        "text", None, "failed", (None, None, None),
        {"0xcf264af53edbe986": (None, None, ["INCOMPLETE"], [21])},
        [], [("172.16.64.213", 3487984, [5])], [], 0),
    "nccl_2.24_docs_fragment_finalize_status_mismatch_elided.txt": (
        "text", None, "warning", (None, None, None),
        {"0x9e17999afaa87dbb": (32, "FINALIZE", ["MISMATCH"], [])},
        [], [], [("0x9e17999afaa87dbb", "status", None)], 0),
    "nccl_2.24_docs_fragment_incomplete_with_timeout_warning.txt": (
        "text", None, "degraded", (None, None, None),
        {"0xcf264af53edbe986": (32, "RUNNING", ["INCOMPLETE"], [21])},
        [("172.16.64.213", 3487984, [5])], [], [], 2),
    "nccl_2.24_docs_fragment_warnings_mismatch_collective_counts.txt": (
        "text", None, "warning", (None, None, None),
        {"0x27a079b828ff1a75": (None, None, ["MISMATCH"], [])},
        [], [], [("0x27a079b828ff1a75", "op_count", None)], 0),
    "nccl_2.28.9_json_status_healthy_2rank.json": (
        "json", "2.28.9", "ok", (1, 2, 2), {"0x514e98cf4e44862b": (2, "RUNNING", [], [])}, [], [], [], 0),
    "nccl_2.28.9_json_status_mismatch_4node_a10g.json": (
        "json", "2.28.9", "warning", (4, 4, 4), {"0xf31e5874c3f25459": (4, "RUNNING", ["MISMATCH"], [])},
        [], [], [("0xf31e5874c3f25459", "op_count", "AllReduce")], 0),
    "nccl_2.28.9_json_status_3comms_one_mismatch.json": (
        "json", "2.28.9", "warning", (1, 4, 4),
        {"0x4e0104c2022fa2f9": (2, "RUNNING", ["MISMATCH"], []), "0xbeebea5449e0a7e7": (2, "RUNNING", [], []),
         "0xd0d47b5885b3b54b": (4, "RUNNING", [], [])},
        [], [], [("0x4e0104c2022fa2f9", "op_count", "AllReduce")], 0),
    "nccl_2.28.9_json_status_missing_rank_MALFORMED_missing_comma.json": (
        "json", "2.28.9", "degraded", (1, 2, 2), {"0xa1349768e9517ed7": (2, "RUNNING", ["INCOMPLETE"], [1])},
        [("10.0.77.184", 10017, [1])], [], [], 0),
    "nccl_2.29.1_json_status_docs_sample_missing_rank.json": (
        "json", "2.29.1", "degraded", (1, 2, 2), {"0xae94423cfbb2ef4a": (2, "RUNNING", ["INCOMPLETE"], [1])},
        [("172.16.64.245", 1524345, [1])], [], [], 0),
    "nccl_2.29_monitor_text_peer_dead_docs_sample.txt": (
        "monitor", None, "failed", (None, None, None), {}, [], [], [], 0),
    "nccl_2.29_monitor_json_peer_dead_docs_sample.json": (
        "monitor", None, "failed", (None, None, None), {}, [], [], [], 0),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_facts(name: str) -> None:
    fmt, version, health, summary, comms, missing, dead, mismatches, timeouts = EXPECTED[name]
    out = parse_capture(load(name))
    assert (out["format"], out["version"], out["health"]) == (fmt, version, health)
    assert (out["summary"]["nodes"], out["summary"]["processes"], out["summary"]["gpus"]) == summary
    got = {c["hash"]: (c["size"], c["status"], c["errors"], c["missing_ranks"]) for c in out["communicators"]}
    assert got == comms
    assert [(p["host"], p["pid"], p["gpus"]) for p in out["missing_processes"]] == missing
    assert [(p["host"], p["pid"], p["gpus"]) for p in out["dead_processes"]] == dead
    assert [(m["hash"], m["kind"], m["collective"]) for m in out["mismatches"]] == mismatches
    assert out["timeouts"] == timeouts
    json.dumps(out)  # the --json shape is plain JSON


def test_text_and_json_hash_forms_are_equal() -> None:
    text = parse_status_text(b"#0-0 (03b2fe521bf43bc0) INCOMPLETE\n  Missing communicator data from 1 rank\n")
    assert text.communicators[0].hash == "0x3b2fe521bf43bc0"
    secondary = parse_status_json(load("nccl_2.28.9_json_status_mismatch_4node_a10g.json"))
    assert secondary.communicators[0].secondary_hash == "0xc4a40ef4528a7a56:0x2fda2edc54faea7"


def test_missing_comma_is_repaired_and_valid_json_untouched() -> None:
    raw = load("nccl_2.28.9_json_status_missing_rank_MALFORMED_missing_comma.json")
    with pytest.raises(json.JSONDecodeError):
        json.loads(raw)
    assert parse_status_json(raw).communicators[0].missing_ranks == [1]


def test_json_op_counts_and_rank_status_feed_hang_detection() -> None:
    comm = parse_status_json(load("nccl_2.28.9_json_status_mismatch_4node_a10g.json")).communicators[0]
    assert comm.op_counts["AllReduce"] == 101
    assert comm.rank_status == {"RUNNING": 4}


def _json_status(init_state: int, async_error: int, **flags: bool) -> bytes:
    doc = json.loads(load("nccl_2.28.9_json_status_healthy_2rank.json"))
    doc["communicators"][0]["ranks"][1]["status"].update(
        init_state=init_state, async_error=async_error, **flags
    )
    return json.dumps(doc).encode()


@pytest.mark.parametrize(("init", "err", "flags", "health", "status"), [
    (0, 0, {}, "ok", "RUNNING"),
    (7, 7, {}, "warning", "RUNNING"),  # in progress is normal; the rank is INIT, so statuses differ (MISMATCH)
    (0, 6, {}, "failed", "RUNNING"),  # async error: ERROR
    (0, 0, {"abort_flag": True}, "failed", "ABORT"),
    (0, 0, {"finalize_called": True}, "warning", "FINALIZE"),
])  # fmt: skip
def test_json_status_flags(init: int, err: int, flags: dict[str, bool], health: str, status: str) -> None:
    parsed = parse_status_json(_json_status(init, err, **flags))
    assert (parsed.health, parsed.communicators[0].status) == (health, status)


def test_text_2_26_wording_rank_lines_and_process_not_found() -> None:
    text = (
        b"NCCL version 2.27.3+cuda12.9 compiled with CUDA 12.9\nCUDA runtime version 12090, driver version 12090\n\n"
        b"Job summary\n===========\n\n  Nodes  Processes         GPUs\n          per node  per process\n"
        b"      3          8            1\n      1          7            1\n\n  Nodes  Processes         GPUs\n"
        b"(total)    (total)      (total)\n      4         31           31\n\nCommunicators... (0.012s)\n"
        b"=============\n\nGroup     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors\n"
        b"    #  in group  per comm  per node  per comm  in group\n"
        b"    0         1         4       7-8        32        31   RUNNING  INCOMPLETE,ERROR\n"
        b"    1  123456789  1000000  100000000  12345678901  12345678901  NOCOMM  MISMATCH\n\n"
        b"Errors\n======\n\nINCOMPLETE\n  Missing communicator data from 1 job process\n"
        b"  [could not find information on 1 process]\n\n"
        b"#0-0 (00000000cf264af5) INCOMPLETE\n  Missing communicator data from 2 ranks\n"
        b"  Rank 21 -- GPU 5 managed by process 3487984 on node 172.16.64.213\n"
        b"  Rank 22 -- [process information not found]\n\n"
        b"#0-0 (00000000cf264af5) ERROR\n  Asynchronous error on 1 rank\n"
        b"  Rank 3 reported remote process exited -- GPU 3 managed by process 1 on node h\n\n"
        b"Warnings\n========\n\n#1-0 (abc) MISMATCH\n  Communicator ranks have different AllGather operation counts\n"
        b"  -5 ranks have launched up to operation 18446744073709551615\n\n"
    )  # fmt: skip
    parsed = parse_status_text(text)
    assert (parsed.version, parsed.health, parsed.collection_s) == ("2.27.3", "failed", 0.012)
    assert (parsed.nodes, parsed.processes, parsed.gpus) == (4, 31, 31)
    comm = parsed.communicators[0]
    assert (comm.hash, comm.errors, comm.missing_ranks) == ("0xcf264af5", ["INCOMPLETE", "ERROR"], [21])
    assert comm.unknown_ranks == [22] and comm.complete  # "[process information not found]" is not a process
    assert to_builtins(parsed.mismatches[0]) == {
        "hash": "0xabc",
        "kind": "op_count",
        "collective": "AllGather",
    }


def test_absent_detail_lists_still_give_health() -> None:
    parsed = parse_status_text(b"Errors\n======\n\nDEAD\n  40 job processes are considered dead\n\n")
    assert parsed.health == "failed" and parsed.dead_processes == []


def test_monitor_decoder_handles_chunks_and_concatenated_objects() -> None:
    obj = load("nccl_2.29_monitor_json_peer_dead_docs_sample.json")
    stream = obj + obj.replace(b"PEER_DEAD", b"PEER_RECOVERED")
    decoder = MonitorDecoder()
    events = []
    for i in range(0, len(stream), 7):
        events += decoder.feed(stream[i : i + 7])
    assert [e.event for e in events] == ["PEER_DEAD", "PEER_RECOVERED"]
    line = b"[2025-12-19 13:07:07] PEER_DEAD: Process 1524345 on node 172.16.64.245 managing GPU 1 \n"
    [event] = to_builtins(parse_monitor(b"OK\n" + line))
    del event["event_group"]
    assert event == {
        "time": "2025-12-19 13:07:07", "event": "PEER_DEAD", "host": "172.16.64.245", "pid": 1524345,
        "gpus": [1], "nvml_gpus": [1], "addr": None, "details": "",
    }  # fmt: skip


@pytest.mark.parametrize("data", [b"", b"   \n", b"hello world\n", b"ERROR: Unknown command STATUS\n", b"{\"a\": 1}",
                                  b"[oops\n", b"{not json", b"\xff\xfe\x00garbage"])  # fmt: skip
def test_unparseable_input_raises_parse_error(data: bytes) -> None:
    with pytest.raises(RasParseError):
        parse_capture(data)


def test_detect_format() -> None:
    assert detect_format(load("nccl_2.28.9_json_status_missing_rank_MALFORMED_missing_comma.json")) == "json"
    assert detect_format(load("nccl_2.29_monitor_text_peer_dead_docs_sample.txt")) == "monitor"
    assert detect_format(load("rccl_2.28.3_text_status_healthy_1node_8gpu.txt")) == "text"


ALL_INPUTS = sorted(
    str(p.relative_to(RAS)) for p in Path(RAS).rglob("*") if p.is_file() and p.name != "PROVENANCE.md"
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(ALL_INPUTS), cut=st.floats(0, 1),
       noise=st.lists(st.tuples(st.floats(0, 1), st.binary(min_size=1, max_size=8)), max_size=4))  # fmt: skip
def test_fuzz_truncation_and_noise_raise_only_parse_error(name: str, cut: float, noise: list) -> None:
    data = bytearray(load(name)[: int(len(load(name)) * cut)])
    for where, junk in noise:
        pos = int(len(data) * where)
        data[pos : pos + len(junk)] = junk
    for parse in (parse_capture, parse_status_text, parse_status_json, parse_monitor):
        try:
            result = parse(bytes(data))
        except RasParseError:
            continue
        json.dumps(result if isinstance(result, dict) else [], default=str)


def test_text_mismatch_names_the_ranks_behind_in_every_layout_the_server_prints() -> None:
    # the layouts of upstream's client_support.cc: a group line with its outlier ranks listed, one outlier on its own
    # line, "not launched any operations", a rank whose process is unknown, and a status mismatch (no counts)
    text = b"""NCCL version 2.28.9 compiled with CUDA 13.0

Warnings
========

#0-0 (aaaa000000000001) MISMATCH
  Communicator ranks have different status
  6 ranks have status RUNNING
  2 ranks have status INIT
  Rank 5 -- GPU 5 managed by process 105 on node 10.0.0.2

  Communicator ranks have different AllReduce operation counts
  5 ranks have launched up to operation 40
  2 ranks have launched up to operation 39
  Rank 1 -- GPU 1 managed by process 101 on node 10.0.0.1
  Rank 3 -- GPU 3 managed by process 103 on node 10.0.0.1
  Rank 6 has not launched any operations -- GPU 6 managed by process 106 on node 10.0.0.2

  Communicator ranks have different Broadcast operation counts
  7 ranks have launched up to operation 3
  Rank 7 has launched up to operation 2 -- [process information not found]

"""
    [comm] = parse_status_text(text).communicators
    behind = sorted((r.collective, r.rank, r.count, r.peers_count, r.host, r.pid) for r in comm.lagging_ranks)
    assert behind == [
        ("AllReduce", 1, 39, 40, "10.0.0.1", 101),
        ("AllReduce", 3, 39, 40, "10.0.0.1", 103),
        ("AllReduce", 6, 0, 40, "10.0.0.2", 106),
    ]


def test_a_number_too_long_to_convert_is_a_parse_error_in_every_format() -> None:
    # Python refuses to convert integers of more than 4300 digits (ValueError): a peer sending one gets a clear
    # error, not an exception the collector does not expect and `parse ras` prints as a traceback

    big = "9" * 5000
    real = FIXTURES / "ras/nccl-2.28.9-h100"
    text = (real / "4rank_hang24_status.txt").read_text()
    body = (real / "4rank_hang24_status.json").read_text()
    for parse, data in [
        (parse_status_text, text.replace("operation 1102", f"operation {big}", 1)),
        (parse_status_text, text.replace("process 3030", f"process {big}", 1)),
        (parse_status_json, body.replace("1102", big, 1)),
        (
            parse_monitor,
            '{"timestamp": "2026-11-24 07:03:26", "event": "PEER_DEAD", "peer": {"pid": ' + big + "}}\n",
        ),
    ]:
        with pytest.raises(RasParseError, match="4300 digits"):
            parse(data.encode())
