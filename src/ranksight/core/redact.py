"""Secrets never reach a message or a log line: the one helper that every printed URL, error and log record goes
through.

``redact`` hides the userinfo of every URL in a text (``nats://user:pass@host`` -> ``nats://user:***@host``; a bare
token, ``nats://s3cr3t@host`` -> ``nats://***@host``) and the value of ``token=``/``password=``/``secret=``/``seed=``
pairs, and any configured secret value given (:func:`secrets_of`). Settings hold secrets as ``SecretStr`` (printed as
``**********``) already.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ranksight.core.config import CommonSettings


MASK = "***"
_URL_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^@/\s,'\"]+)@")
_SECRET_PAIR = re.compile(
    r"(?i)\b(?P<key>[a-z_]*(?:token|password|passwd|secret|seed))(?P<sep>\s*[=:]\s*)(?P<value>[^\s,;&'\"]+)"
)


def _userinfo(match: re.Match[str]) -> str:
    user, has_password, _ = match["userinfo"].partition(":")
    return f"{match['scheme']}{user + ':' + MASK if has_password else MASK}@"


def secrets_of(settings: CommonSettings) -> tuple[str, ...]:
    """The secret values of the NATS settings (password, token), to be hidden wherever they appear."""
    values = [settings.nats.password, settings.nats.token]
    return tuple(v.get_secret_value() for v in values if v is not None and v.get_secret_value())


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with URL credentials, ``token=...``-style values and each of ``secrets`` replaced by ``***``."""
    for secret in secrets:
        text = text.replace(secret, MASK)
    text = _URL_USERINFO.sub(_userinfo, text)
    return _SECRET_PAIR.sub(lambda m: f"{m['key']}{m['sep']}{MASK}", text)


class RedactingFilter(logging.Filter):
    """A handler filter that redacts each record's final message (arguments and exception text included)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        record.msg, record.args = redact(message), None
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


def redact_logs() -> None:
    """Install :class:`RedactingFilter` on every handler of the root logger."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())


def setup_logging(level: str) -> None:
    """Every long-running process's logging: to stderr at ``level``, each line with its time, secrets redacted."""
    logging.basicConfig(
        level=level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    redact_logs()
