"""Wire benchmark: bytes per record and codec throughput of the two record forms, per kind, in the same run.

For each kind, batches as an agent sends them (``--inspector-batch`` raw Inspector records of one node: 8 ranks x 50
collectives/s flushed every 0.25 s is about 100; one sample of 8 GPUs; 8 ports of NIC counters; one heartbeat) are
encoded in the map form (every field name in every record; what the previous release sent) and in the compact form
(a column per field, constants once, defaults left out). Prints bytes per record (whole envelope divided by its
records), the ratio compact/map, and encode and decode records/s of each form with the ratio compact/map (best of
``--repeats``, the forms taking turns; encode is ``encode_event``, decode is ``decode_event`` with every check of the
edge). Target: <= 110 bytes per raw Inspector
record in the compact form.

Then the ``inspector_summary`` traffic of one node (8 ranks of a simulated job) in the compact form: published in parts
every ``--publish-s`` (the agent's default, 1 s) against once per 5 s window (what agents before parts sent; here
parts every 5 s aligned to the windows, which are the same summaries): summaries/s, bytes/s and bytes per summarized
record, and the ratio.

Records come from the captured fixtures where there is one: Inspector lines from the job simulator (faithful to the
plugin's v4.0 lines), GPU from ``nvidia-smi -q -x`` of an A100, NIC from ``ethtool -S`` of an ionic port.

    python benchmarks/wire.py [--inspector-batch 100] [--repeats 5] [--seconds 0.2] [--publish-s 1]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from msgspec.structs import replace  # noqa: E402

from ranksight.agent.collectors.gpu.nvidia_smi_xml import parse_nvidia_smi_xml  # noqa: E402
from ranksight.agent.collectors.nic.tools import parse_ethtool_stats  # noqa: E402
from ranksight.formats.inspector import parse_op  # noqa: E402
from ranksight.schemas.codec import decode_event, encode_event  # noqa: E402
from ranksight.schemas.envelope import Envelope  # noqa: E402
from ranksight.schemas.records import CollectorHealth, HeartbeatRecord, PublisherStats, Record  # noqa: E402
from ranksight.schemas.wire import WireFormat, event_type  # noqa: E402
from ranksight.simulate.inspector import JobSpec, simulate, summarize  # noqa: E402

TARGET_INSPECTOR_BYTES = 110
FIXTURES = ROOT / "fixtures" / "metrics"


def inspector(n: int) -> list[Record]:
    """``n`` raw records of one node (8 ranks), in dump order."""
    lines = simulate(JobSpec(nodes=4, gpus_per_node=8, steps=max(20, n // 8)))
    records = [parse_op(line) for (host, _), proc in lines.items() if host == "node000" for line in proc]
    records.sort(key=lambda r: r.dump_ts_us)
    return list(records[:n])


def summary_traffic(publish_s: float, window_s: float = 5.0) -> dict[str, float]:
    """One node's ``inspector_summary`` envelopes (compact) for 60 s of a simulated job, one per publication."""
    lines = simulate(JobSpec(nodes=4, gpus_per_node=8, steps=600))
    records = sorted((parse_op(line) for (host, _), proc in lines.items() if host == "node000" for line in proc),
                     key=lambda r: r.dump_ts_us)  # fmt: skip
    published: dict[int, list[Record]] = {}
    for at_us, summary in summarize(records, window_s, 0.5, publish_s):
        published.setdefault(at_us, []).append(summary)
    seconds = (records[-1].dump_ts_us - records[0].dump_ts_us) / 1e6
    sent = sum(len(encode_event(_envelope("inspector_summary", batch))) for batch in published.values())
    count = sum(len(batch) for batch in published.values())
    return {"summaries_s": count / seconds, "bytes_s": sent / seconds, "per_record": sent / len(records),
            "records_s": len(records) / seconds, "envelopes_s": len(published) / seconds}  # fmt: skip


def gpu() -> list[Record]:
    [a100] = parse_nvidia_smi_xml((FIXTURES / "nvidia" / "nvidia-smi-q-x_a100-sxm4_v12.xml").read_bytes())
    return [replace(a100, **{"index": i, "bus_id": f"00000000:{i + 1:02x}:00.0", "power_w": 300.0 + i * 7.25})
            for i in range(8)]  # fmt: skip


def nic() -> list[Record]:
    port = parse_ethtool_stats(
        (FIXTURES / "nic" / "ionic" / "dme_ethtool_S_enp132s0.txt").read_bytes(), "enp132s0"
    )
    return [replace(port, **{"name": f"enp{i}s0", "tx_bps": 1e9 * i, "rx_bps": 2e9 * i, "interval_s": 5.0})
            for i in range(8)]  # fmt: skip


def heartbeat() -> list[Record]:
    collectors = [CollectorHealth(name=name, state="ok", source="sysfs", last_success_ns=time.time_ns(),
                                  last_duration_s=0.004, runs=1200, errors=0)
                  for name in ("heartbeat", "ras", "inspector", "gpu", "nic", "probe", "gpu_probe", "app")]  # fmt: skip
    return [HeartbeatRecord(hostname="gpu-node-017", version="0.1.0", pid=4242, started_ns=time.time_ns(),
                            collectors=collectors, publisher=PublisherStats(published=5000, acked=5000))]  # fmt: skip


