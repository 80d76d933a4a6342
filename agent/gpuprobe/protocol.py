"""The worker -> agent protocol: one JSON object per line on the worker's stdout.

::

    {"type": "start", "backend": "torch-cuda 2.5.1", "devices": 8}
    {"type": "gpu", "index": 0, "name": "...", "tflops_bf16": 700.1, "tflops_fp16": 702.3,
     "mem_bandwidth_bps": 2.9e12, "duration_s": 4.2, "matmul_n": 8192, "mem_bytes": 4294967296}
    {"type": "gpu_error", "index": 1, "error": "..."}                  # one GPU failed; the others go on
    {"type": "unavailable", "reason": "PyTorch is not installed"}     # nothing can be measured here
    {"type": "done"}

Anything else on stdout is a protocol error (the worker keeps library chatter on stderr). Parsing is pure.
"""

from __future__ import annotations

import json
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from ranksight.errors import ParseError


class GpuProbeProtocolError(ParseError):
    """A line the worker should never write: not JSON, or not one of the messages above."""


class ProtocolMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Start(ProtocolMessage):
    type: Literal["start"] = "start"
    backend: str
    devices: int = Field(ge=0)


class GpuResult(ProtocolMessage):
    type: Literal["gpu"] = "gpu"
    index: int = Field(ge=0)
    name: str | None = None
    uuid: str | None = None
    tflops_bf16: float | None = Field(None, ge=0)
    tflops_fp16: float | None = Field(None, ge=0)
    mem_bandwidth_bps: float | None = Field(None, ge=0)
    duration_s: float = Field(ge=0)
    matmul_n: int = Field(ge=1)
    mem_bytes: int = Field(ge=0)


class GpuError(ProtocolMessage):
    type: Literal["gpu_error"] = "gpu_error"
    index: int = Field(ge=0)
    error: str


class Unavailable(ProtocolMessage):
    type: Literal["unavailable"] = "unavailable"
    reason: str


class Done(ProtocolMessage):
    type: Literal["done"] = "done"


Message = Annotated[Start | GpuResult | GpuError | Unavailable | Done, Field(discriminator="type")]
_ADAPTER: TypeAdapter[Message] = TypeAdapter(Message)
MAX_LINE = 64 * 1024


def encode(message: ProtocolMessage) -> bytes:
    return message.model_dump_json().encode() + b"\n"


def parse_line(line: bytes) -> Message:
    """One stdout line -> its message; raises :class:`GpuProbeProtocolError` with the reason."""
    if len(line) > MAX_LINE:
        raise GpuProbeProtocolError(f"line of {len(line)} bytes exceeds {MAX_LINE}")
    try:
        data = json.loads(line)
    except ValueError:
        raise GpuProbeProtocolError(f"not JSON: {line[:80]!r}") from None
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as exc:
        raise GpuProbeProtocolError(f"unexpected message {line[:80]!r}: {exc.errors()[0]['msg']}") from None
