"""GPU and NIC rules: the hardware evidence the straggler engine cites (design §5 "Analysis").

Thresholds are constructor arguments with production defaults, set from ``aggregator.hardware`` by :func:`hardware_rules`; ``sustained`` conditions must hold for ``*_for_s`` of
consecutive samples before they fire, so one throttled or congested sample raises nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ranksight.aggregator.alerts import Condition, RuleDoc
from ranksight.aggregator.component_settings import HardwareAlertSettings
from ranksight.aggregator.state import LiveState
from ranksight.aggregator.state.devices import DeviceState, link_up
from ranksight.aggregator.timefmt import NS, iso
from ranksight.schemas.records import GpuRecord, NicRecord


def _condition(
    dev: DeviceState[Any],
    rule: str,
    severity: str,
    summary: str,
    entity: str,
    ident: dict[str, Any],
    evidence: dict[str, Any],
) -> Condition:
    return Condition(
        rule=rule, severity=severity, cluster=dev.cluster, node=dev.node, key=dev.key,  # type: ignore[arg-type]
        entity=entity, summary=f"{dev.node} {summary}", evidence={**ident, "last_seen": iso(dev.last_seen_ns), **evidence},
    )  # fmt: skip


# The rule says which device it judges: the device trackers share one state class, so the rule names the kind.
def _gpu(dev: DeviceState[GpuRecord], rule: str, severity: str, summary: str, **evidence: Any) -> Condition:
    ident = {"gpu": dev.record.index, "gpu_uuid": dev.record.uuid}
    return _condition(dev, rule, severity, summary, f"gpu {dev.key}", ident, evidence)


def _nic(dev: DeviceState[NicRecord], rule: str, severity: str, summary: str, **evidence: Any) -> Condition:
    return _condition(dev, rule, severity, summary, f"nic {dev.key}", {"nic": dev.key}, evidence)


def _alive_gpus(state: LiveState) -> Iterator[DeviceState[GpuRecord]]:
    return (d for d in state.gpus.devices.values() if d.state == "alive")


def _alive_nics(state: LiveState) -> Iterator[DeviceState[NicRecord]]:
    return (d for d in state.nics.devices.values() if d.state == "alive")


class GpuEccUncorrectableRule:
    name = "gpu_ecc_uncorrectable"
    for_s, clear_s = 0.0, 300.0
    doc = RuleDoc("critical", "uncorrectable ECC errors counted")

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        for dev in _alive_gpus(state):
            count = dev.record.ecc_uncorrectable
            if count:
                yield _gpu(dev, self.name, "critical", f"GPU {dev.key}: {count} uncorrectable ECC errors",
                           ecc_uncorrectable=count, source=dev.record.source)  # fmt: skip


class GpuThrottledRule:
    name = "gpu_throttled"
    for_s, clear_s = 0.0, 120.0
    doc = RuleDoc(
        "warning",
        "throttled for `gpu_throttled_for_s` of samples",
        "`aggregator.hardware.gpu_throttled_for_s`",
    )

    def __init__(self, for_s: float = 30.0) -> None:
        self.for_ns = int(for_s * NS)

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        for dev in _alive_gpus(state):
            if dev.since_ns is not None and dev.last_seen_ns - dev.since_ns >= self.for_ns:
                reasons = dev.record.throttle_reasons
                yield _gpu(dev, self.name, "warning",
                           f"GPU {dev.key} throttled for {(dev.last_seen_ns - dev.since_ns) / NS:.0f}s "
                           f"({', '.join(reasons) or 'reason unknown'})",
                           reasons=reasons, since=iso(dev.since_ns), sclk_hz=dev.record.sclk_hz,
                           power_w=dev.record.power_w)  # fmt: skip


class GpuOverheatingRule:
    name = "gpu_overheating"
    for_s, clear_s = 30.0, 300.0
    doc = RuleDoc(
        "warning",
        "a temperature at its limit",
        "`aggregator.hardware.gpu_{edge,junction,memory}_c`",
    )

    def __init__(self, edge_c: float = 90.0, junction_c: float = 105.0, memory_c: float = 95.0) -> None:
        self.limits = {"temperature_edge_c": edge_c, "temperature_junction_c": junction_c,
                       "temperature_memory_c": memory_c}  # fmt: skip

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        for dev in _alive_gpus(state):
            hot = {f: getattr(dev.record, f) for f, limit in self.limits.items()
                   if (getattr(dev.record, f) or 0) >= limit}  # fmt: skip
            if hot:
                text = ", ".join(f"{f.split('_')[1]} {v:.0f}C" for f, v in hot.items())
                yield _gpu(dev, self.name, "warning", f"GPU {dev.key} overheating: {text}", **hot)


class GpuMissingRule:
    name = "gpu_missing"
    for_s, clear_s = 0.0, 60.0
    doc = RuleDoc("critical", "a GPU vanished while its node reports")

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        for dev in state.gpus.devices.values():
            if dev.state == "vanished":
                yield _gpu(dev, self.name, "critical", f"GPU {dev.key} ({dev.record.bus_id or '?'}) disappeared",
                           bus_id=dev.record.bus_id, uuid=dev.record.uuid)  # fmt: skip


class NicLinkDownRule:
    name = "nic_link_down"
    for_s, clear_s = 5.0, 60.0
    doc = RuleDoc("critical", "a port is down or vanished")

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        for dev in state.nics.devices.values():
            if dev.state == "vanished":
                yield _nic(dev, self.name, "critical", f"NIC {dev.key} disappeared", state="vanished")
            elif dev.state == "alive" and not link_up(dev.record):
                yield _nic(dev, self.name, "critical", f"NIC {dev.key} link is {dev.record.state}",
                           state=dev.record.state, phys_state=dev.record.phys_state)  # fmt: skip


class NicFlappingRule:
    name = "nic_flapping"
    for_s, clear_s = 0.0, 300.0
    doc = RuleDoc(
        "warning",
        "`nic_flaps` link changes in `nic_flap_window_s`",
        "`aggregator.hardware.nic_flaps`, `nic_flap_window_s`",
    )

    def __init__(self, flaps: int = 3, window_s: float = 300.0) -> None:
        self.flaps, self.window_ns = flaps, int(window_s * NS)

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        for dev in _alive_nics(state):
            count = dev.flaps_since(now_ns - self.window_ns)
            if count >= self.flaps:
                yield _nic(
                    dev,
                    self.name,
                    "warning",
                    f"NIC {dev.key} link changed {count} times in {self.window_ns // NS}s",
                    flaps=count,
                )


class NicErrorsRisingRule:
    """The error rate averaged over ``window_s`` (a stable window: per-sample rates of a counter read every few
    seconds jump between 0 and twice the true rate)."""

    name = "nic_errors_rising"
    for_s, clear_s = 30.0, 300.0
    doc = RuleDoc(
        "warning",
        "error rate, averaged over `nic_errors_window_s` (60 s), at `nic_errors_per_s`",
        "`aggregator.hardware.nic_errors_per_s`, `nic_errors_window_s`",
    )

    def __init__(self, per_s: float = 1.0, window_s: float = 60.0) -> None:
        self.per_s, self.window_ns = per_s, int(window_s * NS)

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        for dev in _alive_nics(state):
            rate = dev.mean_rate_since(now_ns - self.window_ns)
            if rate is not None and rate >= self.per_s:
                yield _nic(
                    dev,
                    self.name,
                    "warning",
                    f"NIC {dev.key} errors rising at {rate:.1f}/s over {self.window_ns // NS}s",
                    errors_per_s=round(rate, 3),
                    window_s=self.window_ns // NS,
                    last_errors_per_s=dev.record.errors_per_s,
                )


class NicCongestionRule:
    name = "nic_congestion"
    for_s, clear_s = 0.0, 120.0
    doc = RuleDoc(
        "warning",
        "CNP/ECN rate sustained `nic_congestion_for_s`",
        "`aggregator.hardware.nic_congestion_*`",
    )

    def __init__(self, per_s: float = 1000.0, for_s: float = 30.0) -> None:
        self.per_s, self.for_ns = per_s, int(for_s * NS)

    def evaluate(self, state: LiveState, now_ns: int) -> Iterator[Condition]:
        for dev in _alive_nics(state):
            rate = dev.record.congestion_per_s or 0.0
            if (
                rate >= self.per_s
                and dev.since_ns is not None
                and dev.last_seen_ns - dev.since_ns >= self.for_ns
            ):
                yield _nic(
                    dev,
                    self.name,
                    "warning",
                    f"NIC {dev.key} congested: {rate:.0f} CNP/ECN per s",
                    congestion_per_s=rate,
                    since=iso(dev.since_ns),
                )


def hardware_rules(settings: HardwareAlertSettings | None = None) -> list[Any]:
    """The hardware rules with the thresholds of ``settings`` (``aggregator.hardware``; defaults otherwise)."""
    s = settings or HardwareAlertSettings()
    return [
        GpuEccUncorrectableRule(), GpuThrottledRule(s.gpu_throttled_for_s),
        GpuOverheatingRule(s.gpu_edge_c, s.gpu_junction_c, s.gpu_memory_c), GpuMissingRule(),
        NicLinkDownRule(), NicFlappingRule(s.nic_flaps, s.nic_flap_window_s), NicErrorsRisingRule(s.nic_errors_per_s, s.nic_errors_window_s),
        NicCongestionRule(s.nic_congestion_per_s, s.nic_congestion_for_s),
    ]  # fmt: skip
