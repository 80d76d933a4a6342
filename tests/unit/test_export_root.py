"""``export`` writes only under the export root: relative and absolute paths inside it, '..' and links out refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from ranksight.aggregator.api.queries import Forbidden, export_dir


def test_paths_under_the_root(tmp_path: Path) -> None:
    root = tmp_path / "exports"
    assert export_dir(root, "daily") == root / "daily"
    assert root.stat().st_mode & 0o777 == 0o700
    assert export_dir(root, str(root / "a" / "b")) == root / "a" / "b"
    assert export_dir(root, "./x/./y") == root / "x" / "y"


@pytest.mark.parametrize("requested", ["/etc", "/tmp/out", "../escape", "daily/../../escape", "/"])
def test_outside_or_dotdot_refused(tmp_path: Path, requested: str) -> None:
    with pytest.raises(Forbidden, match=r"outside the export root|'\.\.' is not allowed"):
        export_dir(tmp_path / "exports", requested)


def test_symlink_out_of_the_root_refused(tmp_path: Path) -> None:
    root = tmp_path / "exports"
    root.mkdir()
    (tmp_path / "secret").mkdir()
    (root / "link").symlink_to(tmp_path / "secret")
    with pytest.raises(Forbidden, match="outside the export root"):
        export_dir(root, "link/sub")
    (root / "inside").mkdir()
    (root / "alias").symlink_to(root / "inside")
    assert export_dir(root, "alias") == root / "inside"
