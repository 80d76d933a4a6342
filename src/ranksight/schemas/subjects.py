"""The one place that knows the subject layout (design §2).

::

    <prefix>.ev.<cluster>.<node>.<kind>          agent -> aggregator, msgpack envelopes
    <prefix>.evp.<p>.<cluster>.<node>.<kind>     the same event as the sharded stream stores it: partition <p> of
                                                 (cluster, node), computed by NATS (the stream's subject transform)
    <prefix>.alert.<cluster>.<severity>.<rule>   aggregator -> anyone, JSON alerts
    <prefix>.api.<endpoint>                      aggregator query service (nats.micro), JSON
    <prefix>.api.shard.<shard_id>.<endpoint>     the same endpoints, answered by one aggregator shard only (the query
                                                 front asks each shard here)
    <prefix>.agent.<cluster>.<node>.<cmd>        per-agent service: status, probe

    _INBOX.<user>.<id>                           replies to a client logged in as NATS user <user> (one per node)

Tokens are limited to ``[A-Za-z0-9_-]``; anything else (dots in FQDNs, spaces, wildcards) is replaced by ``_`` so a
hostname can never change the shape of a subject.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ranksight.errors import ParseError

DEFAULT_PREFIX = "ranksight.v1"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_MAX_TOKEN = 128


class SubjectError(ParseError):
    """A subject that does not have the shape this helper builds."""


def sanitize_token(value: str) -> str:
    """Map any string to one safe subject token (never empty)."""
    token = _UNSAFE.sub("_", value.strip())[:_MAX_TOKEN]
    return token or "_"


def require_token(setting: str, value: str) -> str:
    """``value`` if it is a subject token as it stands; else :class:`SubjectError` naming the setting.

    Sanitizing is not one-to-one (``a.b`` and ``a_b`` both give ``a_b``): an agent whose name it changed would share a
    subject, and so its NATS permissions, with another node; agents therefore only run under names that are tokens."""
    if sanitize_token(value) != value:
        raise SubjectError(
            f"{setting} {value!r} is not a subject token (letters, digits, '_' and '-', at most {_MAX_TOKEN}): it "
            f"would publish as {sanitize_token(value)!r}, which another node's name may give too; set {setting} "
            f"to a token, e.g. {sanitize_token(value)!r}"
        )
    return value


# The RAS status-poll lease bucket (JetStream KV): the aggregator creates it at startup, agents hold keys
# ``<RAS_LEASE_KEY_PREFIX>.<job token>`` in it (and may touch nothing else: deploy/nats/nats-server.conf).
RAS_LEASE_BUCKET = "ranksight_ras_leases"
RAS_LEASE_KEY_PREFIX = "job"


def inbox_prefix(user: str) -> str:
    """The reply-subject prefix (setting ``nats.inbox_prefix``) of NATS user ``user``: the shipped NATS config
    (deploy/nats/nats-server.conf) lets each user subscribe to ``<this>.>`` only."""
    return f"_INBOX.{sanitize_token(user)}"


@dataclass(frozen=True)
class EventSubject:
    cluster: str
    node: str
    kind: str

    def names(self, cluster: str, node: str) -> bool:
        """Whether this subject is the one an agent of ``cluster``/``node`` publishes on (its identity's subject)."""
        return sanitize_token(cluster) == self.cluster and sanitize_token(node) == self.node


@dataclass(frozen=True)
class AlertSubject:
    cluster: str
    severity: str
    rule: str


@dataclass(frozen=True)
class Subjects:
    """Builds and parses every subject under one configurable prefix."""

    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        parts = self.prefix.split(".")
        if not parts or any(not p or _UNSAFE.search(p) for p in parts):
            raise SubjectError(f"invalid subject prefix {self.prefix!r}: dot-separated [A-Za-z0-9_-] tokens")

    # -- events -------------------------------------------------------------------------------------------------
    def event(self, cluster: str, node: str, kind: str) -> str:
        return f"{self.prefix}.ev.{sanitize_token(cluster)}.{sanitize_token(node)}.{sanitize_token(kind)}"

    def events_filter(self, cluster: str | None = None) -> str:
        """Wildcard over all events (of one cluster when given)."""
        return f"{self.prefix}.ev.{sanitize_token(cluster)}.>" if cluster else f"{self.prefix}.ev.>"

    def kind_filter(self, cluster: str, kind: str) -> str:
        """Wildcard over one kind of event of every node of a cluster."""
        return f"{self.prefix}.ev.{sanitize_token(cluster)}.*.{sanitize_token(kind)}"

    def parse_event(self, subject: str) -> EventSubject:
        """The event subject an agent published on, or the partitioned form the sharded stream stores it under."""
        if subject.startswith(f"{self.prefix}.evp."):
            rest = self._strip(subject, "evp")
            if len(rest) != 4 or not rest[0].isdigit():
                raise SubjectError(
                    f"partitioned event subject must be {self.prefix}.evp.<partition>.<cluster>.<node>.<kind>: "
                    f"{subject!r}"
                )
            return EventSubject(*rest[1:])
        rest = self._strip(subject, "ev")
        if len(rest) != 3:
            raise SubjectError(f"event subject must be {self.prefix}.ev.<cluster>.<node>.<kind>: {subject!r}")
        return EventSubject(*rest)

    # -- partitions (sharded aggregators, design §9) ---------------------------------------------------------------
    def partition_transform(self, partitions: int) -> tuple[str, str]:
        """The stream's subject transform (source, destination): NATS hashes (cluster, node) into one of
        ``partitions`` partitions, so a node's events always land in the same partition."""
        return (
            f"{self.prefix}.ev.*.*.*",
            f"{self.prefix}.evp.{{{{partition({partitions},1,2)}}}}.{{{{wildcard(1)}}}}.{{{{wildcard(2)}}}}"
            ".{{wildcard(3)}}",
        )

    def partition_filter(self, partition: int) -> str:
        """Every stored event of one partition."""
        return f"{self.prefix}.evp.{int(partition)}.>"

    def stored_kind_filter(self, kind: str, partitioned: bool) -> str:
        """Every stored event of one kind, of every node, as the stream stores it (partitioned or not)."""
        if partitioned:
            return f"{self.prefix}.evp.*.*.*.{sanitize_token(kind)}"
        return f"{self.prefix}.ev.*.*.{sanitize_token(kind)}"

    # -- alerts -------------------------------------------------------------------------------------------------
    def alert(self, cluster: str, severity: str, rule: str) -> str:
        return (
            f"{self.prefix}.alert.{sanitize_token(cluster)}.{sanitize_token(severity)}.{sanitize_token(rule)}"
        )

    def alerts_filter(self, cluster: str | None = None) -> str:
        return f"{self.prefix}.alert.{sanitize_token(cluster)}.>" if cluster else f"{self.prefix}.alert.>"

    def parse_alert(self, subject: str) -> AlertSubject:
        rest = self._strip(subject, "alert")
        if len(rest) != 3:
            raise SubjectError(
                f"alert subject must be {self.prefix}.alert.<cluster>.<severity>.<rule>: {subject!r}"
            )
        return AlertSubject(*rest)

    # -- query api and agent commands ---------------------------------------------------------------------------
    def api_group(self) -> str:
        return f"{self.prefix}.api"

    def api(self, endpoint: str) -> str:
        return f"{self.api_group()}.{sanitize_token(endpoint)}"

    def shard_api_group(self, shard_id: str) -> str:
        """One aggregator shard's own query service: its data alone, never gathered from the other shards."""
        return f"{self.api_group()}.shard.{sanitize_token(shard_id)}"

    def shard_api(self, shard_id: str, endpoint: str) -> str:
        return f"{self.shard_api_group(shard_id)}.{sanitize_token(endpoint)}"

    def agent_group(self, cluster: str, node: str) -> str:
        return f"{self.prefix}.agent.{sanitize_token(cluster)}.{sanitize_token(node)}"

    def agent(self, cluster: str, node: str, cmd: str) -> str:
        return f"{self.agent_group(cluster, node)}.{sanitize_token(cmd)}"

    # -- helpers ------------------------------------------------------------------------------------------------
    def _strip(self, subject: str, family: str) -> list[str]:
        head = f"{self.prefix}.{family}."
        if not subject.startswith(head):
            raise SubjectError(f"subject {subject!r} is not under {head}")
        return subject[len(head) :].split(".")
