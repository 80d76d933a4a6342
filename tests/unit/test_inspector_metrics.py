"""The Inspector plugin's Prometheus textfiles and OTLP/HTTP JSON exports parsed into ``inspector_metrics`` records:
on the writers' own output for real operations (``tests/inspector_exports.py``), on the upstream and RCCL docs'
samples, and on hostile input."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
from msgspec.structs import replace

from ranksight.agent.collectors.inspector.metrics import (
    InspectorMetricsError,
    as_operations,
    parse_otlp,
    parse_prom,
    size_lower_bound,
)
from ranksight.agent.collectors.inspector.promfiles import PromFiles
from ranksight.agent.collectors.inspector.senders import Sender, SenderFinder, world_of
from ranksight.agent.collectors.inspector.summary import Summarizer
from ranksight.schemas.records import InspectorMetricsRecord
from tests.conftest import FIXTURES
from tests.inspector_exports import NOW_US, last_dump, render, source_ops

FILES = render()
BY_NAME = {p.name: data for p, data in FILES.items()}
PROM = BY_NAME["nccl_2.32_prom_from_2.28.9_vm-pid3027.prom"]
PROM_2_29 = BY_NAME["nccl_2.29.3_prom_from_2.28.9_vm-pid3027.prom"]
AGGREGATED = BY_NAME["nccl_2.32.3_otlp_aggregated_from_2.28.9_vm-pid3027.json"]
VERBOSE = BY_NAME["nccl_2.32.3_otlp_verbose_from_2.28.9_vm-pid3027.json"]


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


def test_the_2_29_textfile_gives_each_sampled_operation_with_its_rank() -> None:
    """The per-operation textfile of 2.29.3 - 2.29.7 (no ``version`` label): one ``op`` record per communicator's
    latest operation, with its rank, communicator id, sequence number and the write time to the second."""
    records, errors = parse_prom(PROM_2_29)
    assert errors == []
    [source] = last_dump(source_ops())
    [r] = records
    assert (r.source, r.shape, r.format_version, r.job_id, r.hostname, r.gpu) == ("prom", "op", None, "4242", "vm",
                                                                                  "GPU0")  # fmt: skip
    assert (r.comm_id, r.rank, r.n_ranks, r.n_nodes, r.op_kind, r.op, r.sn, r.size_range) == (
        source.comm_id, 0, 4, 4, "coll", source.op, source.sn, "1.00MB")  # fmt: skip
    assert r.ts_us == source.dump_ts_us // 1_000_000 * 1_000_000
    assert (r.exec_time_us, r.busbw_gbs, r.algobw_gbs) == tuple(
        float(f"{v:.6g}") for v in (source.exec_time_us, source.busbw_gbs, source.algobw_gbs)
    )


@pytest.mark.parametrize("version", ["2.29.3", "2.30.7"])
def test_the_real_plugins_textfiles(version: str) -> None:
    """What the unmodified plugins wrote (fixtures/inspector/real-plugin-<version>-prom, ``tests/real_plugin_prom.py``:
    a job of three communicators per process, the second dump): 2.29.3 one sampled operation per communicator with its
    rank and sequence number, 2.30.7 one ``v5.1`` bucket per communicator; each bandwidth consistent with the
    collective's bus factor where the textfile has both."""
    [path] = (FIXTURES / f"inspector/real-plugin-{version}-prom").glob("*.prom")
    records, errors = parse_prom(path.read_bytes())
    assert errors == [] and len(records) == 3
    # one process's file: both processes' CUDA stand-ins report one device UUID, whichever wrote last is in it
    [(host, gpu, job)] = {(r.hostname, r.gpu, r.job_id) for r in records}
    assert host in ("node000", "node001") and (gpu, job) == ("GPU0", None)
    assert len({r.comm_name if version == "2.30.7" else r.comm_id for r in records}) == 3
    if version == "2.29.3":
        assert {(r.shape, r.rank, r.format_version) for r in records} == {("op", 0, None)}
        assert all(r.sn and r.ts_us and r.ts_us % 1_000_000 == 0 and r.size_range for r in records)
        allgather = next(r for r in records if r.op == "AllGather")
        assert allgather.n_ranks == 2 and allgather.algobw_gbs
        assert allgather.busbw_gbs == pytest.approx(allgather.algobw_gbs * (2 - 1) / 2, rel=1e-5)
    else:
        assert {(r.shape, r.rank, r.format_version, r.algo_proto) for r in records} == {
            ("bucket", None, "v5.1", "RING_SIMPLE")
        }
        assert all(r.size_lo_bytes and r.exec_time_us is not None for r in records)


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


def _verbose_records() -> list[InspectorMetricsRecord]:
    records, _, _ = parse_otlp(VERBOSE)
    return records


def test_verbose_operations_of_a_known_rank_are_the_dump_records() -> None:
    """Rank 0 of the 4-rank source job (pid 3027): each verbose point becomes the dump's record of the operation,
    but for what the export does not carry (the timing source) and the capture model it states (a drained ring)."""
    ops, rest = as_operations(_verbose_records(), 3027, Sender(3027, (0, 4)).rank_in)
    dumped = source_ops(12)
    assert [(r.shape, r.pid) for r in rest] == [("device", 3027)]  # the process's counters: its coverage
    assert [replace(op, capture_model="sampled", timing_source="kernel_gpu") for op in ops] == dumped
    # so the summaries the straggler engine reads are the dump's
    from_dump, from_otlp = Summarizer(), Summarizer()
    for op in dumped:
        from_dump.add(op)
    for op in ops:
        from_otlp.add(op)
    assert [replace(s, capture_model="sampled") for s in from_otlp.take()] == from_dump.take()


