"""``gpu_xid``: one GPU Xid (or NVSwitch SXid) error event the NVIDIA driver logged, as the kernel log has it.

A point event: the aggregator keeps it for the record's TTL (``agent.collectors.xid.ttl_s``) and raises ``gpu_xid``
with the Xid catalog's resolution class (restart the app, reset the GPU, reboot, drain), which action policies can act
on (``xid_resolutions``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ranksight.schemas.records.base import Record


class GpuXidRecord(Record):
    kind: Literal["xid", "sxid"] = Field(description="xid: a GPU's; sxid: an NVSwitch's")
    code: int = Field(ge=0, description="the Xid number (NVIDIA's Xid catalog)")
    pci: str | None = Field(None, description="PCI address of the GPU or switch, as the driver prints it")
    pid: int | None = Field(None, description="the process the driver names, when it names one")
    process: str | None = Field(None, description="its name, when the driver prints one")
    message: str = Field(max_length=1000, description="the rest of the driver's line")
    kernel_seq: int | None = Field(None, description="the kernel log record's sequence number (/dev/kmsg)")
