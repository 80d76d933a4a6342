"""``make up`` installs the runtime only; ``make test`` adds the test and lint extras (issue 47: ``make up`` built a
978 MB environment with pytest, mypy, helm and schemathesis that running ranksight never uses)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _recipe(target: str, venv: Path) -> str:
    """What ``make TARGET`` would run on a fresh clone (``-n``: printed, not run)."""
    out = subprocess.run(["make", "-n", "-C", str(ROOT), target, f"VENV={venv}"], capture_output=True, text=True,
                         check=True)  # fmt: skip
    return out.stdout


def test_up_installs_the_runtime_and_test_adds_the_extras(tmp_path: Path) -> None:
    up = _recipe("up", tmp_path / "venv")
    assert "pip install -q -e ." in up and "[dev]" not in up and "ranksight up" in up
    test = _recipe("test", tmp_path / "venv")
    assert "pip install -q -e '.[dev]'" in test and "pytest" in test
    assert "[dev]" in _recipe("lint", tmp_path / "venv")
