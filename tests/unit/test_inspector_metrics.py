"""The Inspector plugin's Prometheus textfiles and OTLP/HTTP JSON exports parsed into ``inspector_metrics`` records:
on the writers' own output for real operations (``tests/inspector_exports.py``), on the upstream and RCCL docs'
samples, and on hostile input."""

from __future__ import annotations

import math

import pytest

from ranksight.agent.collectors.inspector.metrics import (
    InspectorMetricsError,
    parse_otlp,
    parse_prom,
    size_lower_bound,
)
from tests.conftest import FIXTURES
from tests.inspector_exports import NOW_US, render, source_ops

FILES = render()
PROM, AGGREGATED, VERBOSE = (
    FILES[p] for p in sorted(FILES, key=lambda p: ("prom" not in p.name, "verbose" in p.name))
)


def _expected_buckets() -> dict[tuple[str, str], tuple[float, float, int]]:
    """(collective, size range) -> (mean exec, geometric-mean busbw, newest time) of the source operations."""
    groups: dict[tuple[str, str], list] = {}
    for op in source_ops():
        size = {4194304: "4-5MB", 262144: "256-257KB", 1048576: "1-2MB"}[op.msg_size_bytes]
        groups.setdefault((op.op, size), []).append(op)
    return {key: (sum(o.exec_time_us for o in ops) / len(ops),
                  math.exp(sum(math.log(o.busbw_gbs) for o in ops) / len(ops)), max(o.dump_ts_us for o in ops))
            for key, ops in groups.items()}  # fmt: skip


def test_fixtures_are_what_the_generator_writes() -> None:
    assert {path: path.read_bytes() for path in FILES} == FILES


def test_prom_textfile_buckets_and_device_counters() -> None:
    records, errors = parse_prom(PROM)
    assert errors == []
    buckets = {(r.op, r.size_range): r for r in records if r.shape == "bucket"}
    expected = _expected_buckets()
    assert set(buckets) == set(expected)
    for key, (execs, bus, _) in expected.items():
        r = buckets[key]
        assert r.exec_time_us == float(f"{execs:.6g}") and r.busbw_gbs == float(f"{bus:.6g}")
        assert (r.job_id, r.hostname, r.gpu, r.n_ranks, r.n_nodes, r.op_kind) == (
            "4242",
            "vm",
            "GPU0",
            4,
            4,
            "coll",
        )
    [device] = [r for r in records if r.shape == "device"]
    assert (device.coll_total, device.coll_dropped_total, device.p2p_total) == (120, 7, 0)


@pytest.mark.parametrize(
    ("name", "buckets", "first"),
    [
        (
            "nccl_2.30_readme_prom_v5.1_coll_and_p2p.prom",
            2,
            ("coll", "AllReduce", "4-5GB", 4 << 30, "DP Group 0"),
        ),
        (
            "rccl_docs_prom_v5.1_cluster_label_with_help_type.prom",
            1,
            ("coll", "AllReduce", "1-2MB", 1 << 20, "unknown"),
        ),
    ],
)
def test_docs_samples_of_nccl_and_rccl(name: str, buckets: int, first: tuple[object, ...]) -> None:
    records, errors = parse_prom((FIXTURES / "inspector" / name).read_bytes())
    assert errors == [] and len(records) == buckets
    r = records[0]
    assert (r.op_kind, r.op, r.size_range, r.size_lo_bytes, r.comm_name) == first
    assert r.exec_time_us is not None and r.busbw_gbs is not None


def test_otlp_aggregated_buckets_carry_the_job_and_their_newest_time() -> None:
    records, resource, skipped = parse_otlp(AGGREGATED)
    assert skipped == [] and resource == {"service.name": "nccl-inspector", "slurm.job.id": "4242"}
    expected = _expected_buckets()
    assert {(r.op, r.size_range) for r in records} == set(expected)
    for r in records:
        execs, bus, newest = expected[r.op or "", r.size_range or ""]
        assert r.exec_time_us == pytest.approx(execs, rel=1e-15) and r.busbw_gbs == pytest.approx(
            bus, rel=1e-15
        )
        assert (r.ts_us, r.job_id, r.source, r.shape, r.format_version) == (
            newest,
            "4242",
            "otlp",
            "bucket",
            "v5.1",
        )


def test_otlp_verbose_gives_every_operation_exactly() -> None:
    records, _, skipped = parse_otlp(VERBOSE)
    ops = [r for r in records if r.shape == "op"]
    source = source_ops()[:12]
    assert skipped == [] and len(ops) == len(source)
    by_sn = {(r.op, r.sn): r for r in ops}
    for op in source:
        r = by_sn[op.op, op.sn]
        assert (r.comm_id, r.msg_size_bytes, r.exec_time_us, r.busbw_gbs, r.algobw_gbs, r.ts_us) == (
            op.comm_id, op.msg_size_bytes, op.exec_time_us, op.busbw_gbs, op.algobw_gbs, op.dump_ts_us)  # fmt: skip
    [device] = [r for r in records if r.shape == "device"]
    assert (device.coll_dropped_total, device.ts_us) == (7, NOW_US)


@pytest.mark.parametrize(("label", "lower"), [("0B", 0), ("1-2B", 1), ("256-257KB", 256 << 10), ("4-5GB", 4 << 30),
                                              ("2-3TB", 2 << 40), ("4GB", None), ("x", None)])  # fmt: skip
def test_size_range_lower_bound(label: str, lower: int | None) -> None:
    assert size_lower_bound(label) == lower


def test_hostile_input_is_reported_never_raised_mid_file() -> None:
    text = (b'# HELP x\nnccl_bus_bandwidth_gbs{node="a",gpu="GPU0",collective="AllReduce"} 1\n'
            b"garbage line\n"
            b'some_other_metric{a="b"} 2\n'
            b'nccl_p2p_total{node="a",gpu="GPU0"} 1e30\n'
            b'nccl_bus_bandwidth_gbs{node="' + b"x" * 5000 + b'"} 1\n'
            b'nccl_bus_bandwidth_gbs{node="a\\"b",gpu="GPU1",collective="AllReduce"} nan\n')  # fmt: skip
    records, errors = parse_prom(text)
    assert [e.split(":")[0] for e in errors] == ["line 3", "line 4", "line 6"]
    assert {r.hostname for r in records} == {"a", 'a"b'}
    assert all(r.p2p_total is None for r in records)  # 1e30 is no int64 counter: not kept
    assert next(r for r in records if r.gpu == "GPU1").busbw_gbs is None  # NaN is no value
    with pytest.raises(InspectorMetricsError, match="not an OTLP"):
        parse_otlp(b'{"resourceMetrics": 5}')
    with pytest.raises(InspectorMetricsError, match="not an OTLP"):
        parse_otlp(b"[" * 100_000)
    records, _, skipped = parse_otlp(
        b'{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"x"},'
        b'{"name":"nccl_p2p_total","gauge":{"dataPoints":[{"attributes":[]}]}}]}]}]}'
    )
    assert records == [] and len(skipped) == 2
