"""``gpu`` collector: per-GPU health from the first source that works on this node, tried in ``sources`` order.

AMD: the ``amdsmi`` library, ``amd-smi metric --json`` (with ``amd-smi topology`` links), ``rocm-smi --json``, sysfs
(and, opt-in, ``amd-smi monitor`` text). NVIDIA: NVML, ``nvidia-smi -q -x``, ``nvidia-smi --query-gpu``. The winner is
chosen at detection (it must open *and* return GPUs) and named in health; a node where none works is ``absent``. When
the winner starts failing, the next source in order that works takes over (health names it and why).
Tools run as subprocesses off the event loop with a timeout (their whole process group is killed on timeout); libraries
run on a worker thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import msgspec

from ranksight.agent.collectors.base import CollectorUnavailable, PolledCollector
from ranksight.agent.collectors.command import CommandFailed, run_command
from ranksight.agent.collectors.gpu.amd_smi import parse_amd_smi_metric
from ranksight.agent.collectors.gpu.amd_smi_links import parse_amd_smi_topology
from ranksight.agent.collectors.gpu.amd_smi_monitor import parse_amd_smi_monitor
from ranksight.agent.collectors.gpu.amdsmi_lib import AmdSmiLibrary
from ranksight.agent.collectors.gpu.nvidia_smi import QUERY_FIELDS, parse_nvidia_smi_csv
from ranksight.agent.collectors.gpu.nvidia_smi_xml import parse_nvidia_smi_xml
from ranksight.agent.collectors.gpu.nvml import Nvml
from ranksight.agent.collectors.gpu.rocm_smi import parse_rocm_smi
from ranksight.agent.collectors.gpu.sysfs import read_amdgpu_sysfs
from ranksight.schemas.records import GpuRecord, Record

if TYPE_CHECKING:
    from ranksight.agent.collectors.gpu.settings import GpuSettings
    from ranksight.agent.runtime import AgentContext

ROCM_SMI_ARGS = (
    "--showid", "--showuniqueid", "--showbus", "--showproductname", "--showtemp", "--showuse", "--showmeminfo",
    "vram", "--showpower", "--showmaxpower", "--showclocks", "--showreplaycount", "--json",
)  # fmt: skip


class GpuSource(Protocol):
    name: str

    async def read(self) -> list[GpuRecord]: ...

    async def close(self) -> None: ...


class CommandSource:
    def __init__(
        self, name: str, argv: Sequence[str], parse: Callable[[bytes], list[GpuRecord]], timeout_s: float
    ):
        self.name, self.argv, self.parse, self.timeout_s = name, list(argv), parse, timeout_s

    async def read(self) -> list[GpuRecord]:
        return self.parse(await run_command(self.argv, self.timeout_s))

    async def close(self) -> None:
        return None


class AmdSmiSource(CommandSource):
    """``amd-smi metric --json`` plus, when asked, each GPU's links from ``amd-smi topology -a -t --json``.

    A failing topology query leaves ``links`` empty rather than losing the metrics (older releases lack ``-a -t``)."""

    def __init__(self, timeout_s: float, links: bool) -> None:
        super().__init__("amd-smi", ["amd-smi", "metric", "--json"], parse_amd_smi_metric, timeout_s)
        self.links = links

    async def read(self) -> list[GpuRecord]:
        records = await super().read()
        if not self.links:
            return records
        try:
            links = parse_amd_smi_topology(
                await run_command(["amd-smi", "topology", "-a", "-t", "--json"], self.timeout_s)
            )
        except (CommandFailed, ValueError):
            return records
        return [msgspec.structs.replace(r, links=links.get(r.index, [])) for r in records]


class LibrarySource:
    """A blocking vendor library (amdsmi, NVML), opened lazily and read on a worker thread."""

    def __init__(self, name: str, opener: Callable[[], AmdSmiLibrary | Nvml]) -> None:
        self.name, self._opener = name, opener
        self._lib: AmdSmiLibrary | Nvml | None = None

    async def read(self) -> list[GpuRecord]:
        if self._lib is None:
            self._lib = await asyncio.to_thread(self._opener)
        return await asyncio.to_thread(self._lib.read)

    async def close(self) -> None:
        if self._lib is not None:
            lib, self._lib = self._lib, None  # a later read (as a fallback) opens it afresh
            await asyncio.to_thread(lib.close)


class SysfsSource:
    name = "sysfs"

    def __init__(self, root: Path) -> None:
        self.root = root

    async def read(self) -> list[GpuRecord]:
        return await asyncio.to_thread(read_amdgpu_sysfs, self.root)

    async def close(self) -> None:
        return None


def build_sources(settings: GpuSettings) -> list[GpuSource]:
    timeout = settings.command_timeout_s
    known: dict[str, Callable[[], GpuSource]] = {
        "amdsmi": lambda: LibrarySource("amdsmi", AmdSmiLibrary),
        "amd-smi": lambda: AmdSmiSource(timeout, settings.links),
        "amd-smi-monitor": lambda: CommandSource(
            "amd-smi-monitor", ["amd-smi", "monitor"], parse_amd_smi_monitor, timeout
        ),
        "rocm-smi": lambda: CommandSource("rocm-smi", ["rocm-smi", *ROCM_SMI_ARGS], parse_rocm_smi, timeout),
        "sysfs": lambda: SysfsSource(settings.sysfs_root),
        "nvml": lambda: LibrarySource("nvml", Nvml),
        "nvidia-smi-xml": lambda: CommandSource(
            "nvidia-smi-xml", ["nvidia-smi", "-q", "-x"], parse_nvidia_smi_xml, timeout
        ),
        "nvidia-smi": lambda: CommandSource(
            "nvidia-smi",
            ["nvidia-smi", f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv,noheader,nounits"],
            parse_nvidia_smi_csv,
            timeout,
        ),
    }
    return [known[name]() for name in settings.sources]


class GpuCollector(PolledCollector):
    name = "gpu"
    kind = "gpu"
    settings: GpuSettings

    def __init__(self, ctx: AgentContext, settings: GpuSettings) -> None:
        super().__init__(ctx, settings)
        self.source: GpuSource | None = None
        self._fallbacks: list[GpuSource] = []  # the sources after ``source`` in order, not yet opened

    async def _first_working(self, sources: list[GpuSource]) -> tuple[list[GpuRecord], list[str]]:
        """Read ``sources`` in order until one returns GPUs; it becomes ``source``, the rest stay as fallbacks."""
        reasons = []
        for i, source in enumerate(sources):
            try:
                records = await source.read()
            except Exception as exc:
                reasons.append(f"{source.name}: {type(exc).__name__}: {exc}")
                await source.close()
                continue
            if records:
                self.source, self._fallbacks = source, sources[i + 1 :]
                self.health.source = source.name
                return records, reasons
            reasons.append(f"{source.name}: no GPU")
            await source.close()
        return [], reasons

    async def detect(self) -> bool:
        """Pick the first source that returns at least one GPU; ``CollectorUnavailable`` lists why each failed."""
        records, reasons = await self._first_working(build_sources(self.settings))
        if not records:
            raise CollectorUnavailable("no GPU source works here (" + "; ".join(reasons) + ")")
        return True

    async def collect(self) -> Sequence[Record]:
        """A read of the current source; when it starts failing, the next source in order that works takes over
        (named in health, with why the old one was left). With none left, the error stands and the source stays."""
        if self.source is None:
            raise CollectorUnavailable("no GPU source")
        try:
            return await self.source.read()
        except Exception as exc:
            failed, error = self.source, f"{self.source.name}: {type(exc).__name__}: {exc}"
            records, _ = await self._first_working(self._fallbacks)
            if not records:
                raise
            await failed.close()
            self.health.last_error = f"fell back to {self.health.source} after {error}"[:500]
            return records

    async def close(self) -> None:
        if self.source is not None:
            await self.source.close()
