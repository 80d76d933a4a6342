"""``gpu_xid``: one GPU Xid (or NVSwitch SXid) error event the NVIDIA driver logged, as the kernel log has it.

A point event: the aggregator keeps it for the record's TTL (``agent.collectors.xid.ttl_s``) and raises ``gpu_xid``
with the Xid catalog's resolution class (restart the app, reset the GPU, reboot, drain), which action policies can act
on (``xid_resolutions``).
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from ranksight.schemas.records.base import Record, RecordKind
from ranksight.schemas.records.quantities import Count, Pid


class GpuXidRecord(Record, kw_only=True, frozen=True):
    kind: Annotated[Literal["xid", "sxid"], msgspec.Meta(description="xid: a GPU's; sxid: an NVSwitch's")]
    code: Annotated[int, msgspec.Meta(ge=0, le=65535, description="the Xid number (NVIDIA's Xid catalog)")]
    pci: Annotated[
        str | None, msgspec.Meta(description="PCI address of the GPU or switch, as the driver prints it")
    ] = None
    pid: Annotated[
        Pid | None, msgspec.Meta(description="the process the driver names, when it names one")
    ] = None
    process: Annotated[str | None, msgspec.Meta(description="its name, when the driver prints one")] = None
    message: Annotated[str, msgspec.Meta(max_length=1000, description="the rest of the driver's line")]
    kernel_seq: Annotated[
        Count | None, msgspec.Meta(description="the kernel log record's sequence number (/dev/kmsg)")
    ] = None


KINDS = [
    RecordKind("gpu_xid", GpuXidRecord, collector="xid", tracker="xids"),
]
