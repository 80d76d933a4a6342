"""Robust statistics the rules share: the median and the median absolute deviation (MAD), which one slow member
cannot drag the way it drags a mean and a standard deviation."""

from __future__ import annotations

import statistics
from collections.abc import Iterable

MAD_TO_SIGMA = 1.4826  # MAD x this = the standard deviation, for normally distributed values


def median_mad(values: Iterable[float]) -> tuple[float, float]:
    """The median of ``values`` (at least one) and their median absolute deviation from it."""
    values = list(values)
    median = statistics.median(values)
    return median, statistics.median(abs(v - median) for v in values)
