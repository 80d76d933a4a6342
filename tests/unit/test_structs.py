"""The decoding twins (schemas/structs.py) agree with their pydantic models: fields, defaults, constraints, extras."""

from __future__ import annotations

import types
from typing import Any, Literal, Union, get_args, get_origin

import msgspec
import pytest
from pydantic import BaseModel, Field

from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import RECORD_MODELS, GpuRecord, HeartbeatRecord
from ranksight.schemas.records.probe import ProbeCommand
from ranksight.schemas.structs import from_builtins, struct_for, to_builtins, to_json

MODELS = [*RECORD_MODELS.values(), ProbeCommand]


def _sample(annotation: Any) -> Any:
    """A valid value for a required field of this annotation."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _required(annotation)
    origin = get_origin(annotation)
    if origin is Literal:
        return get_args(annotation)[0]
    if origin in (Union, types.UnionType):
        return _sample(next(a for a in get_args(annotation) if a is not type(None)))
    if origin is list:
        return [_sample(get_args(annotation)[0])]
    return {str: "x", int: 7, float: 2.5, bool: True}.get(annotation, 1)  # Any: anything


def _required(model: type[BaseModel]) -> dict[str, Any]:
    return {name: _sample(info.annotation) for name, info in model.model_fields.items() if info.is_required()}


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_twin_has_the_models_fields_and_defaults(model: type[BaseModel]) -> None:
    twin = struct_for(model)
    assert twin.__struct_fields__ == tuple(model.model_fields)
    values = _required(model)
    assert to_builtins(msgspec.convert(values, twin)) == model.model_validate(values).model_dump()


def test_defaults_are_fresh_per_record() -> None:
    twin = struct_for(HeartbeatRecord)
    a, b = (msgspec.convert(_required(HeartbeatRecord), twin) for _ in range(2))
    assert a.collectors is not b.collectors and a.publisher is not b.publisher
    app = struct_for(RECORD_MODELS["app"])  # open_sections: a plain [] default, not a factory
    c, d = (msgspec.convert(_required(RECORD_MODELS["app"]), app) for _ in range(2))
    assert c.open_sections == [] and c.open_sections is not d.open_sections


def test_constraints_carry_over() -> None:
    envelope = {name: _sample(info.annotation) for name, info in Envelope.model_fields.items()}
    with pytest.raises(msgspec.ValidationError, match="seq"):
        msgspec.convert({**envelope, "seq": 0}, struct_for(Envelope))
    with pytest.raises(msgspec.ValidationError, match="cluster"):
        msgspec.convert({**envelope, "cluster": ""}, struct_for(Envelope))
    command = {"peer": "b", "addr": "10.0.0.2", "port": 7}
    for bad in ({"port": 70000}, {"seconds": 0}, {"echo_count": 1001}):
        with pytest.raises(msgspec.ValidationError):
            msgspec.convert({**command, **bad}, struct_for(ProbeCommand))


def test_unknown_fields_follow_the_model() -> None:
    assert from_builtins(GpuRecord, {"index": 1, "from_a_newer_agent": 2}).index == 1
    with pytest.raises(msgspec.ValidationError, match="unknown"):
        msgspec.convert({"peer": "b", "addr": "a", "port": 7, "extra": 1}, struct_for(ProbeCommand))


def test_twins_are_frozen_and_read_like_the_model() -> None:
    gpu = from_builtins(GpuRecord, {"index": 3, "power_w": 700, "links": [{"name": "xgmi0", "up": True}]})
    assert gpu.power_w == 700.0 and isinstance(gpu.power_w, float)
    assert gpu.links[0].name == "xgmi0"
    with pytest.raises(AttributeError):
        gpu.index = 4


def test_builtins_and_json_are_the_same_for_twins_and_models() -> None:
    model = GpuRecord(index=3, links=[{"name": "xgmi0", "up": True}], throttle_reasons=["power"])
    twin = from_builtins(GpuRecord, model.model_dump())
    assert to_builtins(twin) == to_builtins(model) == model.model_dump()
    assert to_json([twin]) == to_json([model]) == "[" + model.model_dump_json() + "]"


def test_a_sub_model_factory_default_becomes_its_twin() -> None:
    class Inner(BaseModel):
        n: int = 1

    class Outer(BaseModel):
        inner: Inner = Field(default_factory=Inner)

    twin = msgspec.convert({}, struct_for(Outer))
    assert type(twin.inner) is struct_for(Inner) and to_builtins(twin) == Outer().model_dump()