def test_verbose_operations_of_an_unknown_rank_stay_metrics_records() -> None:
    records = _verbose_records()
    for world in (None, (5, 8)):  # no launcher variables; a world larger than the communicator
        ops, rest = as_operations(records, 3027, Sender(3027, world).rank_in)
        assert ops == [] and rest == [replace(r, pid=3027) for r in records]
    unknown_comm = [replace(r, comm_id="unknown") for r in records]
    assert as_operations(unknown_comm, 3027, Sender(3027, (0, 4)).rank_in)[0] == []


@pytest.mark.parametrize(("env", "world"), [
    ({b"RANK": b"3", b"WORLD_SIZE": b"8", b"LOCAL_RANK": b"3"}, (3, 8)),
    ({b"OMPI_COMM_WORLD_RANK": b"1", b"OMPI_COMM_WORLD_SIZE": b"2"}, (1, 2)),
    ({b"PMI_RANK": b"0", b"PMI_SIZE": b"4"}, (0, 4)), ({b"SLURM_PROCID": b"7", b"SLURM_NTASKS": b"16"}, (7, 16)),
    ({b"RANK": b"x", b"WORLD_SIZE": b"8", b"SLURM_PROCID": b"2", b"SLURM_NTASKS": b"4"}, (2, 4)),
    ({b"RANK": b"8", b"WORLD_SIZE": b"8"}, None), ({b"RANK": b"1"}, None), ({}, None),
])  # fmt: skip
def test_the_launchers_rank_variables(env: dict[bytes, bytes], world: tuple[int, int] | None) -> None:
    assert world_of(env) == world


def test_a_senders_rank_in_a_communicator() -> None:
    sender = Sender(10, (3, 8))
    assert (sender.rank_in(8), sender.rank_in(1), sender.rank_in(4)) == (3, 0, None)
    assert Sender(10, None).rank_in(1) == 0 and Sender(10, None).rank_in(2) is None


def test_the_sender_of_a_connection_is_found_in_proc(tmp_path: Path) -> None:
    """A /proc laid out as Linux does: the client's socket (local port 40000 -> the receiver's 4318, established),
    the receiver's own end of it, and the process holding the client's."""
    (tmp_path / "net").mkdir()
    head = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    )
    rows = ["   0: 0100007F:10DE 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 111\n",
            "   1: 0100007F:9C40 0100007F:10DE 01 00000000:00000000 00:00000000 00000000  1000        0 222\n",
            "   2: 0100007F:10DE 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  1000        0 333\n"]  # fmt: skip
    (tmp_path / "net/tcp").write_text(head + "".join(rows))
    (tmp_path / "net/tcp6").write_text(head)
    for pid, inode, env in ((77, 333, b""), (4242, 222, b"RANK=1\0WORLD_SIZE=2\0")):
        (tmp_path / str(pid) / "fd").mkdir(parents=True)
        os.symlink(f"socket:[{inode}]", tmp_path / str(pid) / "fd" / "5")
        (tmp_path / str(pid) / "environ").write_bytes(env)
    now = [0.0]
    finder = SenderFinder(tmp_path, retry_s=10.0, clock=lambda: now[0])
    assert finder.find(40000, 4318) == Sender(4242, (1, 2))
    assert finder.find(40001, 4318) is None and finder.retry_at == 0  # no such connection (gone already)
    assert list(finder.known) == [4242]
    # a connection whose process the agent cannot see: after one search of every process, none for retry_s, but a
    # known sender is still found among the hints
    (tmp_path / "net/tcp").write_text(
        head + "".join(rows) + rows[1].replace("9C40", "9C41").replace("222", "444")
    )
    assert finder.find(40001, 4318) is None and finder.retry_at == 10.0
    os.symlink("socket:[444]", tmp_path / "77" / "fd" / "6")  # now visible, in a process never seen before
    assert finder.find(40001, 4318) is None  # not searched for yet
    assert finder.find(40000, 4318) == Sender(4242, (1, 2))
    now[0] = 10.0
    assert finder.find(40001, 4318) == Sender(77, None)


def test_a_229_textfile_read_mid_dump_gives_each_operation_once(tmp_path: Path) -> None:
    """The 2.29.x plugin truncates its textfile and writes it one communicator at a time: a look between two
    communicators finds part of the dump, the next all of it; each operation is given once. A ``v5.1`` file rewritten
    with the same buckets (a one-rank communicator's bucket is the same every dump) gives them again: they carry no
    sequence number or time, each dump's are new measurements."""
    [real] = (FIXTURES / "inspector/real-plugin-2.29.3-prom").glob("*.prom")
    lines = real.read_bytes().splitlines(keepends=True)
    path = tmp_path / real.name
    files = PromFiles(tmp_path, 1 << 20)
    path.write_bytes(b"".join(lines[:3]))  # the first communicator's three metrics
    first = files.poll()
    path.write_bytes(b"".join(lines))  # the whole dump
    os.utime(path, ns=(1, 2))
    rest = files.poll()
    assert len(first) == 1 and len(rest) == 2 and first[0] not in rest
    assert {r.comm_id for r in first + rest} == {r.comm_id for r in parse_prom(real.read_bytes())[0]}
    [buckets] = (FIXTURES / "inspector/real-plugin-2.30.7-prom").glob("*.prom")
    path.unlink()
    again = tmp_path / buckets.name
    again.write_bytes(buckets.read_bytes())
    assert len(files.poll()) == 3
    os.utime(again, ns=(3, 4))  # the next dump, the same values
    assert len(files.poll()) == 3
