"""What every subcommand shares: config flags, settings, running a coroutine with clean signal handling, output."""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import signal
import socket
import sys
from collections.abc import Sequence
from typing import Any, Protocol

from ranksight.core.config import ConfigError, View
from ranksight.core.redact import setup_logging

# The exit statuses are declared beside the errors they map from; command modules take them from here.
from ranksight.errors import EXIT_FAILED as EXIT_FAILED
from ranksight.errors import EXIT_INTERRUPTED, EXIT_OK, exit_status
from ranksight.errors import EXIT_USAGE as EXIT_USAGE


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="TOML config file (default: $RANKSIGHT_CONFIG)")
    parser.add_argument("--nats", metavar="URL", help="NATS server URL (overrides nats.url)")


def port_number(text: str) -> int:
    """argparse type of a TCP port flag: 0 (any free port) to 65535."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is not in 0-65535")
    return port


def add_http_port_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--http-port", type=port_number, metavar="PORT",
                        help="HTTP port (overrides aggregator.http.port; 0 picks a free one)")  # fmt: skip


def http_port_override(args: argparse.Namespace) -> dict[str, Any]:
    return {"aggregator": {"http": {"port": args.http_port}}} if args.http_port is not None else {}


def port_busy(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


class Listener(Protocol):
    """A section of something that listens on a port: the aggregator's HTTP server, the agent's probe server."""

    @property
    def enabled(self) -> bool: ...
    @property
    def port(self) -> int: ...


def ports_in_use(http: Listener, nats_port: int | None = None, probe: Listener | None = None) -> str | None:
    """Why this instance cannot start, when a fixed port it would listen on is taken (None: all free): its HTTP server's
    (``aggregator.http``), its NATS server's, its agent's probe server's (``agent.collectors.probe``). Said at once,
    rather than running without the part that could not bind."""
    wanted = [(nats_port, "--nats-port 0 picks a free one"),
              (http.port if http.enabled else None, "aggregator.http.port; --http-port 0 picks a free one"),
              (probe.port if probe and probe.enabled else None, "agent.collectors.probe.port; 0 picks a free one")]  # fmt: skip
    for port, how in wanted:
        if port and port_busy(port):
            return f"port {port} in use ({how})"
    return None


def settings_from_args(args: argparse.Namespace, view: type[View], **overrides: Any) -> View:
    """Load settings or exit 2 with the config error on stderr. Every command loads the root of the settings, which
    sits above every component: the dispatcher hands its loader in (``args.load_settings``, :mod:`ranksight.cli`);
    ``view`` is the part of it the command reads."""
    if getattr(args, "nats", None):
        overrides.setdefault("nats", {})["url"] = args.nats
    try:
        settings = args.load_settings(getattr(args, "config", None), **overrides)
    except ConfigError as exc:
        print(f"ranksight: configuration error: {exc}", file=sys.stderr)
        raise SystemExit(exit_status(exc)) from None
    if not isinstance(settings, view):
        raise TypeError(f"the root settings {type(settings).__name__} is not a {view.__name__}")
    setup_logging(settings.log_level)
    return settings


def interrupted_exit(signum: int | None) -> int:
    """The exit status of an interactive command: 130 after Ctrl-C (SIGINT), as a shell reports it; 0 when it ended
    by itself or was asked to stop (SIGTERM)."""
    return EXIT_INTERRUPTED if signum == signal.SIGINT else EXIT_OK


JSON_WRITE_CHUNK = 1 << 16


def print_json(obj: Any) -> None:
    # Encoded at once (json.dump's many small writes are several times slower on a 10,000-node answer), written in
    # pieces: one huge write to a reader that went away is not reported as a broken pipe.
    text = json.dumps(obj, default=str) + "\n"
    for start in range(0, len(text), JSON_WRITE_CHUNK):
        sys.stdout.write(text[start : start + JSON_WRITE_CHUNK])


# Column headers that say more than the field name once its unit suffix is gone.
_HEADERS = {"sclk_hz": "clock", "temperature_junction_c": "temp junction", "temperature_edge_c": "temp edge",
            "ecc_uncorrectable": "ecc uncorr", "utilization_pct": "util", "clock_skew_s": "clock skew"}  # fmt: skip


def header(column: str) -> str:
    """A column's header: ``memory_used_bytes`` -> ``MEMORY USED`` (its unit is in every cell), ``sclk_hz`` ->
    ``CLOCK``."""
    if column in _HEADERS:
        return _HEADERS[column].upper()
    for suffix in ("_us", *_UNITS):
        if column.endswith(suffix) and column != suffix.lstrip("_"):
            column = column.removesuffix(suffix)
            break
    return column.replace("_", " ").upper()


# What must not reach a terminal as it is: C0 and C1 controls (escape sequences retitle or clear it; a newline or a
# carriage return forges a row), the Unicode line and paragraph separators, and the bidirectional overrides (text
# that reads other than it is). Written as Python escapes (``\x1b``, ``\n``, ``\u202e``).
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# A spreadsheet runs a cell that begins with one of these as a formula (CSV injection): such text cells get a leading '.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def printable(text: str) -> str:
    """``text`` safe to print: every control character as its escape. Every table, CSV cell and plain line the CLI
    prints from data goes through here."""
    return _UNPRINTABLE.sub(lambda found: found.group().encode("unicode_escape").decode("ascii"), text)


def print_line(text: str, file: Any = None) -> None:
    """One line of plain output (to stdout, or ``file``), its data made :func:`printable`."""
    print(printable(text), file=file or sys.stdout)


def print_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    """A plain aligned table on stdout: readable headers (:func:`header`), numbers in human units (:func:`human`),
    every cell :func:`printable`."""
    cells = [[printable(human(c, r.get(c))) for c in columns] for r in rows]
    names = [printable(header(c)) for c in columns]
    widths = [max([len(n)] + [len(row[i]) for row in cells]) for i, n in enumerate(names)]
    print("  ".join(n.ljust(w) for n, w in zip(names, widths, strict=True)).rstrip())
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


def print_csv(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    """CSV on stdout: cells :func:`printable`, and text that a spreadsheet would run as a formula neutralized with a
    leading ``'`` (numbers stay numbers)."""
    writer = csv.writer(sys.stdout)
    writer.writerow([csv_text(c) for c in columns])
    for r in rows:
        writer.writerow([csv_cell(r.get(c)) for c in columns])