def _envelope(kind: str, records: list[Record]) -> Envelope:
    return Envelope(type=event_type(kind), cluster="prod-a", node="gpu-node-017", agent="0123456789abcdef",
                    seq=123456, ts=time.time_ns(), ttl=60.0, records=records)  # fmt: skip


def _calls(work: Callable[[], Any], seconds: float) -> int:
    """How many calls of ``work`` take about ``seconds``."""
    calls = 1
    while True:
        started = time.perf_counter()
        for _ in range(calls):
            work()
        elapsed = time.perf_counter() - started
        if elapsed >= seconds / 4:
            return max(1, int(calls * seconds / elapsed))
        calls *= 2


def measure(kind: str, records: list[Record], repeats: int, seconds: float) -> dict[str, Any]:
    """Bytes per record of each form, and records/s of each codec step: the best of ``repeats`` runs, the forms taking
    turns within each repeat so that both see the same load."""
    env = _envelope(kind, records)
    n = len(records)
    payloads: dict[WireFormat, bytes] = {form: encode_event(env, form) for form in ("map", "compact")}
    if decode_event(payloads["map"]).records != decode_event(payloads["compact"]).records:
        raise SystemExit(f"{kind}: the two forms decode to different records")
    work: dict[str, Callable[[], Any]] = {}
    for form, payload in payloads.items():
        work[f"{form}_encode"] = partial(encode_event, env, form)
        work[f"{form}_decode"] = partial(decode_event, payload)
    calls = {name: _calls(step, seconds) for name, step in work.items()}
    best = dict.fromkeys(work, float("inf"))
    for _ in range(repeats):
        for name, step in work.items():
            started = time.perf_counter()
            for _ in range(calls[name]):
                step()
            best[name] = min(best[name], (time.perf_counter() - started) / calls[name])
    row: dict[str, Any] = {f"{form}_bytes": len(payload) / n for form, payload in payloads.items()}
    return row | {name: n / seconds_per_call for name, seconds_per_call in best.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inspector-batch", type=int, default=100, help="raw Inspector records per envelope")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.2, help="length of one timed run")
    parser.add_argument("--publish-s", type=float, default=1.0, help="inspector_summary parts' period")
    args = parser.parse_args()
    batches = {
        f"inspector x{args.inspector_batch}": ("inspector", inspector(args.inspector_batch)),
        "inspector x1000": ("inspector", inspector(1000)),
        "gpu x8": ("gpu", gpu()),
        "nic x8": ("nic", nic()),
        "heartbeat x1": ("heartbeat", heartbeat()),
    }
    print(f"{'batch':18s} {'map B/rec':>10s} {'compact B/rec':>14s} {'ratio':>6s}   "
          f"{'encode map / compact rec/s':>28s} {'ratio':>6s}   {'decode map / compact rec/s':>28s} {'ratio':>6s}")  # fmt: skip
    rows = {}
    for label, (kind, records) in batches.items():
        row = rows[label] = measure(kind, records, args.repeats, args.seconds)
        print(f"{label:18s} {row['map_bytes']:10.1f} {row['compact_bytes']:14.1f} "
              f"{row['compact_bytes'] / row['map_bytes']:6.2f}   "
              f"{row['map_encode']:14,.0f} / {row['compact_encode']:11,.0f} "
              f"{row['compact_encode'] / row['map_encode']:6.2f}   "
              f"{row['map_decode']:14,.0f} / {row['compact_decode']:11,.0f} "
              f"{row['compact_decode'] / row['map_decode']:6.2f}")  # fmt: skip
    raw = rows[f"inspector x{args.inspector_batch}"]["compact_bytes"]
    verdict = "met" if raw <= TARGET_INSPECTOR_BYTES else "NOT met"
    print(f"raw Inspector record, compact, {args.inspector_batch} per envelope: {raw:.1f} B "
          f"(target <= {TARGET_INSPECTOR_BYTES} B: {verdict})")  # fmt: skip
    traffic = {f"parts every {args.publish_s:g} s": summary_traffic(args.publish_s),
               "once per 5 s window": summary_traffic(5.0)}  # fmt: skip
    for label, t in traffic.items():
        print(f"inspector_summary of one node ({t['records_s']:.0f} records/s), {label:20s}: "
              f"{t['summaries_s']:5.1f} summaries/s in {t['envelopes_s']:.1f} envelopes/s, {t['bytes_s']:7,.0f} B/s "
              f"({t['per_record']:.1f} B per record summarized)")  # fmt: skip
    parts, whole = traffic.values()
    print(
        f"  parts / whole windows: {parts['bytes_s'] / whole['bytes_s']:.2f} x the bytes, "
        f"{parts['summaries_s'] / whole['summaries_s']:.2f} x the summaries"
    )


if __name__ == "__main__":
    main()
