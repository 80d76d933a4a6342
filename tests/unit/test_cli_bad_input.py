"""No traceback ever reaches a user for bad input: every subcommand, run with bad arguments, bad config files and bad
input files, answers with a message and exit 1 (failed) or 2 (usage or configuration), never an exception.

The commands run in this process (``ranksight.cli.main``): an exception that escapes it fails the test with its traceback.
Commands that would reach NATS point at a port where nothing listens, with a short connect timeout.
"""

from __future__ import annotations

import argparse
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from ranksight.cli import build_parser, main


def _commands() -> dict[str, argparse.ArgumentParser]:
    def sub(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        found = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        return dict(found[0].choices) if found else {}

    out: dict[str, argparse.ArgumentParser] = {}
    for name, parser in sub(build_parser()).items():
        out.update({f"{name} {child}": p for child, p in sub(parser).items()} or {name: parser})
    return out


COMMANDS = _commands()


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bad")
    files = {
        "missing": root / "no-such-file",
        "directory": root / "a-directory",
        "empty": root / "empty",
        "binary": root / "binary",
        "bare-cr-csv": root / "bare-cr.csv",
        "not-utf8": root / "latin1.txt",
        "unknown-key-toml": root / "unknown.toml",
        "bad-value-toml": root / "bad-value.toml",
    }
    files["directory"].mkdir()
    files["empty"].write_bytes(b"")
    files["binary"].write_bytes(bytes(range(256)) * 8)
    files["bare-cr-csv"].write_bytes(b"index, name, utilization.gpu [%]\r0, GPU\x00\r1\r")
    files["not-utf8"].write_bytes("caf\xe9 = 1\n".encode("latin-1"))
    files["unknown-key-toml"].write_text('no_such_setting = 1\n[nats]\nurl = "nats://x:1"\n')
    files["bad-value-toml"].write_text('[aggregator]\nretention_days = "soon"\n')
    return files


@pytest.fixture(autouse=True)
def _unreachable_nats(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
        monkeypatch.setenv("RANKSIGHT_NATS__URL", f"nats://127.0.0.1:{sock.getsockname()[1]}")
        monkeypatch.setenv("RANKSIGHT_NATS__CONNECT_TIMEOUT_S", "0.3")
        monkeypatch.setenv("RANKSIGHT_STATE_DIR", str(tmp_path / "state"))
        yield


def _run(argv: list[str], capfd: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code if isinstance(exc.code, int) else 2
    err = capfd.readouterr().err
    return code, err


def _positionals(parser: argparse.ArgumentParser, value: str) -> list[str]:
    """``value`` for every positional argument and required option, so the command gets past argument parsing."""
    args = []
    for action in parser._actions:
        if not action.option_strings:
            args.append(value)
        elif action.required:
            choice = sorted(action.choices)[0] if action.choices else None
            timestamp = "2026-01-01" if action.option_strings[0] in ("--since", "--until") else None
            args += [action.option_strings[0], choice or timestamp or value]
    return args


def _assert_clean(argv: list[str], code: int, err: str) -> None:
    assert code in (1, 2), f"ranksight {' '.join(argv)}: exit {code}; stderr: {err[-1500:]}"
    assert "Traceback" not in err, f"ranksight {' '.join(argv)}: {err}"
    assert err.strip(), f"ranksight {' '.join(argv)}: failed without saying why"


@pytest.mark.parametrize("command", COMMANDS)
def test_unknown_flag_is_a_usage_error(command: str, capfd: pytest.CaptureFixture[str]) -> None:
    argv = [*command.split(), "--no-such-flag"]
    code, err = _run(argv, capfd)
    _assert_clean(argv, code, err)
    assert code == 2


@pytest.mark.parametrize(
    "config", ["missing", "directory", "binary", "not-utf8", "unknown-key-toml", "bad-value-toml"]
)
@pytest.mark.parametrize("command", [c for c, p in COMMANDS.items() if any("--config" in a.option_strings
                                                                          for a in p._actions)])  # fmt: skip
def test_a_bad_config_file_is_a_configuration_error(
    command: str, config: str, bad_files: dict[str, Path], capfd: pytest.CaptureFixture[str]
) -> None:
    parser = COMMANDS[command]
    argv = [
        *command.split(),
        *_positionals(parser, str(bad_files["empty"])),
        "--config",
        str(bad_files[config]),
    ]
    code, err = _run(argv, capfd)
    _assert_clean(argv, code, err)
    assert code == 2 and "configuration error" in err, err


FILE_COMMANDS = [
    c for c, p in COMMANDS.items() if any(not a.option_strings for a in p._actions) or c == "deploy"
]
# Long-running commands and those whose positional is not a file (sql, probe run) are covered elsewhere.
FILE_COMMANDS = [c for c in FILE_COMMANDS if c not in ("sql", "probe run")]


@pytest.mark.parametrize("bad", ["missing", "directory", "empty", "binary", "bare-cr-csv", "not-utf8"])
@pytest.mark.parametrize("command", FILE_COMMANDS)
def test_bad_input_files_fail_with_a_message(
    command: str, bad: str, bad_files: dict[str, Path], capfd: pytest.CaptureFixture[str]
) -> None:
    parser = COMMANDS[command]
    variants = [_positionals(parser, str(bad_files[bad]))]
    source = next((a for a in parser._actions if "--source" in a.option_strings), None)
    if source is not None and source.choices:  # parse gpu: every source format
        variants = [[str(bad_files[bad]), "--source", s] for s in source.choices]
    for args in variants:
        argv = [*command.split(), *args]
        code, err = _run(argv, capfd)
        _assert_clean(argv, code, err)


@pytest.mark.parametrize(
    "argv",
    [
        ["sql", ""],
        ["sql", "SELECT 1", "--max-rows", "many"],
        ["export", "--since", "yesterday", "--until", "2026-01-01", "/tmp"],
        ["probe", "run", "no-port-here"],
        ["probe", "run", "127.0.0.1:99999"],
        ["probe", "serve", "--port", "-5"],
        ["demo", "--nodes", "3"],
        ["up", "--nats-port", "http"],
        ["nodes", "--state", "sleepy"],
        ["status"],
        ["gpus", "--json"],
        ["alerts", "--follow"],
    ],
)
def test_bad_arguments_fail_with_a_message(argv: list[str], capfd: pytest.CaptureFixture[str]) -> None:
    code, err = _run(argv, capfd)
    _assert_clean(argv, code, err)


def test_version(capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capfd.readouterr().out.startswith("ranksight ")


def test_analyze_inspector_says_what_it_did_not_read(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Issue 47: an empty directory is nothing to analyze (exit 2, as a path that is no directory); a ``.json`` beside
    the dumps is named, not skipped silently; dumps without one record exit 1."""
    code, err = _run(["analyze", "inspector", str(tmp_path)], capfd)
    assert code == 2 and "no Inspector dump files" in err and "nothing to analyze" in err
    (tmp_path / "meta.json").write_text("{}")
    (tmp_path / "host-pid1.log").write_text("not json\n")
    code, err = _run(["analyze", "inspector", str(tmp_path)], capfd)
    assert code == 1 and "1 file not read" in err and "meta.json" in err and "1 bad lines" in err


def test_an_http_api_that_does_not_answer_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound, not listening
        monkeypatch.setenv("RANKSIGHT_API_URL", f"http://user:pw-9@127.0.0.1:{sock.getsockname()[1]}")
        code, err = _run(["nodes"], capfd)
    _assert_clean(["nodes"], code, err)
    assert code == 1 and "no aggregator answers on http://user:***@127.0.0.1" in err and "pw-9" not in err, (
        err
    )


def test_api_url_must_be_http(monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("RANKSIGHT_API_URL", "nats://127.0.0.1:4222")
    code, err = _run(["nodes"], capfd)
    assert code == 2 and "api_url" in err, err


def test_a_rule_name_no_rule_has_stops_the_aggregator_with_one_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "rules.toml"
    config.write_text(
        "[aggregator.alerts.rules.nic_error_rising]\nfor_s = 5\n"
    )  # nic_errors_rising, misspelt
    argv = ["aggregator", "--config", str(config)]
    code, err = _run(argv, capfd)
    _assert_clean(argv, code, err)
    assert code == 2 and "configuration error" in err and "unknown rule 'nic_error_rising'" in err, err
