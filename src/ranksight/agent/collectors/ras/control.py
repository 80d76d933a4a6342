"""RAS ``CONTROL PROFILER_MASK <value>`` (NCCL 2.31 and later): switch the profiler events of every process of a job
at run time, over the RAS network. Mask 0 keeps a profiler plugin such as Inspector loaded but fed nothing.

The value, as the server parses it (``rasParseProfilerMask`` in ``src/ras/client_support.cc``, as RCCL's microtests of
it show): ``none`` (0), ``all``, a non-negative integer in decimal, hex (``0x``) or octal (leading ``0``) with nothing
after it, or comma-separated event names, case-insensitive. The server answers ``OK`` (sent on to every process),
``ERROR: Invalid profiler mask value '<value>'`` or ``ERROR: Unknown CONTROL subcommand '<rest of line>'``; a server
before 2.31 answers ``ERROR: Unknown command CONTROL ...``. One deliberate difference: a number above ``INT_MAX`` is
refused here, where the server would truncate it to an ``int`` (``0x100000000`` would switch every event off).
"""

from __future__ import annotations

import re

# The profiler event types (``ncclProfile*`` in NCCL's profiler headers) by the names the server accepts.
PROFILER_EVENTS: dict[str, int] = {
    "group": 1 << 0,
    "coll": 1 << 1,
    "p2p": 1 << 2,
    "proxyop": 1 << 3,
    "proxystep": 1 << 4,
    "proxyctrl": 1 << 5,
    "kernelch": 1 << 6,
    "netplugin": 1 << 7,
    "groupapi": 1 << 8,
    "collapi": 1 << 9,
    "p2papi": 1 << 10,
    "kernellaunch": 1 << 11,
    "cecoll": 1 << 12,
    "cesync": 1 << 13,
    "cebatch": 1 << 14,
}
ALL_EVENTS = sum(PROFILER_EVENTS.values())
# What Inspector needs to record collectives and point-to-point operations with their kernel timing.
INSPECTOR_EVENTS = PROFILER_EVENTS["coll"] | PROFILER_EVENTS["p2p"] | PROFILER_EVENTS["kernelch"]
MAX_VALUE_CHARS = 1024
INT_MAX = 2**31 - 1
_NUMBER = re.compile(r"0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*")  # strtol base 0, whole string


def parse_profiler_mask(value: str) -> int | None:
    """The mask a value means, or None where the server would answer ``Invalid profiler mask value``."""
    if not value:
        return None
    lower = value.lower()
    if lower == "none":
        return 0
    if lower == "all":
        return ALL_EVENTS
    if "0" <= value[0] <= "9":
        if not _NUMBER.fullmatch(value):
            return None  # strtol would stop before the end: trailing characters
        number = int(value, 16) if value[:2].lower() == "0x" else int(value, 8 if value[0] == "0" else 10)
        return number if number <= INT_MAX else None
    if len(value) >= MAX_VALUE_CHARS:
        return None  # the server copies a list into a buffer of that size first
    mask = 0
    for token in lower.split(","):
        if not token:
            continue  # strtok skips empty tokens: "coll,,p2p" is coll and p2p, "," is 0
        bit = PROFILER_EVENTS.get(token)  # compared whole: " coll" is not an event
        if bit is None:
            return None
        mask |= bit
    return mask


def profile_value(choice: str) -> str:
    """What ``ranksight ras profile`` sends for ``on`` (Inspector's events), ``off`` (0) or a mask as given."""
    if choice == "on":
        return hex(INSPECTOR_EVENTS)
    if choice == "off":
        return "0"
    return choice
