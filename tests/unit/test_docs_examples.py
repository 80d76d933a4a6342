"""The docs' examples run (``make test``, which ``.ci/run`` runs, collects this file).

Every fenced TOML block of ``docs/`` and the README is a valid configuration (unknown keys rejected). Every ``ranksight``
command line of a shell block (```` ```sh ````, ``bash``, ``console``, or no language) parses with the real argument
parser; those that need no running aggregator run and exit as the line says (``# exit N``; 0 otherwise): ``analyze``,
``parse``, ``--help``, and the history commands (``sql``, ``alerts``, ``incidents``, ``series``), which run with ``--db``
on a fresh history database, so their SQL meets the real tables. Every fenced SQL block runs there too, and every
Python block compiles.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from ranksight.cli import build_parser, main
from ranksight.core.config import Settings
from tests.conftest import REPO

PAGES = [*sorted((REPO / "docs").rglob("*.md")), REPO / "README.md"]
FENCE = re.compile(r"^```(?P<lang>\w*)\n(?P<body>.*?)^```", re.M | re.S)
SHELL = ("", "sh", "bash", "console", "shell")
OFFLINE = ("analyze", "parse")  # commands that read files given to them, nothing else
HISTORY = ("sql", "alerts", "incidents", "series")  # commands that answer from a history file with --db
PROGRAM = re.compile(r"(\S*/bin/)?ranksight")  # ranksight, .venv/bin/ranksight
EXPECTED_EXIT = re.compile(r"#.*\bexit (\d+)")


@dataclass(frozen=True)
class Example:
    where: str  # page:line
    lang: str
    text: str

    def __str__(self) -> str:
        return self.where


def _examples() -> list[Example]:
    out = []
    for page in PAGES:
        text = page.read_text()
        for block in FENCE.finditer(text):
            line = text.count("\n", 0, block.start("body")) + 1
            out.append(Example(f"{page.relative_to(REPO)}:{line}", block["lang"], block["body"]))
    return out


EXAMPLES = _examples()


@dataclass(frozen=True)
class CommandLine:
    where: str
    argv: list[str]
    exit: int  # what the line says it exits with

    def __str__(self) -> str:
        return f"{self.where}: ranksight {shlex.join(self.argv)}"


def _command_lines() -> list[CommandLine]:
    out = []
    for example in EXAMPLES:
        if example.lang not in SHELL:
            continue
        first = int(example.where.rsplit(":", 1)[1])
        for offset, line in enumerate(example.text.replace("\\\n", " ").splitlines()):
            command = line.strip().removeprefix("$ ")
            if not PROGRAM.fullmatch(command.split(" ", 1)[0]):
                continue
            words = shlex.split(command, comments=True)
            if words:
                expected = EXPECTED_EXIT.search(line)
                where = f"{example.where.rsplit(':', 1)[0]}:{first + offset}"
                out.append(CommandLine(where, words[1:], int(expected[1]) if expected else 0))
    return out


COMMAND_LINES = _command_lines()


def test_the_docs_have_examples_of_each_kind() -> None:
    """The collection itself works: a change of fence or prompt style would otherwise test nothing."""
    assert sum(e.lang == "toml" for e in EXAMPLES) >= 3 and sum(e.lang == "sql" for e in EXAMPLES) >= 2
    assert sum(e.lang == "python" for e in EXAMPLES) >= 2
    assert len(COMMAND_LINES) >= 10
    assert {c.argv[0] for c in COMMAND_LINES} >= {"analyze", "sql", "status", "demo"}


@pytest.mark.parametrize("example", [e for e in EXAMPLES if e.lang == "toml"], ids=str)
def test_toml_examples_are_valid_configuration(example: Example) -> None:
    Settings.model_validate(tomllib.loads(example.text))  # a bad value or an unknown key raises


@pytest.mark.parametrize("example", [e for e in EXAMPLES if e.lang == "python"], ids=str)
def test_python_examples_compile(example: Example) -> None:
    compile(example.text, example.where, "exec")  # a SyntaxError names the page and line


@pytest.mark.parametrize("line", COMMAND_LINES, ids=str)
def test_command_lines_parse(line: CommandLine, capfd: pytest.CaptureFixture[str]) -> None:
    try:
        build_parser(line.argv).parse_args(line.argv)
    except SystemExit as exc:  # --help exits 0; a usage error exits 2 with the reason on stderr
        assert exc.code == 0, f"{line}: {capfd.readouterr().err}"


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A history database as a new aggregator creates it: every table and view, no rows."""
    from ranksight.aggregator.store import Store

    store = Store(tmp_path_factory.mktemp("history") / "ranksight.duckdb")
    store.open()
    store.close_connection()
    store.shutdown()
    return store.path


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Run as a reader of the docs would, from the repository (the fixtures' paths), with nothing to reach."""
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("RANKSIGHT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("RANKSIGHT_NATS__URL", "nats://127.0.0.1:1")


def _run(argv: list[str], capfd: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # --help, usage errors
        code = exc.code if isinstance(exc.code, int) else 2
    return code, capfd.readouterr().err


def _with_db(argv: list[str], db: Path) -> list[str]:
    """``argv`` answered from ``db``: its ``--db`` (a file the reader made, e.g. by a demo) replaced, or added."""
    if "--db" in argv:
        at = argv.index("--db")
        return [*argv[:at], *argv[at + 2 :], "--db", str(db)]
    return [*argv, "--db", str(db)]


def _runs_offline(line: CommandLine) -> bool:
    help_asked = "--help" in line.argv or "-h" in line.argv
    return help_asked or line.argv[0] in OFFLINE or (line.argv[0] in HISTORY and "--follow" not in line.argv)


@pytest.mark.parametrize("line", [c for c in COMMAND_LINES if _runs_offline(c)], ids=str)
def test_offline_command_lines_run(
    line: CommandLine, history: Path, offline: None, capfd: pytest.CaptureFixture[str]
) -> None:
    argv = _with_db(line.argv, history) if line.argv[0] in HISTORY else line.argv
    code, err = _run(argv, capfd)
    assert code == line.exit, f"{line}: exit {code}, said {line.exit}; stderr: {err[-2000:]}"
    assert "Traceback" not in err, f"{line}: {err}"


@pytest.mark.parametrize("example", [e for e in EXAMPLES if e.lang == "sql"], ids=str)
def test_sql_examples_run_on_the_history_tables(
    example: Example, history: Path, offline: None, capfd: pytest.CaptureFixture[str]
) -> None:
    for statement in filter(str.strip, example.text.split(";")):
        code, err = _run(["sql", "--db", str(history), statement.strip()], capfd)
        assert code == 0, f"{example}: {statement.strip()}: {err[-2000:]}"
