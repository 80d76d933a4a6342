"""A NATS micro service must declare a semantic version; packaging versions (PEP 440) are wider.

Found on a real machine: ranksight run from a source tree that was never installed reports ``0+unknown``, and
``ranksight up`` died at start (nats.micro: "Invalid version").
"""

from __future__ import annotations

import pytest
from nats.micro.service import SEMVER_REGEX

from ranksight.core.version import service_version


@pytest.mark.parametrize(
    ("pep440", "semver"),
    [
        ("0.1.0", "0.1.0"),
        ("0+unknown", "0.0.0+unknown"),
        ("1.2", "1.2.0"),
        ("1.0rc1", "1.0.0-rc1"),
        ("1.2.3.4", "1.2.3+4"),
        ("0.1.0.dev3+g1234.d20261124", "0.1.0-dev3+g1234.d20261124"),
        ("1.0.post2", "1.0.0-post2"),
        ("1.01.0a01", "1.1.0-a01"),
        ("not a version", "0.0.0+not.a.version"),
        ("", "0.0.0+unknown"),
    ],
)
def test_packaging_versions_become_semantic_versions(pep440: str, semver: str) -> None:
    assert service_version(pep440) == semver
    assert SEMVER_REGEX.match(semver)
