"""A simulated cluster's node-side sources, for ``ranksight demo``: what real agents read on a real node.

- :class:`LiveJob` plays a job simulated by :mod:`ranksight.simulate.inspector` in real time. Every line is appended to its
  process's ``<hostname>-pid<pid>.log`` once the wall clock passes its dump timestamp, as the Inspector plugin's dump
  thread would write it.
- :func:`ras_status_json` renders the job as NCCL's JSON ``STATUS`` reply (``rasDumpCommsToJSON``, the shape of
  ``fixtures/ras/nccl_2.29.1_json_status_docs_sample_missing_rank.json``): one entry per communicator, with each rank's
  status and collective counts, and the ranks that stopped answering under ``missing_ranks``.
- :func:`ras_status_text` renders the same state as NCCL's text ``STATUS`` reply (``client_support.cc``'s layout, as in
  ``fixtures/ras/upstream-server/ref_2.30.7_text_full.txt``): job summary, the communicator group table, the job-level
  INCOMPLETE section naming the processes that stopped answering, and one INCOMPLETE block per communicator they
  belong to.
- :class:`NodeSysfs` keeps a node's sysfs tree: amdgpu cards (``class/drm/card<N>/device``: ``vendor``,
  ``gpu_busy_percent``, ``mem_info_vram_*``, ``hwmon/hwmon0/{temp*_input,temp*_label,power1_average,power1_cap,
  freq1_input}``) and one RDMA port (``class/infiniband/<dev>/ports/1/{state,phys_state,rate,link_layer,counters/*}``, data
  counters in 4-byte words). These are the files the agent's sysfs readers parse in the captured tree under
  ``fixtures/metrics/sysfs``. Counters advance on every write.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from ranksight.simulate.inspector import Comm, JobSpec, comms, simulate_timed

_SN = re.compile(r'"id":"(0x[0-9a-f]+)".*"coll_sn":(\d+)')
US = 1_000_000


class LiveJob:
    """One run of a simulated job, written out as time passes; ``counts`` holds each communicator's operations so far."""

    def __init__(self, spec: JobSpec, dump_root: Path) -> None:
        self.spec = spec
        self.phases = comms(spec)
        self.dump_root = dump_root
        self._pending = {proc: list(reversed(lines)) for proc, lines in simulate_timed(spec).items()}
        self.counts: dict[str, int] = defaultdict(int)
        self.end_us = max((lines[0][0] for lines in self._pending.values() if lines), default=spec.start_us)
        for node in range(spec.nodes):  # the plugin creates its dump directory when the job starts
            self.dump_dir(node).mkdir(parents=True, exist_ok=True)

    def dump_dir(self, node: int) -> Path:
        return self.dump_root / self.spec.hostname(node)

    def release(self, now_us: int) -> int:
        """Append every line due by ``now_us`` to its file; the number of lines written."""
        written = 0
        for (host, pid), pending in self._pending.items():
            due = []
            while pending and pending[-1][0] <= now_us:
                due.append(pending.pop()[1])
            if not due:
                continue
            with open(self.dump_root / host / f"{host}-pid{pid}.log", "a") as f:
                f.write("".join(line + "\n" for line in due))
            for line in due:
                match = _SN.search(line)
                if match:  # NCCL's coll_sn counts from 0: the op numbered k is the (k + 1)-th
                    self.counts[match[1]] = max(self.counts[match[1]], int(match[2]) + 1)
            written += len(due)
        return written

    @property
    def done(self) -> bool:
        return not any(self._pending.values())


def _rank(spec: JobSpec, comm: Comm, rank: int) -> dict[str, object]:
    node, gpu = comm.members[rank]
    return {
        "rank": rank,
        "host": spec.hostname(node),
        "pid": spec.pid(node, gpu),
        "cuda_dev": gpu,
        "nvml_dev": gpu,
    }


