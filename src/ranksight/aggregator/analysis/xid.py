"""The ``gpu_xid`` rule, and NVIDIA's Xid catalog reduced to what an operator acts on: each code's resolution class.

The classes follow the "Resolution" column of NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors): RESTART_APP
(the application's fault or a contained error: restart the job), RESET_GPU (the GPU must be reset before reuse),
RESTART_BM (reboot the node), and the codes whose resolution is to check the hardware or contact support, which a
cluster operator treats as "drain the node". IGNORE codes are informational. A code the table does not hold is
``investigate``. ``aggregator.actions.xid`` overrides the class per code. NVSwitch SXids are classed ``drain`` when the
driver calls them fatal, else ``investigate``.

``gpu_xid`` fires per (node, PCI address, code) while an event is live (the agent's ``xid`` record TTL): critical for
reset_gpu, reboot and drain, warning for restart_app and investigate; ``ignore`` codes raise nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from ranksight.aggregator.alerts import Condition, RuleDoc
from ranksight.aggregator.state import LiveState
from ranksight.aggregator.timefmt import iso

if TYPE_CHECKING:
    from ranksight.aggregator.actions.settings import XidResolution

CATALOG: dict[int, XidResolution] = {
    8: "restart_app",  # GPU stopped processing (a kernel timeout)
    13: "restart_app",  # graphics engine exception (illegal address, ...)
    31: "restart_app",  # GPU memory page fault
    32: "restart_app",  # invalid or corrupted push buffer stream
    43: "restart_app",  # GPU stopped processing (reset channel)
    45: "ignore",  # preemptive cleanup after an earlier error
    48: "reset_gpu",  # double-bit ECC error
    61: "reset_gpu",  # internal micro-controller breakpoint/warning
    62: "reset_gpu",  # internal micro-controller halt
    63: "reset_gpu",  # row remapping pending (a reset activates it)
    64: "drain",  # row remapping failed
    68: "restart_app",  # NVDEC0 exception
    69: "restart_app",  # graphics engine class error
    74: "drain",  # NVLink error (check the mechanicals)
    79: "reboot",  # GPU has fallen off the bus
    92: "ignore",  # high single-bit ECC error rate
    94: "restart_app",  # contained ECC error
    95: "reset_gpu",  # uncontained ECC error
    109: "restart_app",  # context switch timeout
    119: "reset_gpu",  # GSP RPC timeout
    120: "reset_gpu",  # GSP error
    121: "reset_gpu",  # C2C link error
    140: "reset_gpu",  # unrecovered ECC error
    143: "drain",  # GPU initialization failure
    154: "reboot",  # GPU recovery action changed (the driver asks for a node reboot or drain)
}


def resolution(code: int, overrides: Mapping[str, XidResolution] | None = None) -> XidResolution:
    """The resolution class of Xid ``code``: the operator's override, else the catalog's, else ``investigate``."""
    if overrides and str(code) in overrides:
        return overrides[str(code)]
    return CATALOG.get(code, "investigate")


CRITICAL: frozenset[XidResolution] = frozenset({"reset_gpu", "reboot", "drain"})


def sxid_resolution(message: str) -> XidResolution:
    return "drain" if message.lower().startswith("fatal") else "investigate"


class GpuXidRule:
    name = "gpu_xid"
    # hold-down: a logged event: it fires at once and holds for the record's TTL
    for_s, clear_s = 0.0, 0.0
    doc = RuleDoc(
        "critical / warning",
        "a GPU Xid or NVSwitch SXid logged by the driver (kernel log, `gpu_xid` records of the agent's `xid` "
        "collector), held for the record's TTL; critical when NVIDIA's Xid catalog says reset the GPU, reboot"
        " or drain, warning for restart the app or investigate",
        "`agent.collectors.xid.kmsg_path`, `ttl_s`; `aggregator.actions.xid` (class per code)",
    )

    def __init__(self, overrides: Mapping[str, XidResolution] | None = None) -> None:
        self.overrides = dict(overrides or {})

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        for event in state.xids.live.values():
            cls = (
                resolution(event.code, self.overrides)
                if event.kind == "xid"
                else sxid_resolution(event.message)
            )
            if cls == "ignore":
                continue
            label = "SXid" if event.kind == "sxid" else "Xid"
            yield Condition(
                rule=self.name, severity="critical" if cls in CRITICAL else "warning", cluster=event.cluster,
                node=event.node, key=f"{event.kind} {event.pci} {event.code}", entity=f"gpu {event.pci}",
                summary=f"{event.node} {label} {event.code} on {event.pci} ({cls.replace('_', ' ')}): {event.message}"
                        + (f" ({event.count} times)" if event.count > 1 else ""),
                evidence={"xid": event.code, "kind": event.kind, "resolution": cls, "pci": event.pci,
                          "pid": event.pid, "process": event.process, "count": event.count,
                          "first_seen": iso(event.first_ns), "last_seen": iso(event.last_ns)},
            )  # fmt: skip
