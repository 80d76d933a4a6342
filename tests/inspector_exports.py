"""The Inspector plugin's metric outputs for given operations, byte for byte as its writers print them: the
Prometheus textfile of ``inspector_prom.cc`` (2.30 and later, and the per-operation one of 2.29.3 - 2.29.7) and the
OTLP/HTTP JSON body of ``inspector_otel.cc`` (NVIDIA/nccl ``plugins/profiler/inspector``; commits in
``fixtures/inspector/exports/PROVENANCE.md``).

What the writers do, restated: per GPU, the drained operations of every communicator go into buckets keyed (in this
order, which is also the output order) by ranks, nodes, the function's enum value, the message size's range lower
bound (the size divided by 1024 while >= 1024, at most to TB, floored, times the unit), the communicator name
(``unknown`` when unnamed) and, for collectives, ``<algo>_<proto>`` (``unknown`` parts when not set). A bucket's exec
time is the mean, its bandwidth the geometric mean of the positive values. The textfile prints ``%.6g`` values, labels
unescaped; the OTLP body groups points by metric name (sorted), prints ``setprecision(17)`` doubles and string
attributes, stamps aggregated points with the bucket's newest operation time. Verbose OTLP sends each operation with
``version`` v5.2, and the device counters.

``python tests/inspector_exports.py`` rewrites the committed fixtures of ``fixtures/inspector/exports/``.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from ranksight.formats.inspector import parse_op
from ranksight.schemas.records import InspectorRecord

FUNCS = ["Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce", "SendRecv", "Send", "Recv", "All2All",
         "AllGatherV"]  # fmt: skip  # ncclFunc_t order
UNITS = ["B", "KB", "MB", "GB", "TB"]
ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "fixtures/inspector/nccl-2.28.9-h100-4rank/vm-pid3027.log.gz"
TARGET = ROOT / "fixtures/inspector/exports"


def _range(size: int) -> tuple[int, str]:
    if size == 0:
        return 0, "0B"
    unit, value = 0, float(size)
    while value >= 1024.0 and unit < 4:
        value /= 1024.0
        unit += 1
    lower = max(1.0, math.floor(value))
    return int(lower) * 1024**unit, f"{lower:.0f}-{lower + 1:.0f}{UNITS[unit]}"


def _buckets(
    ops: Sequence[InspectorRecord], algo_proto: str
) -> list[tuple[tuple[object, ...], list[InspectorRecord]]]:
    buckets: dict[tuple[object, ...], list[InspectorRecord]] = {}
    for op in ops:
        lo, _ = _range(op.msg_size_bytes)
        name = op.comm_name or "unknown"
        key = (op.n_ranks, op.nnodes or 0, FUNCS.index(op.op), lo, name) + (
            (algo_proto,) if op.op_kind == "coll" else ()
        )
        buckets.setdefault(key, []).append(op)
    return sorted(buckets.items(), key=lambda item: item[0])


def _means(ops: Sequence[InspectorRecord]) -> tuple[float, float, int]:
    execs = sum(float(op.exec_time_us or 0) for op in ops) / len(ops)
    logs = [math.log(op.busbw_gbs) for op in ops if op.busbw_gbs and op.busbw_gbs > 0]
    return (math.exp(sum(logs) / len(logs)) if logs else 0.0), execs, max(op.dump_ts_us for op in ops)


def prom_text(ops: Sequence[InspectorRecord], node: str, gpu: str, job_id: str | None = None,
              algo_proto: str = "unknown_unknown", totals: tuple[int, int, int, int] | None = None) -> bytes:  # fmt: skip
    """One dump's ``nccl_inspector_metrics_<uuid>.prom`` (``totals``: the stats option's device counters)."""
    out = []
    job = job_id or "unknown"
    for kind in ("coll", "p2p"):
        for key, members in _buckets([op for op in ops if op.op_kind == kind], algo_proto):
            nranks, nnodes, func, lo, name = key[:5]
            bus, execs, _ = _means(members)
            labels = (f'version="v5.1",slurm_job_id="{job}",node="{node}",gpu="{gpu}",comm_name="{name}",'
                      f'n_nodes="{nnodes}",nranks="{nranks}",')  # fmt: skip
            size = _range(int(str(lo)))[1]
            if kind == "coll":
                labels += f'collective="{FUNCS[int(str(func))]}",message_size="{size}",algo_proto="{key[5]}"'
                out.append(f"nccl_bus_bandwidth_gbs{{{labels}}} {bus:.6g}\n")
                out.append(f"nccl_collective_exec_time_microseconds{{{labels}}} {execs:.6g}\n")
            else:
                labels += f'p2p_operation="{FUNCS[int(str(func))]}",message_size="{size}"'
                out.append(f"nccl_p2p_bus_bandwidth_gbs{{{labels}}} {bus:.6g}\n")
                out.append(f"nccl_p2p_exec_time_microseconds{{{labels}}} {execs:.6g}\n")
    if totals is not None:
        labels = f'version="v5.1",slurm_job_id="{job}",node="{node}",gpu="{gpu}"'
        for name, value in zip(("nccl_collectives_total", "nccl_collectives_dropped_total", "nccl_p2p_total",
                                "nccl_p2p_dropped_total"), totals, strict=True):  # fmt: skip
            out.append(f"{name}{{{labels}}} {value}\n")
    return "".join(out).encode()


def prom_text_2_29(
    ops: Sequence[InspectorRecord], gpu: str, job_id: str = "unknown", job_name: str = "unknown"
) -> bytes:
    """The 2.29.x textfile of one dump: per communicator, its latest sampled collective, three metrics whose labels are
    the communicator's cached ones, then the operation's (``timestamp``: the write time, UTC, to the second;
    ``message_size``: ``%zuB`` under 1 KiB, else ``%.2f`` of the largest unit)."""
    out = []
    for op in ops:
        value, unit = float(op.msg_size_bytes), 0
        while value >= 1024.0 and unit < 4:
            value /= 1024.0
            unit += 1
        size = f"{op.msg_size_bytes}B" if unit == 0 else f"{value:.2f}{UNITS[unit]}"
        when = datetime.fromtimestamp(op.dump_ts_us // 1_000_000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        labels = (f'comm_id="{op.comm_id}",hostname="{op.hostname}",rank="{op.rank}",slurm_job="{job_name}",'
                  f'slurm_job_id="{job_id}",nranks="{op.n_ranks}",n_nodes="{op.nnodes}",gpu_device_id="{gpu}",'
                  f'collective="{op.op}",coll_sn="{op.sn}",timestamp="{when}",message_size="{size}"')  # fmt: skip
        out.append(f"nccl_algorithm_bandwidth_gbs{{{labels}}} {op.algobw_gbs or 0.0:.6g}\n"
                   f"nccl_bus_bandwidth_gbs{{{labels}}} {op.busbw_gbs or 0.0:.6g}\n"
                   f"nccl_collective_exec_time_microseconds{{{labels}}} {float(op.exec_time_us or 0):.6g}\n")  # fmt: skip
    return "".join(out).encode()


def last_dump(ops: Sequence[InspectorRecord]) -> list[InspectorRecord]:
    """The operations of the last dump time among ``ops`` (the sampled plugin writes one per communicator)."""
    newest = max(op.dump_ts_us for op in ops)
    return [op for op in ops if op.dump_ts_us == newest and op.op_kind == "coll"]


_DESCRIPTIONS = {
    "nccl_bus_bandwidth_gbs": ("NCCL bus bandwidth for collective operations", "GB/s"),
    "nccl_collective_exec_time_microseconds": ("NCCL collective execution time", "us"),
    "nccl_collective_algobw_gbs": ("NCCL algorithm bandwidth for collective operations", "GB/s"),
    "nccl_p2p_bus_bandwidth_gbs": ("NCCL bus bandwidth for P2P operations", "GB/s"),
    "nccl_p2p_exec_time_microseconds": ("NCCL P2P execution time", "us"),
    "nccl_p2p_algobw_gbs": ("NCCL algorithm bandwidth for P2P operations", "GB/s"),
    "nccl_collectives_total": ("NCCL collectives enqueued into the inspector ring buffer", "1"),
    "nccl_collectives_dropped_total": (
        "NCCL collectives overwritten in the ring buffer before being dumped",
        "1",
    ),
    "nccl_p2p_total": ("NCCL P2P operations enqueued into the inspector ring buffer", "1"),
    "nccl_p2p_dropped_total": ("NCCL P2P operations overwritten in the ring buffer before being dumped", "1"),
}


def _json_str(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _attrs(pairs: Sequence[tuple[str, str]]) -> str:
    return '"attributes":[' + ",".join(
        f'{{"key":{_json_str(k)},"value":{{"stringValue":{_json_str(v)}}}}}' for k, v in pairs) + "]"  # fmt: skip


def otlp_body(ops: Sequence[InspectorRecord], node: str, gpu: str, resource: Sequence[tuple[str, str]],
              now_us: int, verbose: bool = False, algo_proto: str = "unknown_unknown",
              totals: tuple[int, int, int, int] = (0, 0, 0, 0)) -> bytes:  # fmt: skip
    """One export's POST body (``resource``: the resource attributes, in the plugin's order)."""
    points: list[tuple[str, list[tuple[str, str]], float, int]] = []
    names: tuple[str, ...]
    attrs: list[tuple[str, str]]  # name, attributes, value, time (µs)
    if verbose:
        for op in ops:
            kind = op.op_kind
            attrs = [("version", "v5.2"), ("node", node), ("gpu", gpu), ("comm_name", op.comm_name or "unknown"),
                     ("comm_id", op.comm_id), ("n_nodes", str(op.nnodes or 0)), ("nranks", str(op.n_ranks)),
                     (f"{kind}_msg_size_bytes", str(op.msg_size_bytes))]  # fmt: skip
            if kind == "coll":
                attrs += [("collective", op.op), ("coll_sn", str(op.sn)), ("algo_proto", algo_proto)]
                names = (
                    "nccl_bus_bandwidth_gbs",
                    "nccl_collective_exec_time_microseconds",
                    "nccl_collective_algobw_gbs",
                )
            else:
                attrs += [("p2p_operation", op.op), ("p2p_sn", str(op.sn)), ("p2p_peer", str(op.peer))]
                names = (
                    "nccl_p2p_bus_bandwidth_gbs",
                    "nccl_p2p_exec_time_microseconds",
                    "nccl_p2p_algobw_gbs",
                )
            for name, value in zip(names, (op.busbw_gbs, op.exec_time_us, op.algobw_gbs), strict=True):
                points.append((name, attrs, float(value or 0.0), op.dump_ts_us))
        device = [("version", "v5.1"), ("node", node), ("gpu", gpu)]
        for name, value in zip(("nccl_collectives_total", "nccl_collectives_dropped_total", "nccl_p2p_total",
                                "nccl_p2p_dropped_total"), totals, strict=True):  # fmt: skip
            points.append((name, device, float(value), now_us))
    else:
        for kind in ("coll", "p2p"):
            for key, members in _buckets([op for op in ops if op.op_kind == kind], algo_proto):
                nranks, nnodes, func, lo, comm = key[:5]
                bus, execs, ts = _means(members)
                size = _range(int(str(lo)))[1]
                attrs = [("gpu", gpu), ("comm_name", str(comm)), ("version", "v5.1"), ("node", node),
                         ("n_nodes", str(nnodes)), ("nranks", str(nranks)), ("message_size", size)]  # fmt: skip
                if kind == "coll":
                    attrs += [("collective", FUNCS[int(str(func))]), ("algo_proto", str(key[5]))]
                    names = ("nccl_bus_bandwidth_gbs", "nccl_collective_exec_time_microseconds")
                else:
                    attrs += [("p2p_operation", FUNCS[int(str(func))])]
                    names = ("nccl_p2p_bus_bandwidth_gbs", "nccl_p2p_exec_time_microseconds")
                points.append((names[0], attrs, bus, ts))
                points.append((names[1], attrs, execs, ts))
    by_metric: dict[str, list[tuple[list[tuple[str, str]], float, int]]] = {}
    for name, attrs, value, ts in points:
        if math.isfinite(value):
            by_metric.setdefault(name, []).append((attrs, value, ts))
    metrics = []
    for name in sorted(by_metric):
        description, unit = _DESCRIPTIONS[name]
        data = ",".join(f'{{{_attrs(a)},"timeUnixNano":"{(ts or now_us) * 1000}","asDouble":{value:.17g}}}'
                        for a, value, ts in by_metric[name])  # fmt: skip
        metrics.append(f'{{"name":{_json_str(name)},"description":{_json_str(description)},"unit":{_json_str(unit)},'
                       f'"gauge":{{"dataPoints":[{data}]}}}}')  # fmt: skip
    return ('{"resourceMetrics":[{"resource":{' + _attrs(resource) + '},"scopeMetrics":[{"scope":{"name":'
            '"nccl-inspector"},"metrics":[' + ",".join(metrics) + "]}]}]}").encode()  # fmt: skip


def source_ops(count: int = 120) -> list[InspectorRecord]:
    with gzip.open(SOURCE, "rb") as fh:
        return [parse_op(line) for line in fh.read().splitlines()[:count]]


RESOURCE = [("service.name", "nccl-inspector"), ("slurm.job.id", "4242")]
NOW_US = 1795505135000000


def render() -> dict[Path, bytes]:
    ops = source_ops()
    return {
        TARGET / "nccl_2.32_prom_from_2.28.9_vm-pid3027.prom": prom_text(ops, "vm", "GPU0", "4242",
                                                                        totals=(120, 7, 0, 0)),
        TARGET / "nccl_2.29.3_prom_from_2.28.9_vm-pid3027.prom": prom_text_2_29(last_dump(ops), "GPU0", "4242",
                                                                            "train"),
        TARGET / "nccl_2.32.3_otlp_aggregated_from_2.28.9_vm-pid3027.json": otlp_body(ops, "vm", "GPU0", RESOURCE,
                                                                                      NOW_US),
        TARGET / "nccl_2.32.3_otlp_verbose_from_2.28.9_vm-pid3027.json": otlp_body(ops[:12], "vm", "GPU0", RESOURCE,
                                                                                   NOW_US, verbose=True,
                                                                                   totals=(120, 7, 0, 0)),
    }  # fmt: skip


def main() -> None:
    TARGET.mkdir(parents=True, exist_ok=True)
    for path, data in render().items():
        path.write_bytes(data)


if __name__ == "__main__":
    main()
