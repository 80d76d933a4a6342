"""The Inspector plugin's Prometheus textfiles in the dump directory (``nccl_inspector_metrics_<GPU uuid>.prom``, one
per GPU, rewritten at each dump, at least 30 s apart): each new version of a file is parsed whole
(:func:`~.metrics.parse_prom`). A version is known by its inode, size and modification time; a file not ending in a
newline is being written and waits for the next look. The per-operation textfile of 2.29.x is truncated at each dump
and then written one communicator at a time, so a look may find part of a dump and the next one all of it: an
operation (``op`` record: communicator, sequence number and time) the file's previous version already gave is not
given again. Blocking I/O: run :meth:`PromFiles.poll` on a worker thread."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from ranksight.agent.collectors.inspector.metrics import parse_prom
from ranksight.schemas.records import InspectorMetricsRecord

PREFIX, SUFFIX = "nccl_inspector_metrics_", ".prom"


@dataclass
class PromFiles:
    directory: Path
    max_bytes: int
    seen: dict[str, tuple[int, int, int]] = field(
        default_factory=dict
    )  # name -> (inode, size, mtime_ns) read
    errors: dict[str, str] = field(default_factory=dict)  # name -> its last version's first problem
    ops: dict[str, frozenset[InspectorMetricsRecord]] = field(
        default_factory=dict
    )  # name -> its last version's ops

    def poll(self) -> list[InspectorMetricsRecord]:
        """Records of every file that changed since the last poll."""
        records: list[InspectorMetricsRecord] = []
        try:
            names = sorted(e.name for e in os.scandir(self.directory)
                           if e.name.startswith(PREFIX) and e.name.endswith(SUFFIX))  # fmt: skip
        except FileNotFoundError:
            return records
        self.seen = {n: v for n, v in self.seen.items() if n in names}
        self.ops = {n: v for n, v in self.ops.items() if n in names}
        for name in names:
            try:
                fd = os.open(self.directory / name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
            except OSError:
                continue
            with open(fd, "rb") as fh:
                st = os.fstat(fd)
                version = (st.st_ino, st.st_size, st.st_mtime_ns)
                if not stat.S_ISREG(st.st_mode) or self.seen.get(name) == version:
                    continue
                if st.st_size > self.max_bytes:
                    self.seen[name], self.errors[name] = version, f"{st.st_size} bytes, over the read bound"
                    continue
                data = fh.read(self.max_bytes)
            if data and not data.endswith(b"\n"):
                continue  # being written
            self.seen[name] = version
            found, problems = parse_prom(data)
            given = self.ops.get(name, frozenset())
            records += [r for r in found if r not in given]
            self.ops[name] = frozenset(r for r in found if r.shape == "op")
            if problems:
                self.errors[name] = problems[0]
            else:
                self.errors.pop(name, None)
        return records
