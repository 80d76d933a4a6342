"""Helpers for the GPU/NIC tests: capture sections, fake sysfs trees, fake vendor tools on PATH."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

from tests.conftest import FIXTURES

METRICS = FIXTURES / "metrics"
SYSFS_TREE = METRICS / "sysfs" / "tree" / "sys"


def nvidia_query_sections(capture: str) -> list[bytes]:
    """The ``--query-gpu`` CSV sections (header + rows) of an nvidia_gpu_exporter capture, in file order (idle, load)."""
    lines = (METRICS / "nvidia" / capture).read_text().split("\n")
    sections = []
    for i, line in enumerate(lines):
        if line.startswith("# $ nvidia-smi --query-gpu="):
            body = []
            for row in lines[i + 2 :]:  # skip the closing banner line
                if not row.strip():
                    break
                body.append(row)
            sections.append(("\n".join(body) + "\n").encode())
    return sections


def write_tree(root: Path, files: dict[str, str | int]) -> None:
    """Create/overwrite files under a fake sysfs root (``{"class/net/eth0/operstate": "up"}``)."""
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{content}\n")


def fake_tool(bin_dir: Path, name: str, script: str) -> Path:
    """An executable ``name`` in ``bin_dir`` running ``script`` with this Python."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / name
    path.write_text(f"#!{sys.executable}\n{script}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def printing_tool(bin_dir: Path, name: str, payload: bytes) -> Path:
    data = bin_dir / f"{name}.out"
    bin_dir.mkdir(parents=True, exist_ok=True)
    data.write_bytes(payload)
    return fake_tool(
        bin_dir, name, f"import sys\nsys.stdout.buffer.write(open({str(data)!r}, 'rb').read())\n"
    )


def path_with(bin_dir: Path) -> str:
    return f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
