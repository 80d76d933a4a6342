"""Value cleaning shared by the GPU parsers: "not available" spellings, sentinels and unit conversion to base units.

Every vendor tool spells "no value" differently ("N/A", "[N/A]", "[Not Supported]", 65535, -1, 0xFFFFFFFF); all of them
become ``None`` here so that no parser ever publishes a sentinel as a reading.
"""

from __future__ import annotations

import re
from typing import Any

_MISSING = {"", "n/a", "na", "none", "unknown", "not supported", "not available"}
# Unsigned sentinels the drivers use for "unsupported" (uint16, uint32, uint64 all-ones) and -1.
_SENTINELS = {-1, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF}
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")

# unit (lower case) -> factor to the base unit of its dimension
UNIT_FACTORS: dict[str, float] = {
    "w": 1.0, "mw": 1e-3, "uw": 1e-6, "kw": 1e3,
    "c": 1.0, "mc": 1e-3,
    "hz": 1.0, "khz": 1e3, "mhz": 1e6, "ghz": 1e9,
    "b": 1.0, "kb": 1e3, "mb": 1e6, "gb": 1e9, "kib": 1024.0, "mib": 1024.0**2, "gib": 1024.0**3,
    "%": 1.0,
}  # fmt: skip


def is_missing(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, str):
        text = value.strip().lower()
        # nvidia-smi brackets every non-value: "[N/A]", "[Not Supported]", "[Unknown Error]", "[Requested ...]"
        return text in _MISSING or text.startswith("[")
    return False


def number(value: Any, factor: float = 1.0) -> float | None:
    """The first number in ``value`` times ``factor``; ``None`` for missing values and sentinels."""
    if is_missing(value) or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        raw: float = value
    else:
        match = _NUMBER.search(str(value))
        if match is None:
            return None
        raw = float(match.group())
    if raw in _SENTINELS:
        return None
    return raw * factor


def integer(value: Any) -> int | None:
    result = number(value)
    return None if result is None else int(result)


def with_unit(value: Any, unit: str | None, assumed: str) -> float | None:
    """A reading in ``unit`` (``assumed`` when the source gives none) converted to its base unit."""
    factor = UNIT_FACTORS.get((unit or assumed).strip().lower())
    return None if factor is None else number(value, factor)
