"""Inspector dump markers (v4.1+) become drop counters per process and communicator: live state, coverage and
/metrics, fed from the real plugin's dumps rewritten in the v4.3 layout (``tests/inspector_layouts.py``)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from ranksight.agent.collectors.inspector.metrics import parse_prom
from ranksight.aggregator.device_jobs import device_jobs
from ranksight.aggregator.http.metrics import ClusterCollector, _Families
from ranksight.aggregator.state import NS, LiveState
from ranksight.formats.inspector import parse_lines
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import InspectorDumpStatsRecord
from tests.inspector_exports import render
from tests.inspector_layouts import fixture_path

RECV = 1_800_000_000 * NS


def _markers(lines: list[bytes] | None = None) -> list[InspectorDumpStatsRecord]:
    stats: list[InspectorDumpStatsRecord] = []
    lines = fixture_path("v4.3").read_bytes().splitlines() if lines is None else lines
    list(parse_lines(lines, lambda e: None, on_stats=stats.append))
    return stats


# the v4.4 writer's proxy counters of a marker, as the layout fixture has them (proxy tracing on, nothing lost) ...
_PROXY_NOTHING_LOST = (b'"proxy_ops_dropped_total":0,"proxy_ops_dropped_since_last_dump":0,'
                       b'"proxy_steps_overwritten_total":0,"proxy_steps_overwritten_since_last_dump":0,'
                       b'"proxy_output_mode":"flat","proxy_segment_step_capacity":8,'
                       b'"proxy_pxn_skipped_process_total":0')  # fmt: skip
# ... and as its last marker is rewritten here: 3 operations lost outside the ring, 11 steps overwritten, 2 PXN skips
_PROXY_LOST = (b'"proxy_ops_dropped_total":3,"proxy_ops_dropped_since_last_dump":3,'
               b'"proxy_steps_overwritten_total":11,"proxy_steps_overwritten_since_last_dump":11,'
               b'"proxy_output_mode":"flat","proxy_segment_step_capacity":8,'
               b'"proxy_pxn_skipped_process_total":2')  # fmt: skip


def _envelope(records: list[InspectorDumpStatsRecord], seq: int = 1) -> Envelope:
    return Envelope(type="ranksight.ev.v1.inspector_dump_stats", cluster="c", node="vm", agent="a", seq=seq,
                    ts=RECV, ttl=30.0, records=records)  # fmt: skip


def test_drops_per_process_and_communicator_count_each_marker_once() -> None:
    state, markers = LiveState(), _markers()
    state.observe(_envelope(markers[:20]), RECV)
    state.observe(_envelope(markers[:20], seq=2), RECV)  # redelivered: nothing counted twice
    state.observe(_envelope(markers[20:], seq=3), RECV + NS)
    state.tick(RECV + 2 * NS)
    comms = state.inspector_drops.coverage("c")
    assert set(comms) == {("vm", 3027, markers[0].comm_id)}
    drops = comms["vm", 3027, markers[0].comm_id]
    # the fixture's markers: 60 dumps of one record each; 5 drops before dump 3, 4 more before dump 7
    assert (drops.dumps, drops.records, drops.dropped, drops.dropped_total) == (60, 60, 9, 9)
    assert abs(drops.dropped_share - 9 / 69) < 1e-12
    state.tick(RECV + 40 * NS)  # past the TTL: no longer live, still there for coverage
    assert not state.inspector_drops.live() and state.inspector_drops.coverage("c")


def test_drops_in_metrics() -> None:
    state = LiveState()
    state.observe(_envelope(_markers()), RECV)
    state.tick(RECV + NS)
    collector = ClusterCollector(cast(Any, SimpleNamespace(state=state)), cast(Any, None), max_series=100)
    families = _Families(100)
    collector._inspector_drops(families, device_jobs(state))
    dropped = families.families["ranksight_inspector_dropped_operations"].samples
    by_kind = {s.labels["op_kind"]: s.value for s in dropped}
    assert by_kind == {"coll": 9.0, "p2p": 0.0}  # no proxy series: the plugin's proxy tracing was off
    assert dropped[0].labels["hostname"] == "vm" and dropped[0].labels["pid"] == "3027"
    assert [s.value for s in families.families["ranksight_inspector_dumped_records"].samples] == [60.0]


def test_the_v44_proxy_counters_are_kept_and_in_metrics() -> None:
    """v4.4 markers (proxy tracing on) also count proxy operations lost outside the ring and proxy steps overwritten
    in it: kept in the record (history) and exported as op_kind proxy_op and proxy_step."""
    lines = fixture_path("v4.4").read_bytes().splitlines()
    last = max(i for i, line in enumerate(lines) if b'"dump_stats"' in line)
    assert lines[last].count(_PROXY_NOTHING_LOST) == 1
    lines[last] = lines[last].replace(_PROXY_NOTHING_LOST, _PROXY_LOST)
    markers = _markers(lines)
    assert {(m.proxy_steps_overwritten_total, m.proxy_pxn_skipped_process_total) for m in markers[:-1]} == {
        (0, 0)
    }
    latest = markers[-1]
    assert (latest.proxy_ops_dropped_total, latest.proxy_ops_dropped_since_last_dump) == (3, 3)
    assert (latest.proxy_steps_overwritten_total, latest.proxy_steps_overwritten_since_last_dump) == (11, 11)
    assert latest.proxy_pxn_skipped_process_total == 2
    state = LiveState()
    state.observe(_envelope(markers), RECV)
    state.tick(RECV + NS)
    collector = ClusterCollector(cast(Any, SimpleNamespace(state=state)), cast(Any, None), max_series=100)
    families = _Families(100)
    collector._inspector_drops(families, device_jobs(state))
    dropped = families.families["ranksight_inspector_dropped_operations"].samples
    assert {s.labels["op_kind"]: s.value for s in dropped} == {
        "coll": 9.0,
        "p2p": 0.0,
        "proxy": 0.0,
        "proxy_op": 3.0,
        "proxy_step": 11.0,
    }


def test_gpu_counters_of_the_metric_outputs_in_metrics() -> None:
    """The plugin's per-GPU counters (Prometheus textfile stats, verbose OTLP), parsed from the writers' output."""
    state = LiveState()
    records, _ = parse_prom(next(data for path, data in render().items() if path.suffix == ".prom"))
    env = Envelope(type="ranksight.ev.v1.inspector_metrics", cluster="c", node="vm", agent="a", seq=1, ts=RECV,
                   ttl=30.0, records=records)  # fmt: skip
    state.observe(env, RECV)
    state.tick(RECV + NS)
    collector = ClusterCollector(cast(Any, SimpleNamespace(state=state)), cast(Any, None), max_series=100)
    families = _Families(100)
    collector._inspector_drops(families, device_jobs(state))
    samples = {(s.labels["gpu"], s.labels["op_kind"]): s.value
               for s in families.families["ranksight_inspector_gpu_dropped_operations"].samples}  # fmt: skip
    assert samples == {("GPU0", "coll"): 7.0, ("GPU0", "p2p"): 0.0}
    totals = [s.value for s in families.families["ranksight_inspector_gpu_operations"].samples]
    assert totals == [120.0, 0.0]
    state.tick(RECV + 60 * NS)
    assert not state.inspector_drops.live_gpus()
