"""Hostile-load benchmark: the aggregator's peak memory under a burst of malformed messages and under a large backlog.

Runs the real aggregator (``ranksight aggregator``, a child process) against a real nats-server and prints its peak RSS
(VmHWM) in three runs, each on a fresh server and state directory:

- baseline: an empty stream (what the aggregator holds idle, measured in the same run);
- burst: ``--malformed`` malformed messages of ``--malformed-kb`` each, waiting in the stream when the aggregator starts;
- backlog: ``--backlog-mb`` of valid 1 MB envelopes waiting in the stream: GPU samples (6000 records each), or with
  ``--payload strings`` RAS events with 90 KB details (DuckDB then holds far more while it checkpoints the table).

Each figure is printed with its ratio to the baseline and against the configured bounds (``fetch_max_bytes``,
``dead_letter_payload_bytes``; target: under 1 GiB with the defaults). ``--unbounded`` adds a backlog run with the fetch
byte bound lifted (1 GiB), to show what the bound buys.

    python benchmarks/hostile.py [--malformed 10000] [--malformed-kb 60] [--backlog-mb 1024] [--unbounded]
    python benchmarks/hostile.py --backlog-mb 200        # quick run
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgpack
import nats

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ranksight.aggregator.ingest.settings import IngestSettings
from ranksight.aggregator.runtime import ensure_stream
from ranksight.core.natsserver import NatsServer
from ranksight.schemas.subjects import Subjects
from ranksight.settings import Settings, load_settings

MiB = 1 << 20
CLUSTER = "bench"


def _settings(state: Path, url: str) -> Settings:
    return load_settings(
        None, cluster=CLUSTER, state_dir=state, nats={"url": url}, aggregator={"http": {"port": 0}}
    )


def _malformed(count: int, size: int) -> list[bytes]:
    kinds = [
        lambda i: b"\xc1" * size + i.to_bytes(4),  # not msgpack
        lambda i: msgpack.packb(
            {
                "type": "ranksight.ev.v1.gpu",
                "cluster": CLUSTER,
                "node": "evil",
                "agent": "x",
                "seq": 2**63,
                "ts": 0,
                "ttl": float("inf"),
                "records": [{"pad": "x" * size}],
            }
        ),
    ]
    return [kinds[i % len(kinds)](i) for i in range(count)]


def _backlog(megabytes: int, payload: str) -> list[bytes]:
    """About ``megabytes`` 1 MB envelopes: GPU samples (typical records), or RAS events with 90 KB details (``strings``)."""
    if payload == "strings":
        kind, node, records = (
            "ras_event",
            "n1",
            [{"event": "TRACE", "endpoint": "e:1", "details": "x" * 92_160}] * 10,
        )
    else:
        gpu = {"index": 0, "name": "MI300X", "utilization_pct": 97.0, "power_w": 712.5, "sclk_hz": 2.1e9,
               "memory_used_bytes": 150_000_000_000, "temperature_junction_c": 81.0, "throttle_reasons": ["power"]}  # fmt: skip
        kind, node, records = "gpu", "n1", [gpu] * 6000
    return [
        msgpack.packb(
            {
                "type": f"ranksight.ev.v1.{kind}",
                "cluster": CLUSTER,
                "node": node,
                "agent": "a1",
                "seq": seq,
                "ts": time.time_ns(),
                "ttl": 60.0,
                "records": records,
            }
        )
        for seq in range(1, megabytes + 1)
    ]


async def _fill(settings: Settings, node: str, kind: str, payloads: list[bytes]) -> None:
    nc = await nats.connect(settings.nats.url)
    js = nc.jetstream()
    await ensure_stream(js, settings)
    subject = Subjects(settings.subject_prefix).event(CLUSTER, node, kind)
    for payload in payloads:
        await js.publish(subject, payload)
    await nc.close()


async def _drained(settings: Settings) -> bool:
    nc = await nats.connect(settings.nats.url)
    try:
        info = await nc.jetstream().consumer_info(settings.aggregator.stream, settings.aggregator.durable)
        return info.num_pending == 0 and info.num_ack_pending == 0
    except nats.js.errors.NotFoundError:
        return False
    finally:
        await nc.close()


def _vm_hwm(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


async def _run(
    label: str, node: str, kind: str, payloads: list[bytes], env_extra: dict[str, str]
) -> tuple[int, float]:
    """(peak RSS, seconds to drain) of a fresh aggregator reading ``payloads`` from a fresh stream."""
    with tempfile.TemporaryDirectory(prefix="ranksight-hostile-") as tmp:
        server = NatsServer(Path(tmp) / "nats").start()
        try:
            settings = _settings(Path(tmp) / "state", server.url)
            await _fill(settings, node, kind, payloads)
            env = {k: v for k, v in os.environ.items() if not k.startswith("RANKSIGHT_")}
            env.update(RANKSIGHT_NATS__URL=server.url, RANKSIGHT_STATE_DIR=str(settings.state_dir),
                       RANKSIGHT_CLUSTER=CLUSTER, RANKSIGHT_AGGREGATOR__HTTP__PORT="0", **env_extra)  # fmt: skip
            started = time.monotonic()
            command = [sys.executable, "-m", "ranksight.cli", "aggregator"]
            proc = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)  # noqa: ASYNC220 - once per run
            try:
                await asyncio.sleep(1.0)
                while not await _drained(settings):
                    if proc.poll() is not None:
                        raise SystemExit(f"{label}: the aggregator exited with {proc.returncode}")
                    await asyncio.sleep(0.5)
                elapsed = time.monotonic() - started
                await asyncio.sleep(1.0)  # the last batch's live state and tick
                return _vm_hwm(proc.pid), elapsed
            finally:
                proc.terminate()
                proc.wait(30)
        finally:
            server.stop()


async def main(args: argparse.Namespace) -> None:
    limits = IngestSettings()
    print(f"limits: fetch_max_bytes {limits.fetch_max_bytes / MiB:.0f} MiB, dead_letter_payload_bytes "
          f"{limits.dead_letter_payload_bytes} B; target: peak RSS < 1024 MiB")  # fmt: skip
    base, _ = await _run("baseline", "evil", "gpu", [], {})
    print(f"baseline (empty stream): peak RSS {base / MiB:.0f} MiB")
    burst = _malformed(args.malformed, args.malformed_kb * 1024)
    size = sum(map(len, burst)) / MiB
    peak, took = await _run("burst", "evil", "gpu", burst, {})
    print(f"burst: {args.malformed} malformed messages ({size:.0f} MiB) dead-lettered in {took:.1f} s: peak RSS "
          f"{peak / MiB:.0f} MiB ({peak / base:.2f} x baseline, +{(peak - base) / MiB:.0f} MiB)")  # fmt: skip
    backlog = _backlog(args.backlog_mb, args.payload)
    size = sum(map(len, backlog)) / MiB
    runs = [("backlog", {})]
    if args.unbounded:
        runs.append(
            (
                "backlog, fetch byte bound lifted",
                {"RANKSIGHT_AGGREGATOR__INGEST__FETCH_MAX_BYTES": str(1 << 30)},
            )
        )
    for label, extra in runs:
        kind = "ras_event" if args.payload == "strings" else "gpu"
        peak, took = await _run(label, "n1", kind, backlog, extra)
        print(f"{label}: {size:.0f} MiB of valid {args.payload} envelopes ingested in {took:.1f} s: peak RSS {peak / MiB:.0f} MiB "
              f"({peak / base:.2f} x baseline, +{(peak - base) / MiB:.0f} MiB)")  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--malformed", type=int, default=10_000)
    parser.add_argument("--malformed-kb", type=int, default=60)
    parser.add_argument("--backlog-mb", type=int, default=1024)
    parser.add_argument("--payload", choices=["gpu", "strings"], default="gpu", help="what the backlog holds")
    parser.add_argument(
        "--unbounded", action="store_true", help="also run the backlog with the fetch byte bound lifted"
    )
    asyncio.run(main(parser.parse_args()))
