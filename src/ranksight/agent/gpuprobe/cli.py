"""``ranksight probe gpu [--json] [--force]``: measure this node's GPUs now and print the results.

``--json`` prints ``{"gpus": [{"index", "name", "tflops_bf16", "tflops_fp16", "mem_bandwidth_bps", "duration_s"}]}``
(plus ``"errors"`` when some GPU failed). When nothing can be measured (no PyTorch, no GPU, a busy node, a failed
run) it prints ``unavailable: <reason>`` on stderr (``{"gpus": [], "unavailable": "<reason>"}`` with ``--json``) and
exits 1. Settings come from ``[agent.collectors.gpu_probe]``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TYPE_CHECKING, cast

from ranksight.agent.gpuprobe.busy import check_busy
from ranksight.agent.gpuprobe.runner import ProbeOutcome, run_probe
from ranksight.agent.gpuprobe.settings import GpuProbeSettings
from ranksight.core.cliutil import (
    EXIT_FAILED,
    EXIT_OK,
    add_config_flags,
    print_json,
    print_table,
    settings_from_args,
)
from ranksight.core.config import CommonSettings

if TYPE_CHECKING:
    from ranksight.agent.settings import AgentView

GPU_FIELDS = ["index", "name", "tflops_bf16", "tflops_fp16", "mem_bandwidth_bps", "duration_s"]


def register_probe(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = kinds.add_parser("gpu", help="measure this node's GPUs (matmul TFLOPS, memory bandwidth)")
    add_config_flags(p)
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument("--force", action="store_true", help="probe even if a job seems to use the node")
    p.set_defaults(func=probe_gpu)


async def measure(cfg: GpuProbeSettings, force: bool) -> ProbeOutcome:
    if not force:
        reasons = await check_busy(cfg)
        if reasons:
            return ProbeOutcome(status="unavailable", reason="node busy: " + "; ".join(reasons))
    return await run_probe(cfg)


def probe_gpu(args: argparse.Namespace) -> int:
    # The agent's view composes this package's section: imported for the type checker only (a cycle otherwise).
    cfg = cast("AgentView", settings_from_args(args, CommonSettings)).agent.collectors.gpu_probe
    outcome = asyncio.run(measure(cfg, args.force))
    gpus = [{name: getattr(g, name) for name in GPU_FIELDS} for g in outcome.gpus]
    errors = [{"index": e.index, "error": e.error} for e in outcome.errors]
    if outcome.status != "ok" and not gpus:
        if args.json:
            print_json({"gpus": [], "unavailable": outcome.reason})
        else:
            print(f"unavailable: {outcome.reason}", file=sys.stderr)
        return EXIT_FAILED
    if outcome.status != "ok":
        print(f"incomplete: {outcome.reason}", file=sys.stderr)
    if args.json:
        print_json({"gpus": gpus, **({"errors": errors} if errors else {})})
    else:
        print_table(gpus, GPU_FIELDS)
        for e in errors:
            print(f"gpu {e['index']}: error: {e['error']}", file=sys.stderr)
    return EXIT_OK if outcome.status == "ok" and not errors else EXIT_FAILED
