"""A node silent past ``node_forget_after_s`` leaves nothing in any live-state tracker; its history rows stay.

Messages of every kind go through the real store (a real DuckDB file) and then into live state, as in the aggregator;
the check walks everything live state holds, so a tracker added later that keeps per-node state fails it too.
"""

from __future__ import annotations

import dataclasses
import gc
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack

from ranksight.aggregator.ingest.pipeline import Incoming
from ranksight.aggregator.ingest.settings import IngestSettings
from ranksight.aggregator.state import NS, LiveState
from ranksight.aggregator.store import Store
from ranksight.schemas.codec import decode_event
from ranksight.schemas.records import RECORD_KINDS
from ranksight.schemas.subjects import Subjects

SUBJECTS = Subjects()
NOW = time.time_ns() // 1000 * 1000
GHOST, KEEPER = "ghost-node-7", "keeper-node"
FORGET_AFTER_S = 100
FIRST_TICK_S = 20  # the ghost is gone by then (gone_after_s=10)
TTL_S = 2.0 * FIRST_TICK_S  # every kind still live at the first tick, whatever the order of RECORD_KINDS


def records(kind: str, node: str, peer: str) -> list[dict[str, Any]]:
    """One realistic record of ``kind`` sent by ``node`` (``peer``: the other node, for probes)."""
    return {
        "heartbeat": [{"hostname": node, "version": "1", "pid": 1, "started_ns": 1}],
        "gpu_probe": [{"index": 0, "status": "ok", "name": "MI300X", "tflops_bf16": 900.0}],
        "ras": [{"format": "json", "health": "ok", "endpoint": f"{node}:28028", "gpus": 8,
                 "communicators": [{"hash": "c0", "size": 8, "status": "RUNNING"}]}],
        "ras_event": [{"event": "TRACE", "endpoint": f"{node}:28028", "host": node}],
        "inspector": [{"comm_id": "c0", "rank": 0, "n_ranks": 8, "hostname": node, "pid": 1, "op_kind": "coll",
                       "op": "AllReduce", "sn": 1, "msg_size_bytes": 1 << 20, "exec_time_us": 10.0,
                       "dump_ts_us": NOW // 1000}],
        "inspector_summary": [{"window_start_us": NOW // 1000 // 5_000_000 * 5_000_000, "window_us": 5_000_000,
                               "slice_us": 500_000, "comm_id": "c0", "rank": 0, "n_ranks": 8, "hostname": node,
                               "pid": 1, "op_kind": "coll", "op": "AllReduce", "size_bucket": 1 << 20, "count": 1,
                               "bytes": 1 << 20, "timed": 1, "exec_sum_us": 10.0, "sn_first": 1, "sn_last": 1,
                               "last_dump_ts_us": NOW // 1000, "slice_index": [0], "slice_count": [1],
                               "slice_exec_sum_us": [10.0], "slice_exec_min_us": [10.0], "slice_sn_lo": [1],
                               "slice_sn_lo_ts_us": [NOW // 1000], "slice_sn_hi": [1],
                               "slice_sn_hi_ts_us": [NOW // 1000]}],
        "inspector_dump_stats": [{"comm_id": "c0", "rank": 0, "n_ranks": 8, "hostname": node, "pid": 1,
                                  "dump_ts_us": NOW // 1000, "format_version": "v4.3", "coll_records": 1,
                                  "coll_dropped_total": 2, "coll_dropped_since_last_dump": 2, "p2p_records": 0,
                                  "p2p_dropped_total": 0, "p2p_dropped_since_last_dump": 0}],
        "ras_diagnostics": [{"status": "ok", "endpoint": f"{node}:28028", "host": node, "pid": 1, "peers": 8,
                             "findings": [{"tag": "info", "check": "ECC", "kind": "ecc_uncorrected", "text": "ECC: x",
                                           "comm": "0xc0", "ranks": [1], "ranks_total": 1, "hosts": [node]}]}],
        "inspector_metrics": [{"source": "otlp", "shape": "device", "hostname": node, "gpu": "GPU0",
                               "coll_total": 10, "coll_dropped_total": 1}],
        "gpu": [{"index": 0, "name": "MI300X", "throttled": True}],
        "nic": [{"name": "mlx5_0/1", "kind": "rdma", "link_flaps": 1, "congestion_per_s": 5.0}],
        "probe": [{"src": node, "dst": peer, "dst_addr": "10.0.0.2", "upload_bps": 1e9, "download_bps": 1e9}],
        "probe_endpoint": [{"addrs": ["10.0.0.1"], "port": 5201}],
        "app": [{"event": "start", "job_id": "job-1", "rank": 0 if node == GHOST else 1, "pid": 1, "n": 1,
                 "client_ts": NOW, "timeout_s": 30.0, "initial_timeout_s": 60.0}],
        "gpu_xid": [{"kind": "xid", "code": 79, "pci": "0000:3b:00", "message": "GPU has fallen off the bus."}],
    }[kind]  # fmt: skip


def message(kind: str, node: str, peer: str, seq: int, recv_ns: int) -> Incoming:
    env = {"type": f"ranksight.ev.v1.{kind}", "cluster": "c", "node": node, "agent": f"{node}-inc", "seq": seq,
           "ts": recv_ns, "ttl": TTL_S, "records": records(kind, node, peer)}  # fmt: skip
    return Incoming(SUBJECTS.event("c", node, kind), msgpack.packb(env), recv_ns)


def every_kind(node: str, peer: str, recv_ns: int) -> list[Incoming]:
    # the GPU probe first: a probe result received while the node runs a job (fresh RAS data) is not kept
    kinds = ["gpu_probe", *(k for k in RECORD_KINDS if k != "gpu_probe")]
    return [message(kind, node, peer, seq, recv_ns + seq * NS) for seq, kind in enumerate(kinds, 1)]


def mentions(obj: Any, name: str, path: str = "state", seen: set[int] | None = None) -> Iterator[str]:
    """Paths of every string inside ``obj`` (containers, dataclasses, models, structs) that contains ``name``."""
    seen = set() if seen is None else seen
    if isinstance(obj, str):
        if name in obj:
            yield path
        return
    if obj is None or isinstance(obj, int | float | bytes | type) or id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield from mentions(key, name, f"{path}[key {key!r}]", seen)
            yield from mentions(value, name, f"{path}[{key!r}]", seen)
    elif isinstance(obj, list | tuple | set | frozenset) or type(obj).__name__ == "deque":
        for i, item in enumerate(obj):
            yield from mentions(item, name, f"{path}[{i}]", seen)
    elif hasattr(obj, "__struct_fields__"):  # msgspec records
        for field in obj.__struct_fields__:
            yield from mentions(getattr(obj, field), name, f"{path}.{field}", seen)
    elif dataclasses.is_dataclass(obj) or hasattr(obj, "__dict__"):
        for attr, value in vars(obj).items():
            yield from mentions(value, name, f"{path}.{attr}", seen)


def feed(store: Store, state: LiveState, batch: list[Incoming]) -> None:
    result = store.commit_batch(batch)
    assert result.dead_letters == 0
    for env, recv_ns in result.accepted:
        state.observe(env, recv_ns)


def test_every_tracker_forgets_a_silent_node_and_history_keeps_it(tmp_path: Path) -> None:
    store = Store(tmp_path / "db.duckdb", SUBJECTS, IngestSettings(node_forget_after_s=FORGET_AFTER_S))
    store.open()
    try:
        state = LiveState(gone_after_s=10, forget_after_s=FORGET_AFTER_S)
        feed(store, state, every_kind(GHOST, KEEPER, NOW) + every_kind(KEEPER, GHOST, NOW))
        state.tick(NOW + FIRST_TICK_S * NS)
        # every tracker holds something of the ghost now (so the check below can fail for each)
        holding = [type(t).__name__ for t in state.trackers if any(mentions(t, GHOST))]
        assert holding == [type(t).__name__ for t in state.trackers]
        assert ("c", GHOST) in state.last_seen_ns

        # the keeper stays in touch; the ghost stays silent past the horizon
        feed(store, state, [message("heartbeat", KEEPER, GHOST, 100, NOW + 90 * NS)])
        last_kind_s = len(RECORD_KINDS)  # every_kind receives one kind a second
        state.tick(NOW + (FORGET_AFTER_S + last_kind_s + 1) * NS)

        assert list(mentions(state, GHOST)) == []
        assert ("c", KEEPER) in state.nodes.nodes and ("c", KEEPER) in state.last_seen_ns
        for kind in RECORD_KINDS:  # history keeps every row of the ghost
            count = store.con.execute(f"SELECT count(*) FROM {kind} WHERE node = ?", [GHOST]).fetchone()
            assert count == (1,), kind
    finally:
        store.close_connection()
        store.shutdown()


def test_forgotten_fake_nodes_give_their_memory_back() -> None:
    """Many short-lived fake nodes: once forgotten, live state is back near its size before them."""
    state = LiveState(gone_after_s=10, forget_after_s=FORGET_AFTER_S)
    envs = [
        decode_event(msgpack.packb({"type": f"ranksight.ev.v1.{kind}", "cluster": "c", "node": f"fake-{i}",
                                    "agent": f"fake-{i}-inc", "seq": 1, "ts": NOW, "ttl": 10.0,
                                    "records": records(kind, f"fake-{i}", "peer")}))
        for i in range(2000) for kind in ("heartbeat", "gpu", "nic", "probe", "probe_endpoint", "gpu_probe")
    ]  # fmt: skip
    tracemalloc.start()
    try:
        state.tick(NOW)
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for env in envs:
            state.observe(env, NOW)
        state.tick(NOW + NS)
        held = tracemalloc.get_traced_memory()[0] - before
        state.tick(NOW + (FORGET_AFTER_S + 1) * NS)
        gc.collect()  # a full collection also empties the tuple free lists (freed keys parked there, not leaked)
        left = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held > 1_000_000  # the 2000 nodes' state
    assert left < held * 0.01, (held, left)
