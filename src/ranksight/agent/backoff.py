"""The agent's one retry schedule: exponential backoff with a ceiling (publish retries, collector restarts)."""

from __future__ import annotations


def backoff_s(attempt: int, first_s: float, max_s: float) -> float:
    """The wait before retry ``attempt`` (0 for the first): ``first_s`` doubled per attempt, at most ``max_s``."""
    return min(
        max_s, first_s * 2.0 ** min(attempt, 64)
    )  # the exponent is bounded so a long outage cannot overflow
