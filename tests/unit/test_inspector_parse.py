"""The Inspector line parser on the documentation samples (compacted to the on-disk one-line form)."""

from __future__ import annotations

import json

import msgspec
import pytest

from ranksight.formats.inspector import (
    InspectorParseError,
    bandwidths_gbs,
    parse_lines,
    parse_op,
)
from ranksight.schemas.records import InspectorRecord
from ranksight.schemas.structs import to_builtins
from ranksight.simulate.inspector import JobSpec, simulate
from tests.conftest import FIXTURES

DIR = FIXTURES / "inspector"
ALLREDUCE = "nccl_readme_v4.0_allreduce_rank2of8_prerelease_no_timing_source.json"
RS_VERBOSE = "nccl_readme_v4.0_reducescatter_rank4of8_verbose_event_trace.json"
RS_MULTINODE = "nccl_exporter_readme_v4.0_reducescatter_rank31of32_4nodes.json"


def sample(name: str) -> dict:
    return json.loads((DIR / name).read_text())


def compact(obj: dict) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def test_allreduce_prerelease_sample() -> None:
    rec = parse_op(compact(sample(ALLREDUCE)))
    assert (rec.comm_id, rec.rank, rec.n_ranks, rec.nnodes) == ("0x7f8c496ae9f661", 2, 8, 1)
    assert (rec.hostname, rec.pid, rec.dump_ts_us) == ("example-hostname", 1639453, 1748030377748202)
    assert (rec.op_kind, rec.op, rec.sn, rec.msg_size_bytes) == ("coll", "AllReduce", 1407, 17179869184)
    assert rec.exec_time_us == 61974 and rec.timing_source is None
    assert rec.capture_model == "sampled" and rec.comm_name is None
    assert rec.busbw_expected_gbs == pytest.approx(485.119099, abs=1e-5)
    assert not rec.bw_mismatch


@pytest.mark.parametrize("name", [ALLREDUCE, RS_VERBOSE, RS_MULTINODE])
def test_reported_bandwidth_matches_the_formula(name: str) -> None:
    raw = sample(name)["coll_perf"]
    rec = parse_op(compact(sample(name)))
    algbw, busbw = bandwidths_gbs(rec.op, rec.n_ranks, rec.msg_size_bytes, rec.exec_time_us) or (0, 0)
    assert algbw == pytest.approx(raw["coll_algobw_gbs"], abs=1e-5)
    assert busbw == pytest.approx(raw["coll_busbw_gbs"], abs=1e-5)
    assert not rec.bw_mismatch


def test_verbose_event_trace_is_accepted_and_multinode_fields_kept() -> None:
    rec = parse_op(compact(sample(RS_VERBOSE)))
    assert (rec.op, rec.sn, rec.timing_source) == ("ReduceScatter", 1231, "kernel_gpu")
    multi = parse_op(compact(sample(RS_MULTINODE)))
    assert (multi.rank, multi.n_ranks, multi.nnodes, multi.exec_time_us) == (31, 32, 4, 110)


def test_tenfold_bandwidth_of_a_broken_build_is_flagged() -> None:
    obj = sample(RS_MULTINODE)
    obj["coll_perf"]["coll_busbw_gbs"] *= 10
    assert parse_op(compact(obj)).bw_mismatch


def test_ring_model_detected_by_comm_name_and_p2p() -> None:
    obj = sample(RS_MULTINODE)
    obj["header"]["comm_name"] = "dp-group-0"
    rec = parse_op(compact(obj))
    assert rec.capture_model == "ring" and rec.comm_name == "dp-group-0"
    p2p = {"header": obj["header"] | {"n_ranks": 2}, "metadata": obj["metadata"], "p2p_perf": {
        "p2p": "Send", "p2p_sn": 7, "p2p_peer": 1, "p2p_msg_size_bytes": 1048576, "p2p_exec_time_us": 100,
        "p2p_timing_source": "kernel_gpu", "p2p_algobw_gbs": 10.48576, "p2p_busbw_gbs": 10.48576}}  # fmt: skip
    p2p["header"].pop("comm_name")
    rec = parse_op(compact(p2p))
    assert (rec.op_kind, rec.op, rec.sn, rec.peer, rec.capture_model) == ("p2p", "Send", 7, 1, "ring")
    assert not rec.bw_mismatch


