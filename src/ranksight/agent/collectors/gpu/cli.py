"""``ranksight parse gpu FILE --source amd-smi|rocm-smi|nvidia-smi [--json]``: normalized GPU records of a capture."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from ranksight.agent.collectors.gpu.amd_smi import GpuToolParseError, parse_amd_smi_metric
from ranksight.agent.collectors.gpu.amd_smi_monitor import parse_amd_smi_monitor
from ranksight.agent.collectors.gpu.nvidia_smi import parse_nvidia_smi_csv
from ranksight.agent.collectors.gpu.nvidia_smi_xml import parse_nvidia_smi_xml
from ranksight.agent.collectors.gpu.rocm_smi import parse_rocm_smi
from ranksight.core.cliutil import EXIT_FAILED, print_json, print_table
from ranksight.schemas.records import GpuRecord

PARSERS: dict[str, Callable[[bytes], list[GpuRecord]]] = {
    "amd-smi": parse_amd_smi_metric,
    "rocm-smi": parse_rocm_smi,
    "nvidia-smi": parse_nvidia_smi_csv,
    # beyond the three: the other captured formats the collector reads
    "amd-smi-monitor": parse_amd_smi_monitor,
    "nvidia-smi-xml": parse_nvidia_smi_xml,
}
FIELDS = [
    "index", "name", "utilization_pct", "memory_used_bytes", "memory_total_bytes", "power_w", "power_cap_w",
    "temperature_edge_c", "temperature_junction_c", "temperature_memory_c", "sclk_hz", "mclk_hz", "ecc_correctable",
    "ecc_uncorrectable", "pcie_replays",
]  # fmt: skip
TABLE = ["index", "name", "utilization_pct", "memory_used_bytes", "power_w", "temperature_edge_c", "sclk_hz"]


def register_parse(sources: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sources.add_parser(
        "gpu", help="amd-smi metric --json, rocm-smi --json or nvidia-smi --query-gpu csv output"
    )
    p.add_argument("file", type=Path, metavar="FILE")
    p.add_argument("--source", required=True, choices=sorted(PARSERS), help="tool that produced FILE")
    p.add_argument("--json", action="store_true", help="a JSON list of records on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        records = PARSERS[args.source](args.file.read_bytes())
    except OSError as exc:
        print(f"ranksight: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
        return EXIT_FAILED
    except (GpuToolParseError, ValueError) as exc:
        print(f"ranksight: {args.file} is not {args.source} output: {exc}", file=sys.stderr)
        return EXIT_FAILED
    rows = [{name: getattr(r, name) for name in FIELDS} for r in records]
    if args.json:
        print_json(rows)
    else:
        print_table(rows, TABLE)
    return 0
