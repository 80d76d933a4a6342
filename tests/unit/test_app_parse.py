"""The agent's decoding of client datagrams: bad input gets a clear error, never a crash."""

from __future__ import annotations

import msgpack
import pytest

from ranksight.agent.collectors.app_parse import AppMessageError, Timeouts, parse_message

TIMEOUTS = Timeouts(
    heartbeat_s=30.0, initial_s=300.0, section_s=600.0, per_section={"checkpoint_save": 3600.0}
)
BASE = {"v": 1, "n": 1, "ts": 1_700_000_000_000_000_000, "pid": 77}


def pack(**extra: object) -> bytes:
    return msgpack.packb({**BASE, **extra})


def test_section_timeout_default_and_per_name() -> None:
    assert parse_message(pack(t="section_open", section="forward", sid=1), TIMEOUTS).timeout_s == 600.0
    assert (
        parse_message(pack(t="section_open", section="checkpoint_save", sid=2), TIMEOUTS).timeout_s == 3600.0
    )
    assert (
        parse_message(
            pack(t="section_open", section="checkpoint_save", sid=3, timeout_s=9), TIMEOUTS
        ).timeout_s
        == 9
    )


def test_numbers_in_another_form_are_read_as_the_model_read_them() -> None:
    rec = parse_message(pack(t="heartbeat", step="4", rank=2.0), TIMEOUTS)
    assert (rec.step, rec.rank) == (4, 2) and type(rec.step) is int


def test_unknown_keys_are_ignored_for_forward_compatibility() -> None:
    rec = parse_message(pack(t="heartbeat", step=4, future_key={"x": 1}), TIMEOUTS)
    assert (rec.event, rec.step, rec.pid, rec.timeout_s) == ("heartbeat", 4, 77, 30.0)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\xc1\xc1garbage", "not_msgpack"),
        (msgpack.packb([1, 2]), "not a map"),
        (msgpack.packb({**BASE, "v": 2, "t": "heartbeat"}), "unsupported wire version 2"),
        (pack(t="explode"), "event"),
        (pack(t="heartbeat", rank="zero"), "rank"),
        (msgpack.packb({"v": 1, "t": "marker", "n": 1, "ts": 1}), "pid"),
        (pack(t="marker", fields={"blob": [1, 2]}), "fields"),
    ],
)
def test_bad_messages_raise_app_message_error(data: bytes, reason: str) -> None:
    with pytest.raises(AppMessageError, match=reason):
        parse_message(data, TIMEOUTS)


def test_the_client_socket_variable_is_not_mistaken_for_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    from ranksight.settings import load_settings

    monkeypatch.setenv("RANKSIGHT_APP_SOCKET", "/tmp/elsewhere.sock")
    monkeypatch.setenv("RANKSIGHT_AGENT__COLLECTORS__APP__SECTION_TIMEOUTS", '{"checkpoint_save": 3600}')
    settings = load_settings(None)
    assert settings.agent.collectors.app.section_timeouts == {"checkpoint_save": 3600.0}
