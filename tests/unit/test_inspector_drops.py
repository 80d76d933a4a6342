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


def _markers() -> list[InspectorDumpStatsRecord]:
    stats: list[InspectorDumpStatsRecord] = []
    list(parse_lines(fixture_path("v4.3").read_bytes().splitlines(), lambda e: None, on_stats=stats.append))
    return stats


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