def test_nan_string_becomes_null() -> None:
    obj = sample(RS_MULTINODE)
    obj["coll_perf"]["coll_algobw_gbs"] = obj["coll_perf"]["coll_busbw_gbs"] = "nan"
    rec = parse_op(compact(obj))
    assert rec.algobw_gbs is None and rec.busbw_gbs is None and not rec.bw_mismatch


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b'{"header":{"id":"0x1"', "not JSON"),
        (b"[1,2]", "not a JSON object"),
        (b'{"header":{},"metadata":{}}', "neither coll_perf nor p2p_perf"),
        (
            compact({**sample(RS_MULTINODE), "header": {"id": "0x1", "rank": "3", "n_ranks": 4}}),
            "header.rank",
        ),
        (compact({**sample(RS_MULTINODE), "metadata": {"hostname": "h", "pid": 1}}), "dump_timestamp_us"),
    ],
)
def test_bad_lines_raise_a_clear_parse_error(line: bytes, message: str) -> None:
    with pytest.raises(InspectorParseError, match=message):
        parse_op(line)


def test_wrong_type_in_optional_field_is_a_parse_error_not_a_crash() -> None:
    obj = sample(RS_MULTINODE)
    obj["coll_perf"]["coll_timing_source"] = 5
    with pytest.raises(InspectorParseError, match="timing_source"):
        parse_op(compact(obj))


def test_operations_are_wire_records_as_decoding_validates_them() -> None:
    """Each operation the hot path builds is the wire's record, as decoding would validate it."""
    lines = [compact(sample(name)) for name in (ALLREDUCE, RS_VERBOSE, RS_MULTINODE)]
    lines += [x.encode() for xs in simulate(JobSpec(nodes=2, gpus_per_node=2, steps=3, capture="ring")).values()
              for x in xs]  # fmt: skip
    errors: list[InspectorParseError] = []
    ops = list(parse_lines([*lines, b"", b"{"], errors.append))
    assert len(ops) == len(lines) and len(errors) == 1
    assert all(type(op) is InspectorRecord for op in ops)
    for line, op in zip(lines, ops, strict=True):
        assert op == parse_op(line)
        assert to_builtins(op) == to_builtins(msgspec.convert(to_builtins(op), InspectorRecord))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("header", "comm_name", 3), "header.comm_name"),
        (("metadata", "pid", True), "metadata.pid"),  # a JSON boolean is no integer
        (
            ("coll_perf", "coll_exec_time_us", "fast"),
            "coll_perf.coll_exec_time_us: expected a number, got 'fast'",
        ),
        (("coll_perf", "coll_busbw_gbs", [1]), "coll_perf.coll_busbw_gbs"),
        (("coll_perf", "coll_sn", None), "coll_perf.coll_sn"),
    ],
)
def test_a_wrong_field_type_names_the_field(change: tuple[str, str, object], message: str) -> None:
    obj = sample(RS_MULTINODE)
    section, key, value = change
    obj[section][key] = value
    with pytest.raises(InspectorParseError, match=message):
        parse_op(compact(obj))


def test_a_null_comm_name_still_means_the_ring_model() -> None:
    obj = sample(RS_MULTINODE)
    obj["header"]["comm_name"] = None
    op = parse_op(compact(obj))
    assert (op.capture_model, op.comm_name) == ("ring", None)


@pytest.mark.parametrize("where", ["top", "unknown field", "header"])
def test_a_deep_nest_is_a_bad_line_not_a_crash(where: str) -> None:
    nest = b"[" * 100_000 + b"]" * 100_000
    lines = {"top": nest, "unknown field": b'{"x":' + nest + b"}", "header": b'{"header":' + nest + b"}"}
    with pytest.raises(InspectorParseError, match="not JSON"):
        parse_op(lines[where])
