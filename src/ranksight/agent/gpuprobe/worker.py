"""The probe subprocess: ``python -m ranksight.agent.gpuprobe.worker [options]``; the only module that imports torch.

For each visible GPU (CUDA and ROCm builds both appear as ``torch.cuda``): dense square matmul throughput in BF16 and
FP16 (warm-up, then the best of several timed runs of several multiplies each) and device memory bandwidth (a
streaming ``sum`` over one buffer far larger than the caches; ``sum`` reads each byte once and allocates only its
scalar result, so the buffer is never doubled). The buffer is capped to a fraction of the device's free memory.
Results go to stdout as :mod:`agent.gpuprobe.protocol` lines; everything else the process prints goes to stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import IO, Any

from ranksight.agent.gpuprobe.protocol import (
    Done,
    GpuError,
    GpuResult,
    ProtocolMessage,
    Start,
    Unavailable,
    encode,
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m ranksight.agent.gpuprobe.worker")
    p.add_argument("--matmul-n", type=int, default=8192, help="square matrix size")
    p.add_argument("--matmul-iters", type=int, default=10, help="multiplies per timed run")
    p.add_argument("--warmup", type=int, default=3, help="untimed runs before the timed ones")
    p.add_argument("--repeats", type=int, default=5, help="timed runs; the best counts")
    p.add_argument("--mem-bytes", type=int, default=4 << 30, help="bandwidth buffer size (upper bound)")
    p.add_argument("--max-mem-fraction", type=float, default=0.5, help="of the device's free memory")
    p.add_argument("--allow-cpu", action="store_true", help="measure the CPU when no GPU is visible (tests)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = _protocol_stream()

    def send(message: ProtocolMessage) -> None:
        out.write(encode(message))
        out.flush()

    try:
        import torch
    except ImportError as exc:
        send(Unavailable(reason=f"PyTorch is not installed ({exc})"))
        send(Done())
        return 0
    devices, backend = _devices(torch, args.allow_cpu)
    if not devices:
        send(Unavailable(reason=f"no GPU visible to PyTorch ({backend})"))
        send(Done())
        return 0
    send(Start(backend=backend, devices=len(devices)))
    for index, device in enumerate(devices):
        try:
            send(measure(torch, index, device, args))
        except Exception as exc:  # one GPU failing (OOM, driver error) must not hide the others
            send(GpuError(index=index, error=f"{type(exc).__name__}: {exc}"[:500]))
        finally:
            if device.type == "cuda":
                torch.cuda.empty_cache()
    send(Done())
    return 0


def _protocol_stream() -> IO[bytes]:
    """Keep the real stdout for protocol lines and point fd 1 at stderr, so library chatter cannot corrupt them."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


def _devices(torch: Any, allow_cpu: bool) -> tuple[list[Any], str]:
    if torch.cuda.is_available():
        flavour = "rocm" if getattr(torch.version, "hip", None) else "cuda"
        count = torch.cuda.device_count()
        return [torch.device("cuda", i) for i in range(count)], f"torch-{flavour} {torch.__version__}"
    backend = f"torch-cpu {torch.__version__}"
    return ([torch.device("cpu")] if allow_cpu else []), backend


def measure(torch: Any, index: int, device: Any, args: argparse.Namespace) -> GpuResult:
    started = time.perf_counter()
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    bf16 = _matmul_tflops(torch, device, torch.bfloat16, args, sync)
    fp16 = _matmul_tflops(torch, device, torch.float16, args, sync)
    mem_bytes = _buffer_bytes(torch, device, args.mem_bytes, args.max_mem_fraction)
    bandwidth = _read_bandwidth(torch, device, mem_bytes, args, sync)
    name, uuid = _identity(torch, device)
    return GpuResult(
        index=index, name=name, uuid=uuid, mem_bandwidth_bps=bandwidth, duration_s=time.perf_counter() - started,
        matmul_n=args.matmul_n, mem_bytes=mem_bytes, tflops_bf16=bf16, tflops_fp16=fp16,
    )  # fmt: skip


def _best_time(run: Callable[[], None], warmup: int, repeats: int, sync: Callable[[], None]) -> float:
    for _ in range(warmup):
        run()
    sync()
    best = float("inf")
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        run()
        sync()
        best = min(best, time.perf_counter() - t0)
    return best


def _matmul_tflops(
    torch: Any, device: Any, dtype: Any, args: argparse.Namespace, sync: Callable[[], None]
) -> float:
    n, iters = args.matmul_n, max(1, args.matmul_iters)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    c = torch.empty(n, n, device=device, dtype=dtype)

    def run() -> None:
        for _ in range(iters):
            torch.mm(a, b, out=c)

    seconds = _best_time(run, args.warmup, args.repeats, sync)
    return 2.0 * n**3 * iters / seconds / 1e12


def _buffer_bytes(torch: Any, device: Any, wanted: int, max_fraction: float) -> int:
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        wanted = min(wanted, int(free * max_fraction))
    return max(4, wanted - wanted % 4)


def _read_bandwidth(
    torch: Any, device: Any, nbytes: int, args: argparse.Namespace, sync: Callable[[], None]
) -> float:
    buf = torch.empty(nbytes // 4, device=device, dtype=torch.float32)
    buf.fill_(1.0)  # in place: touches every page without a second buffer
    seconds = _best_time(lambda: torch.sum(buf), args.warmup, args.repeats, sync)
    return nbytes / seconds


def _identity(torch: Any, device: Any) -> tuple[str, str | None]:
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        uuid = getattr(props, "uuid", None)
        return props.name, (str(uuid) if uuid is not None else None)
    import platform

    return f"cpu {platform.machine()}", None


if __name__ == "__main__":
    sys.exit(main())
