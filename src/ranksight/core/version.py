"""The installed ranksight version, which the agent, the aggregator and ``ranksight --version`` all report."""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, version

# PEP 440 (what packaging gives) -> semantic versioning (what a NATS micro service must declare)
_PEP440 = re.compile(r"^v?(\d+(?:\.\d+)*)(.*?)(?:\+(.*))?$")


def ranksight_version() -> str:
    try:
        return version("ranksight")
    except PackageNotFoundError:
        return "0+unknown"  # run from a source tree that was never installed


def _identifiers(text: str, *, numeric_without_zeros: bool) -> list[str]:
    parts = [p for p in re.split(r"[^0-9A-Za-z-]+", text) if p]
    if numeric_without_zeros:  # semver pre-release: a numeric identifier has no leading zeros
        parts = [str(int(p)) if p.isdigit() else p for p in parts]
    return parts


def service_version(pep440: str) -> str:
    """``pep440`` as a semantic version: ``1.2`` -> ``1.2.0``, ``1.0rc1`` -> ``1.0.0-rc1``, ``0+unknown`` ->
    ``0.0.0+unknown``, ``1.2.3.4`` -> ``1.2.3+4``. nats.micro refuses to start a service with anything else."""
    match = _PEP440.match(pep440.strip())
    if match is None:
        return "0.0.0+" + (".".join(_identifiers(pep440, numeric_without_zeros=False)) or "unknown")
    release, pre, local = match.groups()
    numbers = [str(int(n)) for n in release.split(".")]
    core, extra = [*numbers, "0", "0"][:3], numbers[3:]
    text = ".".join(core)
    pre_ids = _identifiers(pre, numeric_without_zeros=True)
    if pre_ids:
        text += "-" + ".".join(pre_ids)
    build_ids = extra + _identifiers(local or "", numeric_without_zeros=False)
    if build_ids:
        text += "+" + ".".join(build_ids)
    return text
