"""The docs' examples run (``make test``, which ``.ci/run`` runs, collects this file).

Every fenced TOML block of ``docs/`` and the README is a valid configuration (unknown keys rejected). Every ``ranksight``
command line of a shell block (```` ```sh ````, ``bash``, ``console``, or no language) parses with the real argument
parser; those that need no running aggregator run and exit as the line says (``# exit N``; 0 otherwise): ``analyze``,
``parse``, ``--help``, and the history commands (``sql``, ``alerts``, ``incidents``, ``series``), which run with ``--db``
on a fresh history database, so their SQL meets the real tables. Every fenced SQL block runs there too, and every
Python block compiles.

Every inline code span of the prose (outside fenced blocks) that starts with ``ranksight `` (or
``.venv/bin/ranksight ``) parses with the real parser, read as a synopsis by these rules and no others:

- capitals stand for a value (``DIR``, ``JOB``, ``N``, ``HOST:PORT``) and so does a lone ``...`` right after an option
  (``--reason ...``): a placeholder is taken as is where the parser would convert the value or hold it to choices;
- ``[...]`` is optional: the span is parsed without its optional parts, with each of them alone, and with all of them;
- ``a|b`` (``\\|`` in a table) offers alternatives, each parsed in turn: of one word (``--state firing|all``), or of the
  whole bracket where one starts with an option (``[--duration 1h|--until T]``);
- ``NODE...`` is ``NODE``; a lone ``...`` elsewhere (``--allow CIDR ...``, ``[...]``) means "more of the same" and
  is dropped;
- a span of command words only (``ranksight analyze hang``) names a command: its words must be a real command path,
  its required arguments may be left out;
- left out: ``ranksight`` alone (the program, not a command line), a span with a ``<name>`` template
  (``ranksight <endpoint>``), and the commands of :data:`HYPOTHETICAL` (a worked example's command yet to be written).

Every fenced JSON block parses, as one document or as JSON Lines (one value a line). When the paragraph before it
shows the command whose ``--json`` output it is (a span ``ranksight ... --json``) and a shell block of the same page
runs that command offline, the command runs with ``--json`` and what it prints has the block's keys: the top-level ones
and those of the first object of each list.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import re
import shlex
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ranksight.cli import build_parser, main
from ranksight.settings import Settings
from tests.conftest import REPO

PAGES = [*sorted((REPO / "docs").rglob("*.md")), REPO / "README.md"]
FENCE = re.compile(r"^```(?P<lang>\w*)\n(?P<body>.*?)^```", re.M | re.S)
SHELL = ("", "sh", "bash", "console", "shell")
OFFLINE = ("analyze", "parse")  # commands that read files given to them, nothing else
HISTORY = ("sql", "alerts", "incidents", "series")  # commands that answer from a history file with --db
PROGRAM = re.compile(r"(\S*/bin/)?ranksight")  # ranksight, .venv/bin/ranksight
EXPECTED_EXIT = re.compile(r"#.*\bexit (\d+)")
# A CommonMark code span: a run of backticks, closed by a run as long, within one paragraph.
SPAN = re.compile(r"(?<!`)(?P<ticks>`+)(?!`)(?P<code>(?:(?!\n\s*\n).)+?)(?<!`)(?P=ticks)(?!`)", re.S)
OPTIONAL = re.compile(r"\[([^\[\]]*)\]")
OPTION_ALTERNATIVES = re.compile(r"\s*\|\s*(?=-)")  # [--duration 1h|--until T]
WORD_ALTERNATIVES = re.compile(r"[\w.-]+(?:\|[\w.-]+)+")  # on|off|MASK
PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]*(?::[A-Z][A-Z0-9_]*)*|\.\.\.")  # DIR, HOST:PORT, N, ...
TEMPLATE = re.compile(r"<\w+>")  # ranksight <endpoint>
HYPOTHETICAL = {"fans"}  # docs/extending.md walks through adding this endpoint


@dataclass(frozen=True)
class Example:
    where: str  # page:line
    lang: str
    text: str
    lead: str  # the paragraph before the block

    def __str__(self) -> str:
        return self.where


def _examples() -> list[Example]:
    out = []
    for page in PAGES:
        text = page.read_text()
        for block in FENCE.finditer(text):
            line = text.count("\n", 0, block.start("body")) + 1
            lead = text[: block.start()].rstrip().rsplit("\n\n", 1)[-1]
            out.append(Example(f"{page.relative_to(REPO)}:{line}", block["lang"], block["body"], lead))
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


@dataclass(frozen=True)
class InlineCommand:
    where: str
    text: str  # the span, on one line
    synopsis: str  # what follows the program's name

    def __str__(self) -> str:
        return f"{self.where}: {self.text}"


def _prose(text: str) -> str:
    """``text`` with its fenced blocks blanked out, line for line."""
    return FENCE.sub(lambda block: "\n" * block[0].count("\n"), text)


def _synopsis(span: str) -> str | None:
    """What follows the program's name in a span that is a command line of it (not one the docstring leaves out)."""
    program, _, synopsis = span.partition(" ")
    if not PROGRAM.fullmatch(program) or not synopsis or TEMPLATE.search(synopsis):
        return None
    return None if synopsis.split()[0] in HYPOTHETICAL else synopsis


