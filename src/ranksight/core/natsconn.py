"""Connect to NATS with the configured credentials and TLS; the one place that turns settings into connect options."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import ssl
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.errors import Error as NatsError

from ranksight.core.redact import redact
from ranksight.errors import RanksightError, UsageError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ranksight.core.config import NatsSettings

T = TypeVar("T")


NATS_SCHEMES = ("nats", "tls", "ws", "wss")


def server_urls(url: str) -> list[str]:
    """The servers of setting ``nats.url`` (comma-separated), or :class:`NatsUrlError` saying what is wrong with one:
    nats-py would take ``notaurl`` for a host name and ``http://...`` for a server, and fail on the name lookup."""
    servers = [u.strip() for u in url.split(",") if u.strip()]
    if not servers:
        raise NatsUrlError(f"nats.url {url!r} names no server: expected nats://host:port")
    for server in servers:
        parts = urlsplit(server)
        if "://" not in server:
            raise NatsUrlError(f"NATS URL {server!r} has no scheme: expected nats://host:port "
                               f"(or {', '.join(s + '://' for s in NATS_SCHEMES[1:])})")  # fmt: skip
        if parts.scheme not in NATS_SCHEMES:
            raise NatsUrlError(f"NATS URL {server!r} has the scheme {parts.scheme}://, not a NATS one "
                               f"({', '.join(s + '://' for s in NATS_SCHEMES)}); NATS clients use port 4222 by default")  # fmt: skip
        if not parts.hostname:
            raise NatsUrlError(f"NATS URL {server!r} names no host: expected {parts.scheme}://host:port")
        try:
            parts.port  # noqa: B018 - urlsplit checks the port when asked for it
        except ValueError as exc:
            raise NatsUrlError(f"NATS URL {server!r} has a bad port: {exc}") from None
    return servers


def connect_options(cfg: NatsSettings, name: str) -> dict[str, Any]:
    opts: dict[str, Any] = {
        "servers": server_urls(cfg.url),
        "name": name,
        "connect_timeout": cfg.connect_timeout_s,
        "max_reconnect_attempts": -1,
        "reconnect_time_wait": 0.5,
        "allow_reconnect": True,
        "inbox_prefix": cfg.inbox_prefix,
    }
    if cfg.user:
        opts["user"] = cfg.user
    if cfg.password:
        opts["password"] = cfg.password.get_secret_value()
    if cfg.token:
        opts["token"] = cfg.token.get_secret_value()
    if cfg.nkey_seed_file:
        opts["nkeys_seed"] = str(cfg.nkey_seed_file)
    if cfg.creds_file:
        opts["user_credentials"] = str(cfg.creds_file)
    if cfg.tls_ca_file or cfg.tls_cert_file:
        ctx = ssl.create_default_context(cafile=str(cfg.tls_ca_file) if cfg.tls_ca_file else None)
        if cfg.tls_cert_file:
            ctx.load_cert_chain(str(cfg.tls_cert_file), str(cfg.tls_key_file) if cfg.tls_key_file else None)
        opts["tls"] = ctx
    return opts


log = logging.getLogger(__name__)
MAX_VIOLATION_SUBJECTS = 256
_VIOLATION = re.compile(r'permissions violation for (publish|subscription) to "([^"]*)"', re.IGNORECASE)


@dataclass
class NatsProblems:
    """What the server refused this process (permission violations), by (operation, subject): the server drops the
    message and tells only the error callback, so a request on a refused subject would otherwise just time out."""

    violations: dict[tuple[str, str], int] = field(default_factory=dict)

    def note(self, exc: Exception) -> bool:
        """Record ``exc`` if it is a permission violation (logged as an error, with its subject, the first time)."""
        found = _VIOLATION.search(str(exc))
        if found is None:
            return False
        key = (found.group(1).lower(), _reserved_case(found.group(2)))
        if key not in self.violations and len(self.violations) >= MAX_VIOLATION_SUBJECTS:
            key = (key[0], "(further subjects)")  # bounded: a refused inbox per request would be endless
        if key not in self.violations:
            log.error(
                "NATS refused %s to %s: a permissions violation (this user's NATS permissions lack it)", *key
            )
        self.violations[key] = self.violations.get(key, 0) + 1
        return True

    def lines(self) -> list[str]:
        return [f"NATS permissions violation: {op} to {subject} ({n}x)"
                for (op, subject), n in sorted(self.violations.items())]  # fmt: skip


