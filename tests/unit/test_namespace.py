"""One import namespace: installing ranksight adds exactly one top-level name, ``ranksight``.

Every module lives in one real package tree, ``src/ranksight/``: no symbolic links, no import hooks, and no module
imports a top-level name of the old layout (``agent``, ``aggregator``, ``schemas``, ``deploy``).
"""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

from ranksight.deploy import wheel as wheels

REPO = Path(__file__).resolve().parents[2]
MAPPED = ("agent", "aggregator", "schemas", "deploy")


def python_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=True)
    return [REPO / name for name in listed.stdout.split() if not (REPO / name).is_symlink()]


def old_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [
            f"{path.relative_to(REPO)}:{node.lineno} {name}" for name in names if name.split(".")[0] in MAPPED
        ]
    return found


def test_no_module_imports_a_top_level_name_other_than_ranksight() -> None:
    files = python_files()
    assert len(files) > 100
    assert [hit for path in files for hit in old_imports(path)] == []


def test_the_package_tree_is_real_files_only() -> None:
    links = [p for p in (REPO / "src").rglob("*") if p.is_symlink()]
    assert links == []
    assert all((REPO / "src" / "ranksight" / name / "__init__.py").is_file() for name in MAPPED)


def test_importing_the_commands_loads_nothing_outside_the_namespace() -> None:
    code = (
        "import sys, ranksight.cli, ranksight.aggregator.runtime, ranksight.agent.runtime, ranksight.deploy.cli; "
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(MAPPED)!r}))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_wheel_installs_exactly_one_top_level_name(tmp_path: Path) -> None:
    built = wheels.build_or_reuse(tmp_path)
    with zipfile.ZipFile(built.path) as wheel:
        names = wheel.namelist()
        top_level = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
        assert wheel.read(top_level).decode().split() == ["ranksight"]
    assert {n.split("/")[0] for n in names} == {"ranksight", top_level.split("/")[0]}
    for name in MAPPED:  # the linked packages travel inside the namespace, with their data files
        assert any(n.startswith(f"ranksight/{name}/") and n.endswith(".py") for n in names)
    assert any(n.startswith("ranksight/aggregator/migrations/") and n.endswith(".sql") for n in names)
