"""The record structs as declared: defaults fresh per record, constraints and unknown fields as the wire contract says,
frozen records, a base's fields first, and plain values back out."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import RECORD_KINDS, GpuRecord, HeartbeatRecord, InspectorRecord, RasRecord
from ranksight.schemas.records.inspector import RawRecordsRequest
from ranksight.schemas.records.probe import ProbeCommand
from ranksight.schemas.records.ras import RasStatus
from ranksight.schemas.structs import to_builtins, to_json
from tests.chaos.support import minimal_record

ENVELOPE = {"type": "ranksight.ev.v1.gpu", "cluster": "c", "node": "n", "agent": "a", "seq": 1, "ts": 0, "ttl": 1.0,
            "records": []}  # fmt: skip


@pytest.mark.parametrize("kind", sorted(RECORD_KINDS))
def test_each_kind_decodes_its_minimal_record_and_gives_it_back(kind: str) -> None:
    model = RECORD_KINDS[kind].model
    values = minimal_record(model)
    record = msgspec.convert(values, model)
    assert {k: v for k, v in to_builtins(record).items() if k in values} == values
    assert model.__struct_config__.frozen and not model.__struct_config__.gc


def test_defaults_are_fresh_per_record() -> None:
    a, b = (msgspec.convert(minimal_record(HeartbeatRecord), HeartbeatRecord) for _ in range(2))
    assert a.collectors is not b.collectors and a.publisher is not b.publisher
    app = RECORD_KINDS["app"].model  # open_sections: a plain [] default, not a factory
    c, d = (msgspec.convert(minimal_record(app), app) for _ in range(2))
    assert c.open_sections == [] and c.open_sections is not d.open_sections


def test_constraints_hold() -> None:
    with pytest.raises(msgspec.ValidationError, match="seq"):
        msgspec.convert({**ENVELOPE, "seq": 0}, Envelope)
    with pytest.raises(msgspec.ValidationError, match="cluster"):
        msgspec.convert({**ENVELOPE, "cluster": ""}, Envelope)
    with pytest.raises(msgspec.ValidationError, match="ttl"):
        msgspec.convert({**ENVELOPE, "ttl": float("inf")}, Envelope)
    command = {"peer": "b", "addr": "10.0.0.2", "port": 7}
    for bad in ({"port": 70000}, {"seconds": 0}, {"echo_count": 1001}, {"bytes": 2**63}):
        with pytest.raises(msgspec.ValidationError):
            msgspec.convert({**command, **bad}, ProbeCommand)


def test_a_raw_request_window_must_not_end_before_it_starts() -> None:
    request = {"comms": ["c"], "from_us": 10, "to_us": 10}
    assert msgspec.convert(request, RawRecordsRequest).to_us == 10
    with pytest.raises(msgspec.ValidationError, match="before from_us"):
        msgspec.json.decode(msgspec.json.encode({**request, "to_us": 9}), type=RawRecordsRequest)


def test_unknown_fields_are_ignored_in_records_and_refused_in_commands() -> None:
    assert msgspec.convert({"index": 1, "from_a_newer_agent": 2}, GpuRecord).index == 1
    with pytest.raises(msgspec.ValidationError, match="unknown"):
        msgspec.convert({"peer": "b", "addr": "a", "port": 7, "extra": 1}, ProbeCommand)


def test_records_are_frozen_and_typed() -> None:
    gpu = msgspec.convert({"index": 3, "power_w": 700, "links": [{"name": "xgmi0", "up": True}]}, GpuRecord)
    assert gpu.power_w == 700.0 and isinstance(gpu.power_w, float)
    assert gpu.links[0].name == "xgmi0"
    with pytest.raises(AttributeError):
        gpu.index = 4  # type: ignore[misc]


def test_a_record_has_its_bases_fields_first() -> None:
    """The order is the table's column order and the order of every JSON answer: a record extends what it builds on."""
    status = RasStatus.__struct_fields__
    assert RasRecord.__struct_fields__[: len(status)] == status
    assert InspectorRecord.__struct_fields__[:3] == ("comm_id", "comm_name", "rank")


def test_plain_values_and_json_agree() -> None:
    gpu = GpuRecord(index=3, throttle_reasons=["power"])
    plain: dict[str, Any] = to_builtins(gpu)
    assert plain["index"] == 3 and plain["throttle_reasons"] == ["power"] and plain["uuid"] is None
    assert msgspec.json.decode(to_json([gpu])) == [plain]
