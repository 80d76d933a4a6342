"""The dispatcher imports only the module of the command being run; its table matches what the modules register; a query
command and ``--version`` stay light (benchmarks/cli.py measures their time)."""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys

import pytest

from ranksight.api.endpoints import COMMAND_GROUPS, SPECS
from ranksight.cli import COMMANDS, QUERY_COMMANDS, build_parser


def _registered(module: str) -> set[str]:
    sub = argparse.ArgumentParser().add_subparsers()
    importlib.import_module(module).register(sub)
    return set(sub.choices)


def _commands(parser: argparse.ArgumentParser) -> set[str]:
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return set(sub.choices)


def test_table_names_every_command_of_every_module() -> None:
    for module in set(COMMANDS.values()):
        assert _registered(module) == {name for name, owner in COMMANDS.items() if owner == module}, module
    assert QUERY_COMMANDS not in COMMANDS.values()


def test_every_endpoint_declaration_is_a_query_command_with_no_entry_of_its_own() -> None:
    """The extension recipe's claim (docs/extending.md): an EndpointSpec is its command; nothing to add to COMMANDS."""
    queries = _registered(QUERY_COMMANDS)
    assert queries == {spec.command_path[0] for spec in SPECS.values()}
    assert {spec.command_path[0] for spec in SPECS.values() if len(spec.command_path) > 1} == set(
        COMMAND_GROUPS
    )
    assert not queries & set(COMMANDS)
    for spec in SPECS.values():  # each parses as its own command, through the dispatcher
        argv = [*spec.command_path, "--help"]
        assert _commands(build_parser(argv)) == queries, spec.name


def test_a_command_brings_only_its_own_module() -> None:
    assert _commands(build_parser(["agent", "--only", "gpu"])) == {"agent"}
    # a query command brings the module of every query command (derived from the endpoint registry), nothing else
    assert _commands(build_parser(["sql", "SELECT 1"])) == _registered(QUERY_COMMANDS)
    assert {"sql", "nodes", "gpu-probes", "silence"} <= _registered(QUERY_COMMANDS)


def test_help_and_unknown_commands_see_every_command() -> None:
    for argv in ([], ["--help"], ["no-such-command"]):
        assert _commands(build_parser(argv)) == set(COMMANDS) | _registered(QUERY_COMMANDS)


# What a query command must not load: the aggregator's storage and analysis stack (the endpoint declarations and the
# client are apart from the server binding, ranksight.api), and what `--version` must not load either. The NATS client
# (and the aiohttp that nats-py imports when it is installed) is loaded only to ask over NATS, not to parse the command.
HEAVY = (
    "duckdb",
    "pyarrow",
    "numpy",
    "ranksight.aggregator",
    "ranksight.agent",
    "ranksight.deploy",
    "pydantic_settings",
    "dotenv",
)
NATS_CLIENT = ("nats", "aiohttp")