# nats-py hands the server's error line over lowercased: the reserved prefixes get their case back (ranksight's own
# subjects, buckets and tokens are lowercase already, but a stream name may read lowercased)
_RESERVED = {
    "$kv": "$KV",
    "$js": "$JS",
    "$js.api": "$JS.API",
    "$js.ack": "$JS.ACK",
    "$srv": "$SRV",
    "_inbox": "_INBOX",
}


def _reserved_case(subject: str) -> str:
    tokens = subject.split(".")
    for n in (2, 1):
        head = ".".join(tokens[:n])
        if head in _RESERVED:
            return ".".join([_RESERVED[head], *tokens[n:]])
    return subject


class NatsUnreachable(RanksightError, ConnectionError):
    """The first connection to NATS did not succeed: every server refused it, or none answered within
    ``nats.connect_timeout_s``."""


class NatsUrlError(NatsUnreachable, UsageError):
    """Setting ``nats.url`` is not a list of NATS URLs (so no server can be reached)."""


async def connect(cfg: NatsSettings, name: str, problems: NatsProblems | None = None, **extra: Any) -> Client:
    """A connected client, or :class:`NatsUnreachable` after ``cfg.connect_timeout_s``.

    nats-py retries its first connect for as long as reconnects are allowed (forever with ``max_reconnect_attempts``
    -1, and also with 0), so the first connect is bounded here; once connected, reconnects go on as configured.
    ``problems`` records the permission violations the server reports on this connection.
    """
    last_error: list[Exception] = []
    refused: set[int] = set()  # first-connect attempts refused, by attempt number
    all_refused = asyncio.Event()
    opts = connect_options(cfg, name)
    servers = len(opts["servers"])

    async def _remember(exc: Exception) -> None:
        # Reconnects are expected (server restarts); the publisher counts what they cost. Keep the last one as the
        # reason a first connect gives up.
        last_error[:] = [exc]
        if problems is not None:
            problems.note(exc)
        if isinstance(exc, ConnectionRefusedError) and not nc.is_connected:
            # nats-py tries the servers in turn: once each has refused, nothing listens on any; waiting out the
            # connect timeout would only delay the same answer
            refused.add(len(refused))
            if len(refused) >= servers:
                all_refused.set()

    opts.setdefault("error_cb", _remember)
    opts.update(extra)
    nc = Client()
    connecting = asyncio.ensure_future(nc.connect(**opts))
    refusal = asyncio.ensure_future(all_refused.wait())
    try:
        done, _ = await asyncio.wait({connecting, refusal}, timeout=cfg.connect_timeout_s,
                                     return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
        if connecting not in done:
            connecting.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await connecting
            raise ConnectionRefusedError("connection refused") if refusal in done else TimeoutError()
        connecting.result()
    except (TimeoutError, OSError, NatsError) as exc:
        with contextlib.suppress(Exception):
            await nc.close()
        reason = last_error[0] if isinstance(exc, TimeoutError) and last_error else exc
        if isinstance(reason, ConnectionRefusedError):
            why = f"cannot connect to NATS at {cfg.url}: connection refused (no NATS server listens there)"
        else:
            why = (
                f"cannot connect to NATS at {cfg.url} within {cfg.connect_timeout_s:g}s: {_describe(reason)}"
            )
        raise NatsUnreachable(redact(why)) from None
    finally:
        refusal.cancel()
    return nc


async def disconnect(nc: Client, timeout: float, drain: bool = False) -> None:
    """Drain (``drain``) or close ``nc`` within ``timeout``, never raising: with the server gone, nats-py's close can
    fail on the dead socket and its drain can wait for a reconnect that never comes."""
    if drain and nc.is_connected:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(nc.drain(), timeout)
    if not nc.is_closed:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(nc.close(), timeout)


# what JetStream answers (or fails to) while a cluster elects its meta and stream leaders: API requests time out,
# find no responder or get a 503; a publish into a stream without a leader yet gets no stream response
JETSTREAM_SETTLING = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.js.errors.ServiceUnavailableError,
    nats.js.errors.NoStreamResponseError,
)


async def once_jetstream_answers(action: Callable[[], Awaitable[T]], what: str, timeout_s: float) -> T:
    """``action`` (JetStream API calls or publishes), tried again while JetStream is still settling
    (:data:`JETSTREAM_SETTLING`) for up to ``timeout_s``; a refusal or any other error is raised at once, and so is the last try's."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    pause = 0.2
    while True:
        try:
            return await action()
        except JETSTREAM_SETTLING as exc:
            if asyncio.get_running_loop().time() + pause >= deadline:
                raise
            log.warning("%s: JetStream does not answer yet (%s); trying again", what, _describe(exc))
        await asyncio.sleep(pause)
        pause = min(2 * pause, 2.0)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "no answer"
    return str(exc) or type(exc).__name__
