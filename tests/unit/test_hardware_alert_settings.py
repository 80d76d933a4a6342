"""``aggregator.hardware`` thresholds reach the hardware rules through ``default_rules(settings)``."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ranksight.aggregator.alerts import AlertEngine
from ranksight.aggregator.analysis.rules import default_rules
from ranksight.aggregator.state import LiveState
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import GpuRecord, NicRecord
from ranksight.schemas.wire import event_type
from ranksight.settings import Settings, load_settings

NS = 1_000_000_000


def _env(kind: str, records: list, seq: int) -> Envelope:
    return Envelope(
        type=event_type(kind), cluster="c", node="n1", agent="a", seq=seq, ts=0, ttl=60.0, records=records
    )


def _fired(settings: Settings, envelopes: list[tuple[float, Envelope]], now_s: float) -> set[str]:
    state, engine = LiveState(hardware=settings.aggregator.hardware), AlertEngine()
    for at_s, env in envelopes:
        state.observe(env, int(at_s * NS))
    state.tick(int(now_s * NS))
    engine.evaluate(default_rules(settings), state, int(now_s * NS))
    return {a.rule for a in engine.active.values()}


def test_gpu_thresholds_come_from_settings() -> None:
    warm = [(0.0, _env("gpu", [GpuRecord(index=0, temperature_edge_c=85.0, throttled=True)], 1)),
            (12.0, _env("gpu", [GpuRecord(index=0, temperature_edge_c=85.0, throttled=True)], 2))]  # fmt: skip
    assert _fired(Settings(), warm, 13) == set()  # 85 C < 90 C, throttled 12 s < 30 s
    tuned = Settings.model_validate(
        {"aggregator": {"hardware": {"gpu_edge_c": 80, "gpu_throttled_for_s": 10}}}
    )
    assert _fired(tuned, warm, 13) == {"gpu_overheating", "gpu_throttled"}


def test_nic_thresholds_come_from_settings() -> None:
    nic = [(float(t), _env("nic", [NicRecord(name="eth0", kind="netdev", state="up", errors_per_s=0.5,
                                             congestion_per_s=200.0)], t + 1)) for t in range(0, 12, 2)]  # fmt: skip
    assert _fired(Settings(), nic, 11) == set()
    tuned = Settings.model_validate(
        {
            "aggregator": {
                "hardware": {"nic_errors_per_s": 0.1, "nic_congestion_per_s": 100, "nic_congestion_for_s": 5}
            }
        }
    )
    assert _fired(tuned, nic, 11) == {"nic_errors_rising", "nic_congestion"}


def test_flap_and_error_windows_longer_than_the_defaults_count_every_sample_in_them() -> None:
    """The device state keeps flaps and error rates as long as the configured windows (it once kept 300 s / 600 s)."""
    tuned = Settings.model_validate(
        {"aggregator": {"hardware": {"nic_flap_window_s": 900, "nic_errors_window_s": 900}}}
    )
    flaps = [(0.0, _env("nic", [NicRecord(name="eth0", kind="netdev", state="up", link_flaps=3)], 1))]
    flaps += [
        (float(t), _env("nic", [NicRecord(name="eth0", kind="netdev", state="up")], t))
        for t in range(50, 550, 50)
    ]
    assert _fired(Settings(), flaps, 500) == set()  # 300 s window: the flaps 500 s ago are out of it
    assert _fired(tuned, flaps, 500) == {"nic_flapping"}
    errors = [(float(t), _env("nic", [NicRecord(name="eth0", kind="netdev", state="up", errors_per_s=2.0)], t + 1))
              for t in range(0, 110, 10)]  # fmt: skip
    errors += [(float(t), _env("nic", [NicRecord(name="eth0", kind="netdev", state="up", errors_per_s=0.0)], t))
               for t in range(200, 900, 100)]  # fmt: skip
    assert _fired(tuned, errors, 800) == {"nic_errors_rising"}  # 22 errors/s in 18 samples of the last 900 s


def test_hardware_section_from_env_and_unknown_keys_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANKSIGHT_AGGREGATOR__HARDWARE__NIC_FLAPS", "7")
    assert load_settings().aggregator.hardware.nic_flaps == 7
    with pytest.raises(ValidationError):
        Settings.model_validate({"aggregator": {"hardware": {"gpu_edge": 80}}})