def _loaded_by(argv: list[str]) -> set[str]:
    """The modules a fresh interpreter holds after building the parser and parsing ``argv`` (``--version`` exits)."""
    code = (
        "import sys\nfrom ranksight.cli import build_parser\n"
        f"try:\n    build_parser({argv!r}).parse_args({argv!r})\nexcept SystemExit:\n    pass\n"
        "print('\\n'.join(sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return set(out.stdout.split())


def _settings_modules(modules: set[str]) -> set[str]:
    """The settings a command loads: each component's sections are declared beside it (a module named ``*settings``)
    and composed by ``ranksight.settings``; those modules and the packages above them (whose ``__init__`` runs) are
    not the component's stack."""
    found = {m for m in modules if m.startswith("ranksight.") and m.rpartition(".")[2].endswith("settings")}
    return found | {m.rsplit(".", depth)[0] for m in found for depth in range(1, m.count("."))}


def _heavy(modules: set[str]) -> list[str]:
    light = _settings_modules(modules)
    return sorted(m for m in modules - light if any(m == h or m.startswith(h + ".") for h in HEAVY))


def test_a_query_command_loads_no_storage_stack() -> None:
    for argv in (["status", "--json"], ["sql", "SELECT 1"], ["alerts", "--follow"], ["silence", "list"]):
        loaded = _loaded_by(argv)
        assert "ranksight.api.cli" in loaded  # it did build its command
        assert _heavy(loaded) == [], argv
        assert not {m.split(".")[0] for m in loaded} & set(NATS_CLIENT), argv


# A fresh interpreter runs `ranksight nodes` with api_url set against a stand-in HTTP API (a stdlib server answering
# one response), then reports what it was asked and which modules it loaded.
_OVER_HTTP = """
import json, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
asked = []
class Api(BaseHTTPRequestHandler):
    def do_GET(self):
        asked.append([self.path, self.headers.get("Authorization")])
        body = json.dumps({"ok": True, "rows": [{"node": "n1", "cluster": "c1", "state": "alive"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = ThreadingHTTPServer(("127.0.0.1", 0), Api)
threading.Thread(target=server.serve_forever, daemon=True).start()
import os
os.environ["RANKSIGHT_API_URL"] = f"http://127.0.0.1:{server.server_address[1]}"
os.environ["RANKSIGHT_AGGREGATOR__HTTP__TOKEN"] = "tk-1"
os.environ["RANKSIGHT_NATS__URL"] = "nats://127.0.0.1:1"  # nothing listens: only HTTP can answer
from ranksight.cli import main
code = main(["nodes", "--json", "--cluster", "c1", "--state", "alive"])
sys.stdout.flush()
print(json.dumps({"code": code, "asked": asked, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def test_a_query_command_over_http_loads_no_nats_client() -> None:
    done = subprocess.run([sys.executable, "-c", _OVER_HTTP], capture_output=True, text=True, timeout=120)
    report = json.loads(done.stderr.splitlines()[-1])
    assert report["code"] == 0, done.stderr
    assert json.loads(done.stdout)["rows"] == [{"node": "n1", "cluster": "c1", "state": "alive"}]
    assert report["asked"] == [["/api/nodes?cluster=c1&state=alive", "Bearer tk-1"]]
    loaded = set(report["modules"])
    assert _heavy(loaded) == [] and not {m.split(".")[0] for m in loaded} & set(NATS_CLIENT)


def test_only_read_only_endpoints_go_over_http_and_none_takes_a_list() -> None:
    """A query string carries one value per key: an endpoint on the HTTP API takes no list parameter."""
    from ranksight.api.endpoints import SPECS

    for spec in SPECS.values():
        if spec.http:
            lists = [f for f, info in spec.params.model_fields.items() if "list" in str(info.annotation)]
            assert lists == [], spec.name


def test_version_loads_almost_nothing() -> None:
    loaded = _loaded_by(["--version"])
    assert sorted(m for m in loaded if m.startswith("ranksight")) == [
        "ranksight", "ranksight.cli", "ranksight.core", "ranksight.core.version", "ranksight.errors",
    ]  # fmt: skip
    assert not {"pydantic", "nats", "msgspec"} & loaded


# A fresh interpreter asks over NATS (nothing listens: the command fails as unreachable, after loading its client).
_OVER_NATS = """
import json, os, sys
os.environ["RANKSIGHT_NATS__URL"] = sys.argv[1]
from ranksight.cli import main
code = main(["nodes", "--json"])
loaded = "aiohttp" in sys.modules and sys.modules["aiohttp"] is not None
print(json.dumps({"code": code, "nats": "nats" in sys.modules, "aiohttp": loaded, "entry": "aiohttp" in sys.modules}))
"""


@pytest.mark.parametrize(("url", "websocket"), [("nats://127.0.0.1:1", False), ("ws://127.0.0.1:1", True)])
def test_a_query_command_over_nats_loads_the_websocket_transport_only_for_ws_servers(
    url: str, websocket: bool
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _OVER_NATS, url], capture_output=True, text=True, timeout=120
    )
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["code"] != 0 and report["nats"], done.stderr  # it asked over NATS, and nothing answered
    assert report["aiohttp"] is websocket
    assert report["entry"] is websocket  # the refusal (a None entry) is taken back once the command is done