def ras_status_json(
    job: LiveJob,
    missing: set[tuple[int, int]],
    version: str = "2.29.2",
    behind: frozenset[tuple[int, int]] = frozenset(),
) -> bytes:
    """The job's RAS status as NCCL's JSON reply; ``missing`` (node, GPU) members stopped answering; ``behind`` members
    never entered their comms' latest operation (a hang: their counts are one less than their peers')."""
    spec, entries = job.spec, []
    for comm in (c for phase in job.phases for c in phase):
        count = job.counts.get(comm.comm_id, 0)
        ranks, gone = [], []
        for rank, member in enumerate(comm.members):
            if member in missing:
                gone.append(
                    {**_rank(spec, comm, rank), "status": {"unresponsive": True, "considered_dead": False}}
                )
                continue
            mine = count - 1 if member in behind and count else count
            counts = {op: (mine if op == comm.op else 0)
                      for op in ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")}  # fmt: skip
            ranks.append({**_rank(spec, comm, rank), "collective_counts": counts, "status": {
                "init_state": 0, "async_error": 0, "finalize_called": False, "destroy_flag": False,
                "abort_flag": False}})  # fmt: skip
        entries.append({
            "hash": comm.comm_id, "secondary_hash": f"{comm.comm_id}:0x{len(comm.members):x}",
            "size": len(comm.members), "ranks_count": len(ranks), "missing_ranks_count": len(gone),
            "ranks": ranks, "missing_ranks": gone,
        })  # fmt: skip
    status = {"nccl_version": version, "cuda_runtime_version": 12090, "cuda_driver_version": 13000,
              "timestamp": time.strftime("%Y-%m-%d %H:%M:%S"), "communicators_count": len(entries),
              "communicators": entries, "ras": {"collection_time_sec": 0.001, "timeouts_count": 0}}  # fmt: skip
    return json.dumps(status, indent=2).encode()


def _gpu_word(gpus: list[int]) -> str:
    return f"GPU{'s' if len(gpus) > 1 else ''} {','.join(str(g) for g in gpus)}"


def ras_status_text(job: LiveJob, missing: set[tuple[int, int]], version: str = "2.29.2") -> bytes:
    """The job's RAS status as NCCL's text reply; ``missing`` (node, GPU) members stopped answering."""
    spec = job.spec
    all_comms = [c for phase in job.phases for c in phase]
    gpus_per_node = len({gpu for c in all_comms for node, gpu in c.members if node == 0}) or 1
    procs = spec.nodes * gpus_per_node
    out = [f"NCCL version {version} compiled with CUDA 12.9", "CUDA runtime version 12090, driver version 13000", "",
           "Job summary", "===========", "",
           "  Nodes  Processes         GPUs  Processes     GPUs", "(total)   per node  per process    (total)  (total)",
           f"{spec.nodes:7d} {gpus_per_node:10d} {1:12d} {procs:10d} {procs:8d}", "",
           "Communicators... (0.001s)", "=============", "",
           "Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors",
           "    #  in group  per comm  per node  per comm  in group"]  # fmt: skip
    groups: dict[tuple[int, str, int, str], list[Comm]] = defaultdict(list)
    for comm in all_comms:
        per_node: dict[int, int] = defaultdict(int)
        for node, _ in comm.members:
            per_node[node] += 1
        lo, hi = min(per_node.values()), max(per_node.values())
        errors = "INCOMPLETE" if any(m in missing for m in comm.members) else "OK"
        groups[(len(per_node), f"{lo}" if lo == hi else f"{lo}-{hi}", len(comm.members), errors)].append(comm)
    ordered = sorted(groups.items(), key=lambda item: (-item[0][2], item[0][1]))
    blocks: list[str] = []
    for number, ((nodes, per_node_text, size, errors), members) in enumerate(ordered):
        reporting = sum(sum(m not in missing for m in c.members) for c in members)
        out.append(f"{number:5d} {len(members):9d} {nodes:9d} {per_node_text:>9} {size:9d} {reporting:9d} "
                   f"{'RUNNING':>9}  {errors}")  # fmt: skip
        for index, comm in enumerate(members):
            gone = [(rank, m) for rank, m in enumerate(comm.members) if m in missing]
            if not gone:
                continue
            blocks += ["", f"#{number}-{index} ({int(comm.comm_id, 16):016x}) INCOMPLETE",
                       f"  Missing communicator data from {len(gone)} rank{'s' if len(gone) > 1 else ''}"]  # fmt: skip
            blocks += [f"  Rank {rank} -- GPU {gpu} managed by process {spec.pid(node, gpu)} on node "
                       f"{spec.hostname(node)}" for rank, (node, gpu) in gone[:10]]  # fmt: skip
    out += ["", "Errors", "======"]
    if missing:
        count = len(missing)
        out += ["", "INCOMPLETE",
                f"  Missing communicator data from {count} job process{'es' if count > 1 else ''}"]  # fmt: skip
        out += [f"  Process {spec.pid(node, gpu)} on node {spec.hostname(node)} managing {_gpu_word([gpu])}"
                for node, gpu in sorted(missing)]  # fmt: skip
    out += blocks
    out += ["", "Warnings", "========", "", ""]
    return "\n".join(out).encode()


COUNTER_PERIOD_S = 0.25  # how often the demo advances the simulated NIC counters


@dataclass
class NodeSysfs:
    """A node's sysfs tree under ``root``. ``slow_gpu`` runs at a reduced clock; ``nic_errors_per_s`` symbol errors
    accumulate on the RDMA port (a degrading cable)."""

    root: Path
    gpus: int = 8
    slow_gpu: int | None = None
    nic_errors_per_s: float = 0.0
    nic_bytes_per_s: float = 20e9
    _words: int = 0
    _errors: float = 0.0
    _last: float | None = field(default=None, repr=False)

    def write(self, now: float) -> None:
        """Every file: the GPUs' (steady values) and the RDMA port's; its counters the first time only."""
        for index in range(self.gpus):
            slow = index == self.slow_gpu
            device = self.root / "class" / "drm" / f"card{index}" / "device"
            hwmon = device / "hwmon" / "hwmon0"
            _files(device, {
                "vendor": "0x1002", "product_name": "AMD Instinct MI300X (simulated)",
                "unique_id": hashlib.sha256(f"{self.root.name}:{index}".encode()).hexdigest()[:16],
                "uevent": f"DRIVER=amdgpu\nPCI_SLOT_NAME=0000:{0x0c + index * 0x10:02x}:00.0",
                "gpu_busy_percent": "61" if slow else "97",
                "mem_info_vram_used": str(150 << 30), "mem_info_vram_total": str(192 << 30),
                "pcie_replay_count": "0",
            })  # fmt: skip
            _files(hwmon, {
                "temp1_label": "edge", "temp1_input": "58000", "temp2_label": "junction",
                "temp2_input": "71000" if slow else "83000", "temp3_label": "mem", "temp3_input": "69000",
                "power1_average": "402000000" if slow else "712000000", "power1_cap": "750000000",
                "freq1_input": "1300000000" if slow else "2100000000",
            })  # fmt: skip
        port = self.root / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
        _files(port, {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "400 Gb/sec (4X NDR)",
                      "link_layer": "InfiniBand"})  # fmt: skip
        if self._last is None:  # then the counters' own writer keeps them moving (write_counters)
            self.write_counters(now)

    def write_counters(self, now: float) -> None:
        """The RDMA port's counters, advanced to ``now``. A real port's counters move continuously; a file written
        now and then holds still between writes, so a reader sampling twice between two writes sees no traffic (a
        0 bit/s rate) and then twice the traffic: the demo writes them every ``COUNTER_PERIOD_S``, well within the
        NIC collector's interval, apart from the job's slower work."""
        dt = 0.0 if self._last is None else now - self._last
        self._last = now
        self._words += int(self.nic_bytes_per_s * dt / 4)
        self._errors += self.nic_errors_per_s * dt
        port = self.root / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
        _files(port / "counters", {
            "port_xmit_data": str(self._words), "port_rcv_data": str(self._words), "port_xmit_packets": str(
                self._words // 1024), "port_rcv_packets": str(self._words // 1024), "symbol_error": str(
                int(self._errors)), "port_rcv_errors": "0", "link_downed": "0",
        })  # fmt: skip


def _files(directory: Path, values: dict[str, str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, value in values.items():
        path = directory / name
        tmp = path.with_name(f".{name}.tmp")
        tmp.write_text(value + "\n")
        tmp.replace(path)  # a reader never sees a half-written value
