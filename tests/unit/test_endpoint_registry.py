"""Each endpoint declared once in :mod:`ranksight.api.endpoints` gets one server binding (:mod:`aggregator.api.endpoints`),
its OpenAPI path (the read-only ones), and its ``ranksight`` command with ``--json`` and a flag per parameter (its
place in the docs: tests/unit/test_docs.py)."""

from __future__ import annotations

import argparse
import datetime
import json
import typing

import pytest

from ranksight.aggregator.api.endpoints import ENDPOINTS
from ranksight.aggregator.api.views import SERIES
from ranksight.aggregator.http.openapi import HTTP_ENDPOINTS, openapi_document
from ranksight.api.cli import command_params, print_rows
from ranksight.api.endpoints import SPECS
from ranksight.api.params import SeriesMetric
from ranksight.cli import build_parser
from ranksight.schemas.api import ApiResponse


def _command(path: tuple[str, ...]) -> argparse.ArgumentParser:
    parser = build_parser()
    for name in path:
        [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        parser = sub.choices[name]
    return parser


def test_the_openapi_document_has_exactly_the_http_endpoints() -> None:
    spec = openapi_document("0", secured=False)
    assert set(spec["paths"]) == {f"/api/{name}" for name in HTTP_ENDPOINTS}
    assert {"export", "drain", "silence_add", "silence_expire"}.isdisjoint(HTTP_ENDPOINTS)
    for name, endpoint in HTTP_ENDPOINTS.items():
        get = spec["paths"][f"/api/{name}"]["get"]
        assert [p["name"] for p in get["parameters"]] == list(endpoint.params.model_fields), name
        assert {"200", "400", "403", "422", "500"} <= set(get["responses"])


def test_every_declared_endpoint_has_one_binding() -> None:
    assert list(ENDPOINTS) == list(SPECS)
    assert all(ENDPOINTS[name].spec is SPECS[name] for name in SPECS)
    assert set(typing.get_args(SeriesMetric)) == set(SERIES)  # the contract's metrics, each with its query


@pytest.mark.parametrize("name", SPECS)
def test_every_endpoint_has_a_command_with_json_and_a_flag_per_parameter(name: str) -> None:
    endpoint = SPECS[name]
    parser = _command(endpoint.command_path)
    dests = {a.dest for a in parser._actions}
    assert "json" in dests and "config" in dests and "nats" in dests
    assert set(endpoint.params.model_fields) <= dests
    assert parser.get_default("func").args == (endpoint,)


def test_flags_become_the_request_body() -> None:
    def body(*argv: str) -> dict[str, object]:
        args = build_parser().parse_args(list(argv))
        return command_params(args.func.args[0], args)

    assert body("nodes") == {}
    assert body("nodes", "--state", "stale", "--node", "n1") == {"state": "stale", "node": "n1"}
    assert body("sql", "SELECT 1", "--max-rows", "7", "--time-limit", "2.5") == {
        "sql": "SELECT 1",
        "max_rows": 7,
        "time_limit_s": 2.5,
    }
    assert body("silence", "list", "--all") == {"state": "all"}
    assert body("node", "drain", "a", "b", "--undrain") == {"nodes": ["a", "b"], "undrain": True}
    added = body("silence", "add", "-m", "rule=x", "-m", "node=y", "--created-by", "me")
    assert added == {"matchers": ["rule=x", "node=y"], "duration_s": 3600.0, "created_by": "me"}
    # the default duration is not sent beside --until (the two are exclusive)
    until = body("silence", "add", "-m", "rule=x", "--until", "2030-01-01", "--created-by", "me")
    assert until == {"matchers": ["rule=x"], "ends_at": "2030-01-01", "created_by": "me"}
    assert body("series", "--metric", "gpu_power_w", "--points", "10") == {
        "metric": "gpu_power_w",
        "points": 10,
    }
    since = datetime.datetime.fromisoformat(str(body("incidents", "--since", "1h")["since"]))
    ago = datetime.datetime.now(datetime.UTC) - since
    assert datetime.timedelta(minutes=59) < ago < datetime.timedelta(minutes=61)


@pytest.mark.parametrize(
    "argv", [["sql", " "], ["series", "--metric", "no_such_metric"], ["gpu-probes", "--limit", "1"]]
)
def test_bad_flags_are_usage_errors(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(argv)
    assert exc.value.code == 2


def test_json_is_the_one_shape_plus_the_keys_a_command_had(capsys: pytest.CaptureFixture[str]) -> None:
    response = ApiResponse.success([{"node": "n1", "alerts": []}], meta={"version": "1"})
    for argv, extra in [(["status", "--json"], {"nodes": response.rows, "aggregator": {"version": "1"}}),
                        (["jobs", "--json"], {"jobs": response.rows}), (["nodes", "--json"], {})]:  # fmt: skip
        args = build_parser().parse_args(argv)
        print_rows(args, response, args.func.args[0])
        assert json.loads(capsys.readouterr().out) == {**response.model_dump(), **extra}


def test_tables_and_notes(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["links"])
    skipped = {"skipped": [{"node": "n2", "reason": "no probe server"}]}
    print_rows(
        args,
        ApiResponse.success([{"src": "n1", "dst": "n3", "rtt_us": 1500}], meta=skipped),
        SPECS["links"],
    )
    out, err = capsys.readouterr()
    assert out.splitlines()[0].split()[:4] == ["CLUSTER", "SRC", "DST", "TRANSPORT"] and "1.5 ms" in out
    assert err == "ranksight: n2: no probe server\n"
