"""The exception tree: every exception class of the product derives from RanksightError, no two share a name, each is
drawn in ranksight.errors' docstring, and the user-facing ones map to their documented exit and API statuses."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from types import ModuleType

import pytest

import ranksight.errors
from ranksight.agent.collectors.base import CollectorUnavailable
from ranksight.agent.collectors.gpu.amdsmi_lib import AmdSmiUnavailable
from ranksight.agent.collectors.gpu.nvml import NvmlUnavailable
from ranksight.agent.collectors.ras.errors import RasParseError, RasRefused, RasReplyError, RasTimeout
from ranksight.agent.probe.client import ProbeError
from ranksight.aggregator.api.endpoint import Forbidden
from ranksight.aggregator.api.sql import SqlFailed, SqlRefused
from ranksight.api.client import ApiUnavailable
from ranksight.api.contract import RequestError
from ranksight.core.config import ConfigError
from ranksight.core.natsconn import NatsUnreachable
from ranksight.deploy.hosts import HostsFileError
from ranksight.errors import RanksightError, api_status, exit_status

PRODUCT_PACKAGES = ("ranksight",)  # the one namespace: agent, aggregator, schemas and deploy live under it
# Modules that run as a separate program with an optional GPU stack; imported when it is there.
OPTIONAL_IMPORTS = {"torch"}


def product_modules() -> list[ModuleType]:
    modules = []
    for package_name in PRODUCT_PACKAGES:
        package = importlib.import_module(package_name)
        modules.append(package)
        for info in pkgutil.walk_packages(package.__path__, f"{package_name}."):
            try:
                modules.append(importlib.import_module(info.name))
            except ModuleNotFoundError as exc:
                if exc.name not in OPTIONAL_IMPORTS:
                    raise
    return modules


def product_exceptions() -> list[type[BaseException]]:
    found = {
        cls
        for module in product_modules()
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if issubclass(cls, BaseException) and cls.__module__.split(".")[0] in PRODUCT_PACKAGES
    }
    return sorted(found, key=lambda c: (c.__module__, c.__qualname__))


def test_the_walk_finds_the_tree() -> None:
    names = {c.__name__ for c in product_exceptions()}
    assert {"ConfigError", "SqlRefused", "RasTimeout", "GpuToolParseError", "HostFailed"} <= names


def test_every_exception_derives_from_ranksight_error() -> None:
    strays = [
        f"{c.__module__}.{c.__qualname__}" for c in product_exceptions() if not issubclass(c, RanksightError)
    ]
    assert strays == []


def test_no_two_exceptions_share_a_name() -> None:
    seen: dict[str, str] = {}
    for cls in product_exceptions():
        where = f"{cls.__module__}.{cls.__qualname__}"
        assert cls.__name__ not in seen, f"{where} and {seen[cls.__name__]}"
        seen[cls.__name__] = where


def test_every_exception_is_drawn_in_the_tree() -> None:
    tree = ranksight.errors.__doc__ or ""
    missing = [
        c.__name__ for c in product_exceptions() if not re.search(rf"^[ │├└─]+{c.__name__}\b", tree, re.M)
    ]
    assert missing == []


def test_collectors_unavailable_share_one_base() -> None:
    assert issubclass(AmdSmiUnavailable, CollectorUnavailable)
    assert issubclass(NvmlUnavailable, CollectorUnavailable)


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (ConfigError("x"), 2),  # README: 2 usage or configuration error
        (HostsFileError("x"), 2),  # deploy: a bad hosts file is a usage error
        (RasRefused("x"), 3),  # ranksight ras: 3 no RAS endpoint answers
        (RasTimeout("x"), 3),
        (RasReplyError("ERROR: x"), 1),  # the endpoint refused the request
        (RasParseError("x"), 1),  # an unparseable file
        (NatsUnreachable("x"), 1),
        (ApiUnavailable("x"), 1),  # no aggregator answering
        (ProbeError("x"), 1),  # probe run: 1 probe failed
        (SqlRefused("x"), 1),  # a refused query
        (SqlFailed("x"), 1),
        (RuntimeError("x"), 1),  # not ours: an internal failure
    ],
)
def test_exit_status(exc: BaseException, status: int) -> None:
    assert exit_status(exc) == status


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (RequestError("x"), (400, "bad request")),
        (Forbidden("x"), (403, "refused")),
        (SqlRefused("x"), (403, "refused")),
        (SqlFailed("x"), (422, "query failed")),
        (ApiUnavailable("x"), None),  # 500: an internal error
        (KeyError("x"), None),
    ],
)
def test_api_status(exc: BaseException, status: tuple[int, str] | None) -> None:
    assert api_status(exc) == status


def test_builtin_bases_kept() -> None:
    """Older ``except ValueError`` / ``except ConnectionError`` clauses still catch what they caught."""
    assert issubclass(RequestError, ValueError) and issubclass(Forbidden, PermissionError)
    assert issubclass(NatsUnreachable, ConnectionError) and issubclass(RasParseError, ValueError)
