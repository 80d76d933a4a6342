"""NVIDIA's Xid catalog, reduced to what a policy acts on: the resolution class of each Xid code.

The classes follow the "Resolution" column of NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors): RESTART_APP
(the application's fault or a contained error: restart the job), RESET_GPU (the GPU must be reset before reuse),
RESTART_BM (reboot the node), and the codes whose resolution is to check the hardware or contact support, which a
cluster operator treats as "drain the node". IGNORE codes are informational. A code the table does not hold is
``investigate``. ``aggregator.actions.xid`` overrides the class per code.
"""

from __future__ import annotations

from collections.abc import Mapping

from ranksight.core.config import XidResolution

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