def _inline_commands() -> list[InlineCommand]:
    out = []
    for page in PAGES:
        prose = _prose(page.read_text())
        for span in SPAN.finditer(prose):
            text = " ".join(span["code"].split())
            if (synopsis := _synopsis(text)) is not None:
                line = prose.count("\n", 0, span.start()) + 1
                out.append(InlineCommand(f"{page.relative_to(REPO)}:{line}", text, synopsis))
    return out


INLINE_COMMANDS = _inline_commands()


def _words(text: str) -> list[list[str]]:
    """The words of a stretch of a synopsis, each as its alternatives (the first is the default)."""
    out: list[list[str]] = []
    for word in shlex.split(text):
        if word == "..." and not (out and out[-1][0].startswith("-")):
            continue  # more of the same; after an option it is the option's value
        if word.endswith("...") and PLACEHOLDER.fullmatch(word[:-3]):
            word = word[:-3]  # NODE...
        out.append(word.split("|") if WORD_ALTERNATIVES.fullmatch(word) else [word])
    return out


def _one_at_a_time(words: list[list[str]]) -> list[list[str]]:
    """The defaults, then each other alternative of each word in turn."""
    defaults = [alternatives[0] for alternatives in words]
    return [defaults] + [
        [*defaults[:at], other, *defaults[at + 1 :]]
        for at, alternatives in enumerate(words)
        for other in alternatives[1:]
    ]


def _variants(synopsis: str) -> list[list[str]]:
    """The argument lists a synopsis stands for (the module docstring's rules)."""
    synopsis = synopsis.replace("\\|", "|")
    # Stretches of required words and optional groups in turn, each as its alternatives (one for a stretch).
    slots: list[tuple[bool, list[list[list[str]]]]] = []
    at = 0
    for group in OPTIONAL.finditer(synopsis):
        slots.append((False, [_words(synopsis[at : group.start()])]))
        slots.append((True, [_words(alternative) for alternative in OPTION_ALTERNATIVES.split(group[1])]))
        at = group.end()
    slots.append((False, [_words(synopsis[at:])]))
    every = [_one_at_a_time(alternatives[0])[0] for _, alternatives in slots]
    bare = [[] if optional else words for (optional, _), words in zip(slots, every, strict=True)]
    lines = [bare, every] + [
        [*bare[:at], variant, *bare[at + 1 :]]
        for at, (_, alternatives) in enumerate(slots)
        for alternative in alternatives
        for variant in _one_at_a_time(alternative)
    ]
    flat = [[word for slot in line for word in slot] for line in lines]
    return [argv for at, argv in enumerate(flat) if argv not in flat[:at]]


