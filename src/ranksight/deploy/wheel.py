"""The project wheel that deploy uploads: built once from the source tree, then reused while the sources are unchanged.

The cache key is a hash of every file that goes into the wheel (``pyproject.toml`` and the packages), so an edit
anywhere gives a new wheel and an unchanged tree costs one directory walk.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ranksight.errors import RanksightError

PROJECT_ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("src/ranksight",)
_SKIP_PARTS = {"__pycache__"}


class WheelError(RanksightError, RuntimeError):
    """The wheel could not be built (or the source tree is not there to build it from)."""


@dataclass(frozen=True)
class Wheel:
    path: Path
    sha256: str

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def version(self) -> str:
        # PEP 427: {distribution}-{version}(-{build})?-{python}-{abi}-{platform}.whl
        return self.path.name.split("-")[1]


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def source_hash(root: Path = PROJECT_ROOT) -> str:
    digest = hashlib.sha256()
    files = [root / "pyproject.toml"]
    for package in PACKAGES:
        files += sorted(
            p
            for p in (root / package).rglob("*")
            if p.is_file() and not _SKIP_PARTS & set(p.parts) and p.suffix != ".pyc"
        )
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def stage_sources(root: Path, stage: Path) -> Path:
    """Copy what goes into the wheel (pyproject, README, the packages; links kept as links) to ``stage``."""
    stage.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(root / name, stage / name)
    for package in PACKAGES:
        shutil.copytree(root / package, stage / package, symlinks=True,
                        ignore=shutil.ignore_patterns(*_SKIP_PARTS, "*.pyc"))  # fmt: skip
    return stage


def from_file(path: Path) -> Wheel:
    if not path.is_file() or path.suffix != ".whl":
        raise WheelError(f"not a wheel file: {path}")
    return Wheel(path, file_sha256(path))


def build_or_reuse(cache_dir: Path, root: Path = PROJECT_ROOT) -> Wheel:
    """The wheel for the current sources, from ``cache_dir/<source hash>/`` or freshly built there."""
    if not (root / "pyproject.toml").is_file():
        raise WheelError(f"no source tree at {root} to build a wheel from: pass --wheel FILE")
    target = cache_dir / source_hash(root)
    built = sorted(target.glob("ranksight-*.whl"))
    if not built:
        target.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="ranksight-wheel-") as tmp:
            # Built from a copy of exactly the hashed sources: setuptools reuses a source tree's build/ folder, so a
            # stale one (an older layout's packages) would otherwise travel in the wheel.
            stage = stage_sources(root, Path(tmp) / "src")
            proc = subprocess.run(
                [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(target), str(stage)],
                capture_output=True,
                text=True,
                timeout=600,
            )
        built = sorted(target.glob("ranksight-*.whl"))
        if proc.returncode != 0 or not built:
            raise WheelError(f"pip wheel failed: {proc.stderr.strip()[-2000:]}")
    return from_file(built[-1])
