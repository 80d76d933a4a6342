"""The worker's JSON-lines protocol: every message round-trips; anything else is a clear GpuProbeProtocolError."""

from __future__ import annotations

import pytest

from ranksight.agent.gpuprobe.protocol import (
    MAX_LINE,
    Done,
    GpuError,
    GpuProbeProtocolError,
    GpuResult,
    Start,
    Unavailable,
    encode,
    parse_line,
)

MESSAGES = [
    Start(backend="torch-rocm 2.5.1", devices=8),
    GpuResult(
        index=3,
        name="AMD Instinct MI300X",
        uuid="GPU-1",
        tflops_bf16=612.5,
        tflops_fp16=640.0,
        mem_bandwidth_bps=4.1e12,
        duration_s=3.2,
        matmul_n=8192,
        mem_bytes=4 << 30,
    ),
    GpuError(index=1, error="OutOfMemoryError: CUDA out of memory"),
    Unavailable(reason="no GPU visible to PyTorch (torch-cpu 2.13.0)"),
    Done(),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: m.type)
def test_round_trip(message: object) -> None:
    line = encode(message)  # type: ignore[arg-type]
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert parse_line(line) == message


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        (b"Loading kernels\n", "not JSON"),
        (b'{"type": "bogus"}\n', "unexpected message"),
        (b'{"type": "gpu", "index": 0}\n', "unexpected message"),
        (b'{"type": "gpu_error", "index": -2, "error": "x"}\n', "unexpected message"),
        (b'{"type": "done", "extra": 1}\n', "unexpected message"),
        (b"[1, 2]\n", "unexpected message"),
        (b'{"type": "done"}' + b" " * MAX_LINE, "exceeds"),
    ],
)
def test_bad_lines_raise_protocol_error(line: bytes, fragment: str) -> None:
    with pytest.raises(GpuProbeProtocolError, match=fragment):
        parse_line(line)