def csv_text(text: str) -> str:
    return printable("'" + text if text.startswith(_FORMULA_START) else text)


def csv_cell(value: Any) -> str:
    cell = _cell(value)
    return printable(cell) if isinstance(value, int | float) else csv_text(cell)


# Column-name suffix -> (unit, step, prefixes): records carry base units and say which in their field names.
_UNITS: dict[str, tuple[str, float, str]] = {
    "_per_s": ("/s", 1.0, " "),  # before "_s"
    "_bytes": ("B", 1024.0, " KMGTP"),  # memory: binary prefixes (KiB, MiB, GiB)
    "_bps": ("bit/s", 1000.0, " kMGT"),  # NIC and link rates are bits per second
    "_gbs": ("GB/s", 1.0, " "),
    "_hz": ("Hz", 1000.0, " kMGT"),
    "_w": ("W", 1.0, " "),
    "_c": ("C", 1.0, " "),
    "_pct": ("%", 1.0, " "),
    "_s": ("s", 1.0, " "),
}
# The exceptions to the suffixes: rates in bytes per second.
_BYTE_RATE_COLUMNS = frozenset({"mem_bandwidth_bps"})


def human(column: str, value: Any) -> str:
    """One table cell: ``memory_used_bytes`` 68719476736 -> ``64 GiB``, ``speed_bps`` 4e11 -> ``400 Gbit/s``,
    ``rtt_us`` 1500 -> ``1.5 ms``, ``power_w`` 291.5 -> ``292 W``; other numbers without exponents."""
    if isinstance(value, list) and all(isinstance(v, str | int | float) for v in value):
        return ", ".join(map(str, value)) or "-"  # ["INCOMPLETE"] reads INCOMPLETE in a table
    if isinstance(value, bool) or not isinstance(value, int | float):
        return _cell(value)
    if column.endswith("_us"):
        column, value = column[:-3] + "_s", value / 1e6
        if abs(value) < 1:
            return f"{_number(value * 1e3)} ms" if abs(value) >= 1e-3 else f"{_number(value * 1e6)} us"
    if column in _BYTE_RATE_COLUMNS:
        return _scaled(value, "B/s", 1000.0, " kMGT")
    for suffix, (unit, step, prefixes) in _UNITS.items():
        if column.endswith(suffix):
            return _scaled(value, unit, step, prefixes)
    return _number(value) if isinstance(value, float) else str(value)


def _scaled(value: float, unit: str, step: float, prefixes: str) -> str:
    power = 0
    while power < len(prefixes) - 1 and abs(value) >= step ** (power + 1):
        power += 1
    prefix = prefixes[power].strip()
    if prefix and step == 1024.0:
        prefix += "i"
    space = "" if unit[0] in "/%" else " "
    return f"{_number(value / step**power)}{space}{prefix}{unit}"


def _number(value: float, digits: int = 3) -> str:
    """``value`` to about ``digits`` significant digits, never in exponent form (no ``3e+08`` in a table)."""
    if value == 0 or not math.isfinite(value):
        return "0" if value == 0 else str(value)
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, dict | list):
        return json.dumps(value, default=str)
    return str(value)
