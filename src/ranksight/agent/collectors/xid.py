"""``xid``: GPU Xid and NVSwitch SXid events from the kernel log (``/dev/kmsg``), as ``gpu_xid`` records.

Read from the end at start (an event logged before the agent started was reported by the agent before it, or belongs
to an earlier boot), every ``interval_s``, everything new in one go. ``/dev/kmsg`` answers one record per read and
``EPIPE`` when records were overwritten before they were read (counted as the collector's error, reading goes on);
``kmsg_path`` may name a FIFO or file of kernel log lines instead (a container that is given the host's log that way).
No readable log is ``absent``, not an error. AMD GPUs report through RAS and ECC counters (the gpu collector).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
from typing import TYPE_CHECKING

from ranksight.agent.collectors.base import CollectorUnavailable, Emit, StreamingCollector
from ranksight.agent.collectors.settings import XidSettings
from ranksight.agent.collectors.xid_parse import KmsgParseError, parse_lines

if TYPE_CHECKING:
    from ranksight.agent.collector_settings import CollectorSettings
    from ranksight.agent.runtime import AgentContext

READ_BYTES = 64 * 1024
MAX_READS = 10_000  # per interval: a flood of kernel messages waits for the next one


class XidCollector(StreamingCollector):
    name = "xid"
    kind = "gpu_xid"
    durable = True  # rare and decisive: never dropped

    def __init__(self, ctx: AgentContext, settings: CollectorSettings) -> None:
        super().__init__(ctx, settings)
        assert isinstance(settings, XidSettings)
        self.cfg = settings
        self.overrun = 0  # times the kernel overwrote records before they were read

    def _open(self) -> int:
        try:
            fd = os.open(self.cfg.kmsg_path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            raise CollectorUnavailable(
                f"kernel log {self.cfg.kmsg_path} not readable: {exc.strerror}"
            ) from None
        with contextlib.suppress(OSError):  # a FIFO cannot seek
            os.lseek(fd, 0, os.SEEK_END)
        return fd

    def _read(self, fd: int, pending: str) -> tuple[str, str]:
        """What can be read now: complete lines, and the unfinished rest."""
        chunks = []
        for _ in range(MAX_READS):
            try:
                data = os.read(fd, READ_BYTES)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno != errno.EPIPE:
                    raise
                self.overrun += 1
                self.health.last_error = f"kernel log overrun {self.overrun} times (records lost before read)"
                continue
            if not data:
                break
            chunks.append(data.decode(errors="replace"))
        text = pending + "".join(chunks)
        complete, _, rest = text.rpartition("\n")
        return complete, rest

    async def run(self, emit: Emit) -> None:
        fd = self._open()
        self.health.source = str(self.cfg.kmsg_path)
        pending = ""
        try:
            while True:
                complete, pending = self._read(fd, pending)
                try:
                    events = parse_lines(complete)
                except KmsgParseError as exc:
                    self.health.last_error = str(exc)
                    events = []
                if events:
                    await emit(events)
                self.health.success(0.0)
                await asyncio.sleep(self.cfg.interval_s)
        finally:
            os.close(fd)
