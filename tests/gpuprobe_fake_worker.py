"""A fake probe worker for tests: ``python -m tests.gpuprobe_fake_worker --mode MODE [...]``.

Faithful to the worker protocol (it writes the very :mod:`agent.gpuprobe.protocol` messages, built with its models)
and to the worker's command line (it accepts and ignores the measurement flags the runner appends). The modes act
out what a real worker can do: succeed, find nothing, hang, grow its memory, crash, print garbage.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from ranksight.agent.gpuprobe.protocol import Done, GpuError, GpuResult, Start, Unavailable, encode


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="ok")
    p.add_argument("--gpus", type=int, default=2)
    p.add_argument("--name", default="AMD Instinct MI300X")
    p.add_argument("--tflops", type=float, default=700.0)
    p.add_argument("--bandwidth", type=float, default=4.0e12)
    p.add_argument("--runs-file", type=Path, help="append one line per run (to count runs)")
    p.add_argument("--pid-file", type=Path, help="write 'worker_pid child_pid'")
    args, _measurement_flags = p.parse_known_args()
    if args.runs_file:
        with args.runs_file.open("a") as f:
            f.write(f"{os.getpid()}\n")

    def send(message: object) -> None:
        sys.stdout.buffer.write(encode(message))  # type: ignore[arg-type]
        sys.stdout.buffer.flush()

    def gpu(i: int) -> GpuResult:
        return GpuResult(index=i, name=args.name, uuid=f"GPU-{i:04d}", tflops_bf16=args.tflops,
                         tflops_fp16=args.tflops * 1.01, mem_bandwidth_bps=args.bandwidth, duration_s=0.01,
                         matmul_n=8192, mem_bytes=4 << 30)  # fmt: skip

    mode = args.mode
    if mode == "unavailable":
        send(Unavailable(reason="PyTorch is not installed (fake)"))
        send(Done())
        return 0
    if mode == "garbage":
        sys.stdout.write("Loading CUDA kernels...\n")
        sys.stdout.flush()
        return 0
    send(Start(backend="fake 1.0", devices=args.gpus))
    send(gpu(0))
    if mode == "hang":
        child = subprocess.Popen(["sleep", "60"])
        if args.pid_file:
            args.pid_file.write_text(f"{os.getpid()} {child.pid}")
        time.sleep(60)
    elif mode == "hog":
        hog = bytearray(400 << 20)  # touched pages: resident
        for i in range(0, len(hog), 4096):
            hog[i] = 1
        time.sleep(60)
    elif mode == "crash":
        print("Segmentation fault in fake driver", file=sys.stderr)
        return 3
    elif mode == "no_done":
        return 0
    elif mode == "gpu_error":
        send(GpuError(index=1, error="OutOfMemoryError: fake"))
    else:
        for i in range(1, args.gpus):
            send(gpu(i))
    send(Done())
    return 0


if __name__ == "__main__":
    sys.exit(main())
