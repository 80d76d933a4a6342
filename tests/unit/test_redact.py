"""Secrets never reach a message or a log line: URL userinfo, token=/password= values, configured secret values."""

from __future__ import annotations

import logging

import pytest

from ranksight.core.redact import RedactingFilter, redact, secrets_of


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("nats://alice:s3cret@10.0.0.1:4222", "nats://alice:***@10.0.0.1:4222"),
        ("nats://s3cret@h:4222,tls://bob:s3cret@h2:4222", "nats://***@h:4222,tls://bob:***@h2:4222"),
        ("cannot connect to nats://u:s3cret@h: refused", "cannot connect to nats://u:***@h: refused"),
        ("token=s3cret password: s3cret", "token=*** password: ***"),
        (
            "nats://127.0.0.1:4222 and https://example.com/a@b",
            "nats://127.0.0.1:4222 and https://example.com/a@b",
        ),
    ],
)
def test_redact(text: str, shown: str) -> None:
    assert redact(text) == shown


def test_configured_secret_values_hidden_anywhere() -> None:
    from ranksight.settings import Settings

    settings = Settings(nats={"password": "pw-123", "token": "tk-456"})
    assert redact("auth pw-123 failed with tk-456", secrets_of(settings)) == "auth *** failed with ***"


def test_log_records_are_redacted(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("test.redact")
    caplog.handler.addFilter(RedactingFilter())
    try:
        raise ConnectionError("nats://alice:s3cret@h:4222 refused")
    except ConnectionError:
        logger.exception("connect to %s failed", "nats://alice:s3cret@h:4222")
    assert "s3cret" not in caplog.text and "nats://alice:***@h:4222" in caplog.text
