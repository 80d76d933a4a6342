"""``gpu_xid``: one GPU Xid (or NVSwitch SXid) error event the NVIDIA driver logged, as the kernel log has it.

A point event: the aggregator keeps it for the record's TTL (``agent.collectors.xid.ttl_s``) and raises ``gpu_xid``
with the Xid catalog's resolution class (restart the app, reset the GPU, reboot, drain), which action policies can act
on (``xid_resolutions``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ranksight.schemas.records.base import Record
from ranksight.schemas.records.quantities import Count, Pid


class GpuXidRecord(Record):
    kind: Literal["xid", "sxid"] = Field(description="xid: a GPU's; sxid: an NVSwitch's")
    code: int = Field(ge=0, le=65535, description="the Xid number (NVIDIA's Xid catalog)")
    pci: str | None = Field(None, description="PCI address of the GPU or switch, as the driver prints it")
    pid: Pid | None = Field(None, description="the process the driver names, when it names one")
    process: str | None = Field(None, description="its name, when the driver prints one")
    message: str = Field(max_length=1000, description="the rest of the driver's line")
    kernel_seq: Count | None = Field(None, description="the kernel log record's sequence number (/dev/kmsg)")