def _is_placeholder(value: object) -> bool:
    return isinstance(value, str) and PLACEHOLDER.fullmatch(value) is not None


class _ChoicesOrPlaceholder(list[Any]):
    def __contains__(self, value: object) -> bool:
        return _is_placeholder(value) or super().__contains__(value)


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(found[0].choices) if found else {}


def _taking_placeholders(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``parser`` with every argument that converts its value or has choices also taking a placeholder as is."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for subcommand in action.choices.values():
                _taking_placeholders(subcommand)
            continue
        if callable(action.type):
            action.type = _or_placeholder(action.type)
        if action.choices is not None:
            action.choices = _ChoicesOrPlaceholder(action.choices)
    return parser


def _or_placeholder(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    def converted(value: str) -> Any:
        return value if _is_placeholder(value) else convert(value)

    # argparse's "invalid <name> value" names the conversion
    converted.__name__ = getattr(convert, "__name__", "value")
    return converted


def _synopsis_parser(argv: list[str]) -> argparse.ArgumentParser:
    """The parser for ``argv``, taking placeholders: one per command (or per command line without one)."""
    command = next((word for word in argv if not word.startswith("-")), None)
    return _placeholder_parser((command,) if command else tuple(argv))


@functools.cache
def _placeholder_parser(argv: tuple[str, ...]) -> argparse.ArgumentParser:
    return _taking_placeholders(build_parser(argv))


def _command_path(argv: list[str]) -> list[str]:
    """The words of ``argv`` that name its command: ``analyze hang`` of ``analyze hang DIR --json``."""
    parser = _synopsis_parser(argv)
    path: list[str] = []
    while len(path) < len(argv) and argv[len(path)] in (subcommands := _subcommands(parser)):
        parser = subcommands[argv[len(path)]]
        path.append(argv[len(path)])
    return path


def _parse_error(argv: list[str]) -> str | None:
    """Why ``argv`` does not parse as a synopsis (None when it does, or when it names a command)."""
    if len(_command_path(argv)) == len(argv):
        return None
    err = io.StringIO()
    try:
        # --help and --version print and exit 0; a usage error prints why and exits 2
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            _synopsis_parser(argv).parse_args(argv)
    except SystemExit as exc:
        return None if exc.code == 0 else err.getvalue().strip().splitlines()[-1]
    return None


def test_the_docs_have_examples_of_each_kind() -> None:
    """The collection itself works: a change of fence or prompt style would otherwise test nothing."""
    assert sum(e.lang == "toml" for e in EXAMPLES) >= 3 and sum(e.lang == "sql" for e in EXAMPLES) >= 2
    assert sum(e.lang == "python" for e in EXAMPLES) >= 2
    assert len(COMMAND_LINES) >= 10
    assert {c.argv[0] for c in COMMAND_LINES} >= {"analyze", "sql", "status", "demo"}
    assert len(INLINE_COMMANDS) >= 100 and any("[" in c.text for c in INLINE_COMMANDS)
    assert any(_documented_run(e) for e in EXAMPLES if e.lang == "json")


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


def _run(argv: list[str], capfd: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """The exit status, stdout and stderr of ``ranksight argv``."""
    try:
        code = main(argv)
    except SystemExit as exc:  # --help, usage errors
        code = exc.code if isinstance(exc.code, int) else 2
    out, err = capfd.readouterr()
    return code, out, err


def _with_db(argv: list[str], db: Path) -> list[str]:
    """``argv`` answered from ``db``: its ``--db`` (a file the reader made, e.g. by a demo) replaced, or added."""
    if "--db" in argv:
        at = argv.index("--db")
        return [*argv[:at], *argv[at + 2 :], "--db", str(db)]
    return [*argv, "--db", str(db)]


def _answers_offline(argv: list[str]) -> bool:
    return argv[0] in OFFLINE or (argv[0] in HISTORY and "--follow" not in argv)


def _runs_offline(line: CommandLine) -> bool:
    return "--help" in line.argv or "-h" in line.argv or _answers_offline(line.argv)


def _offline_argv(argv: list[str], history: Path) -> list[str]:
    return _with_db(argv, history) if argv[0] in HISTORY else argv


@pytest.mark.parametrize("line", [c for c in COMMAND_LINES if _runs_offline(c)], ids=str)
def test_offline_command_lines_run(
    line: CommandLine, history: Path, offline: None, capfd: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(_offline_argv(line.argv, history), capfd)
    assert code == line.exit, f"{line}: exit {code}, said {line.exit}; stderr: {err[-2000:]}"
    assert "Traceback" not in err, f"{line}: {err}"


@pytest.mark.parametrize("example", [e for e in EXAMPLES if e.lang == "sql"], ids=str)
def test_sql_examples_run_on_the_history_tables(
    example: Example, history: Path, offline: None, capfd: pytest.CaptureFixture[str]
) -> None:
    for statement in filter(str.strip, example.text.split(";")):
        code, _, err = _run(["sql", "--db", str(history), statement.strip()], capfd)
        assert code == 0, f"{example}: {statement.strip()}: {err[-2000:]}"


@pytest.mark.parametrize("span", INLINE_COMMANDS, ids=str)
def test_inline_command_lines_parse(span: InlineCommand) -> None:
    for argv in _variants(span.synopsis):
        error = _parse_error(argv)
        assert error is None, f"{span}: as `ranksight {shlex.join(argv)}`: {error}"


def _json_values(text: str) -> list[Any]:
    """The block's value, or its values one a line (JSON Lines); when neither reads, the whole block's error."""
    try:
        return [json.loads(text)]
    except json.JSONDecodeError as whole:
        try:
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError:
            raise whole from None


def _documented_run(example: Example) -> list[str] | None:
    """The command line of the block's page that prints what the block shows, with ``--json``: one that answers
    offline, of the command the paragraph before the block names with ``--json``."""
    page = example.where.rsplit(":", 1)[0]
    for span in SPAN.finditer(example.lead):
        synopsis = _synopsis(" ".join(span["code"].split()))
        if synopsis is None or "--json" not in synopsis.split():
            continue
        path = _command_path(_variants(synopsis)[0])
        for line in COMMAND_LINES:
            if (
                line.where.startswith(f"{page}:")
                and line.argv[: len(path)] == path
                and _answers_offline(line.argv)
            ):
                return line.argv if "--json" in line.argv else [*line.argv, "--json"]
    return None


def _key_differences(documented: Any, printed: Any) -> list[str]:
    """Where ``documented`` has other keys than ``printed``: at the top level, and in the first object of each list
    both hold under a key."""
    pairs = [("the top level", documented, printed)]
    if isinstance(documented, dict) and isinstance(printed, dict):
        pairs += [
            (f"{key}[0]", documented[key][0], printed[key][0])
            for key in documented.keys() & printed.keys()
            if isinstance(documented[key], list)
            and isinstance(printed[key], list)
            and documented[key]
            and printed[key]
        ]
    return [
        f"{where}: documented {_keys(ours)}, printed {_keys(theirs)}"
        for where, ours, theirs in pairs
        if _keys(ours) != _keys(theirs)
    ]


def _keys(value: Any) -> list[str] | None:
    return sorted(value) if isinstance(value, dict) else None


@pytest.mark.parametrize("example", [e for e in EXAMPLES if e.lang == "json"], ids=str)
def test_json_examples_parse_and_have_the_keys_their_command_prints(
    example: Example, history: Path, offline: None, capfd: pytest.CaptureFixture[str]
) -> None:
    documented = _json_values(example.text)  # a JSONDecodeError names the line within the block
    if (run := _documented_run(example)) is None:
        return
    code, out, err = _run(_offline_argv(run, history), capfd)
    assert out.strip(), (
        f"{example}: `ranksight {shlex.join(run)}` printed nothing (exit {code}): {err[-2000:]}"
    )
    differences = _key_differences(documented[0], _json_values(out)[0])
    assert not differences, f"{example}: not what `ranksight {shlex.join(run)}` prints: {differences}"


# The checkers themselves, on made-up examples: each rule reads a synopsis as documented, each wrong one is caught.


def test_only_the_spans_the_docstring_names_are_left_out() -> None:
    assert _synopsis(".venv/bin/ranksight demo --nodes N") == "demo --nodes N"
    assert _synopsis("ranksight fanz") == "fanz"  # a misspelt command is checked, not left out
    assert [
        _synopsis(span) for span in ("ranksight", "ranksight <endpoint>", "ranksight fans", "make up")
    ] == [None] * 4


@pytest.mark.parametrize(
    ("synopsis", "argvs"),
    [
        (
            "alerts --state firing|all [--since AGO] [--json|--csv]",
            [
                ["alerts", "--state", "firing"],
                ["alerts", "--state", "firing", "--since", "AGO", "--json"],
                ["alerts", "--state", "all"],
                ["alerts", "--state", "firing", "--since", "AGO"],
                ["alerts", "--state", "firing", "--json"],
                ["alerts", "--state", "firing", "--csv"],
            ],
        ),
        (
            "node drain NODE... [--reason ...] [--allow CIDR ...] [...]",
            [
                ["node", "drain", "NODE"],
                ["node", "drain", "NODE", "--reason", "...", "--allow", "CIDR"],
                ["node", "drain", "NODE", "--reason", "..."],
                ["node", "drain", "NODE", "--allow", "CIDR"],
            ],
        ),
        (
            "silence add [--duration 1h\\|--until T]",
            [["silence", "add"], ["silence", "add", "--duration", "1h"], ["silence", "add", "--until", "T"]],
        ),
    ],
)
def test_a_synopsis_stands_for_these_command_lines(synopsis: str, argvs: list[list[str]]) -> None:
    assert _variants(synopsis) == argvs


@pytest.mark.parametrize(
    "argv",
    [
        ["analyze", "inspector", "DIR", "--jsn"],  # no such option
        ["analyze", "hung"],  # no such command
        ["alerts", "--state", "sometimes"],  # not one of the choices
        ["analyze", "hang", "DIR", "--world-size", "many"],  # not a number, nor a placeholder
        ["analyze", "hang", "--json"],  # an option shown, the required DIR left out
        ["silence", "add", "--matcher", "rule=x", "--comment"],  # an option without its value
    ],
)
def test_a_wrong_synopsis_is_found(argv: list[str]) -> None:
    assert _parse_error(argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["analyze", "hang", "DIR", "--world-size", "N", "--json"],
        ["alerts", "--state", "S"],
        ["analyze", "hang"],  # names the command
        ["sql", "--help"],
        ["--version"],
    ],
)
def test_a_synopsis_with_placeholders_parses(argv: list[str]) -> None:
    assert _parse_error(argv) is None


def test_json_blocks_are_one_document_or_json_lines() -> None:
    assert _json_values('{"a": [1,\n 2]}') == [{"a": [1, 2]}]
    assert _json_values('{"a": 1}\n{"a": 2}\n') == [{"a": 1}, {"a": 2}]
    with pytest.raises(json.JSONDecodeError):
        _json_values('{"stack": [...]}')


def test_documented_keys_are_compared_with_the_printed_ones() -> None:
    printed = {"findings": [{"kind": "k", "seq": 1}], "errors": []}
    assert not _key_differences({"findings": [{"seq": 2, "kind": "x"}], "errors": ["e"]}, printed)
    assert _key_differences({"findings": [], "error": []}, printed)  # a top-level key renamed
    assert _key_differences({"findings": [{"kind": "k"}], "errors": []}, printed)  # a record's key left out
    assert _key_differences(["findings"], printed)
