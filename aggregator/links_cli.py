"""``ranksight links``: the link map from the running aggregator (one row per source, destination, address)."""

from __future__ import annotations

import argparse
import sys

from ranksight.aggregator.api.cli import call_api, given
from ranksight.cliutil import (
    EXIT_FAILED,
    EXIT_OK,
    add_config_flags,
    print_json,
    print_table,
)

COLUMNS = ["cluster", "src", "dst", "transport", "dst_addr", "upload_bps", "download_bps", "rtt_us", "jitter_us", "measured",
           "expires", "state", "error"]  # fmt: skip


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("links", help="the link map: measured bandwidth, RTT and jitter between nodes")
    add_config_flags(p)
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument("--cluster", help="only this cluster (default: all)")
    p.set_defaults(func=links)


def links(args: argparse.Namespace) -> int:
    response = call_api(args, "links", given(args, "cluster"))
    if response is None:
        return EXIT_FAILED
    skipped = response.meta.get("skipped", [])
    if args.json:
        print_json({"links": response.rows, "skipped": skipped})
        return EXIT_OK
    print_table(response.rows, COLUMNS)
    for s in skipped:
        print(f"ranksight: {s['node']}: {s['reason']}", file=sys.stderr)
    return EXIT_OK
