"""``ranksight parse nic SYSFS_ROOT [--json]``: RDMA ports and netdevs read from a sysfs tree (SYSFS_ROOT stands for /sys)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ranksight.agent.collectors.nic.sysfs import read_nics
from ranksight.core.cliutil import EXIT_FAILED, print_json, print_table

FIELDS = [
    "name",
    "kind",
    "state",
    "speed_bps",
    "tx_bytes",
    "rx_bytes",
    "tx_packets",
    "rx_packets",
    "counters",
]


def register_parse(sources: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sources.add_parser("nic", help="RDMA ports and netdevs of a sysfs tree")
    p.add_argument("root", type=Path, metavar="SYSFS_ROOT", help="directory standing for /sys")
    p.add_argument("--json", action="store_true", help="a JSON list of objects on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not (args.root / "class").is_dir():
        print(f"ranksight: {args.root} is not a sysfs root (no class/ directory)", file=sys.stderr)
        return EXIT_FAILED
    records = read_nics(args.root)
    if not records:
        print(f"ranksight: no RDMA port or netdev under {args.root}/class", file=sys.stderr)
        return EXIT_FAILED
    rows = [{f: getattr(r, f) for f in FIELDS} for r in records]
    if args.json:
        print_json(rows)
    else:
        print_table(rows, FIELDS[:-1])
    return 0
