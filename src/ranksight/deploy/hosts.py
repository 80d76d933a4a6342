"""The hosts file: one host per line, ``[user@]host[:port]`` (IPv6 as ``[addr]:port``), ``#`` comments, blank lines.

Parsing is pure; :class:`HostsFileError` names the offending line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ranksight.errors import UsageError
from ranksight.schemas.subjects import sanitize_token

_SPEC = re.compile(
    r"^(?:(?P<user>[^@\s]+)@)?(?:\[(?P<v6>[0-9A-Fa-f:.%]+)\]|(?P<host>[^:@\s\[\]]+))(?::(?P<port>\d+))?$"
)


class HostsFileError(UsageError, ValueError):
    """A hosts file line (or ``--jump`` value) is not ``[user@]host[:port]``."""


@dataclass(frozen=True)
class Host:
    host: str
    user: str | None = None
    port: int | None = None

    @property
    def name(self) -> str:
        """The host as the operator wrote it, without user or port: the table key."""
        return self.host

    @property
    def node(self) -> str:
        """The agent's node name: the host as written, as a subject token (an address or FQDN with '_' for '.')."""
        return sanitize_token(self.host)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        user = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port else ""
        return f"{user}{host}{port}"


def parse_host(spec: str) -> Host:
    match = _SPEC.match(spec.strip())
    if not match:
        raise HostsFileError(f"not [user@]host[:port]: {spec.strip()!r}")
    port = int(match["port"]) if match["port"] else None
    if port is not None and not 0 < port < 65536:
        raise HostsFileError(f"port out of range in {spec.strip()!r}")
    return Host(host=match["v6"] or match["host"], user=match["user"], port=port)


def parse_hosts(text: str, origin: str = "hosts file") -> list[Host]:
    """All hosts of a hosts file, in order, duplicates (same host name, or same node name) rejected."""
    hosts: list[Host] = []
    seen: set[str] = set()
    nodes: dict[str, str] = {}  # node name -> the host that gave it
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            host = parse_host(line)
        except HostsFileError as exc:
            raise HostsFileError(f"{origin}:{number}: {exc}") from None
        if host.name in seen:
            raise HostsFileError(f"{origin}:{number}: duplicate host {host.name!r}")
        if host.node in nodes:
            raise HostsFileError(
                f"{origin}:{number}: host {host.name!r} and host {nodes[host.node]!r} would both be node {host.node!r}"
            )
        seen.add(host.name)
        nodes[host.node] = host.name
        hosts.append(host)
    return hosts
