"""The installed ranksight version, which the agent, the aggregator and ``ranksight --version`` all report."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def ranksight_version() -> str:
    try:
        return version("ranksight")
    except PackageNotFoundError:
        return "0+unknown"
