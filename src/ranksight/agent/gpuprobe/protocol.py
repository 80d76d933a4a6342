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

from typing import Annotated

import msgspec

from ranksight.errors import ParseError

NonNegativeInt = Annotated[int, msgspec.Meta(ge=0)]
NonNegativeFloat = Annotated[float, msgspec.Meta(ge=0)]


class GpuProbeProtocolError(ParseError):
    """A line the worker should never write: not JSON, or not one of the messages above."""


class ProtocolMessage(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, tag_field="type"):
    """One line; its ``type`` is the class's tag."""

    @property
    def type(self) -> str:
        return str(self.__struct_config__.tag)


class Start(ProtocolMessage, tag="start", kw_only=True):
    backend: str
    devices: NonNegativeInt


class GpuResult(ProtocolMessage, tag="gpu", kw_only=True):
    index: NonNegativeInt
    name: str | None = None
    uuid: str | None = None
    tflops_bf16: NonNegativeFloat | None = None
    tflops_fp16: NonNegativeFloat | None = None
    mem_bandwidth_bps: NonNegativeFloat | None = None
    duration_s: NonNegativeFloat
    matmul_n: Annotated[int, msgspec.Meta(ge=1)]
    mem_bytes: NonNegativeInt


class GpuError(ProtocolMessage, tag="gpu_error", kw_only=True):
    index: NonNegativeInt
    error: str


class Unavailable(ProtocolMessage, tag="unavailable", kw_only=True):
    reason: str


class Done(ProtocolMessage, tag="done", kw_only=True):
    pass


Message = Start | GpuResult | GpuError | Unavailable | Done
_DECODER = msgspec.json.Decoder(Message)
_ENCODER = msgspec.json.Encoder()
MAX_LINE = 64 * 1024


def encode(message: ProtocolMessage) -> bytes:
    return _ENCODER.encode(message) + b"\n"


def parse_line(line: bytes) -> Message:
    """One stdout line -> its message; raises :class:`GpuProbeProtocolError` with the reason."""
    if len(line) > MAX_LINE:
        raise GpuProbeProtocolError(f"line of {len(line)} bytes exceeds {MAX_LINE}")
    try:
        return _DECODER.decode(line)
    except msgspec.ValidationError as exc:
        raise GpuProbeProtocolError(f"unexpected message {line[:80]!r}: {exc}") from None
    except msgspec.DecodeError:
        raise GpuProbeProtocolError(f"not JSON: {line[:80]!r}") from None
