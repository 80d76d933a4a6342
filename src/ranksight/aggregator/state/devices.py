"""Live GPU and NIC state (design §5 "Reconcile"): the latest sample of each device, alive until receipt + TTL.

A device whose facts expired while its node still reports other devices of the same kind has *vanished* (a GPU that fell
off the bus, a NIC whose driver unbound); when the whole node goes quiet the devices are merely ``stale`` (node_silent
covers that). Runs of conditions that must persist (throttling, congestion), recent link flaps and error rates are
tracked here so the rules stay stateless; flaps and rates are kept as long as the longest window a rule counts them over
(``aggregator.hardware``). The hardware rules and the straggler evidence both read this one state. Pure: the clock is
the receipt time passed in.
"""

from __future__ import annotations

import weakref
from array import array
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

import numpy as np
from msgspec.structs import replace

from ranksight.aggregator.component_settings import HardwareAlertSettings
from ranksight.aggregator.forgetting import NodeKey, without_nodes
from ranksight.aggregator.timefmt import NS
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import GpuRecord, NicRecord

# sets of changed counter names remembered per set of a port's names (CounterNames.changes)
MAX_CHANGE_SETS = 64
DeviceStateName = Literal["alive", "stale", "vanished"]
R = TypeVar("R", GpuRecord, NicRecord)
T = TypeVar("T")
LINK_UP_STATES = {
    "up",
    "active",
    "unknown",
}  # netdev operstate / RDMA port state ("unknown": no carrier concept)


def link_up(record: NicRecord) -> bool:
    """Whether the port or netdev is up; one that reports no state counts as up."""
    return (record.state or "unknown").lower() in LINK_UP_STATES


@dataclass
class DeviceState(Generic[R]):
    cluster: str
    node: str
    key: str
    record: R
    last_seen_ns: int
    expires_ns: int
    state: DeviceStateName = "alive"
    since_ns: int | None = None  # start of the current run of the sustained condition (throttled / congested)
    # (receipt ns, transitions) and (receipt ns, error rate) of every sample within their windows; None while empty:
    # GPUs and most ports never have any, and an empty deque holds a 600-byte block (20 MB at 1024 nodes)
    flaps: deque[tuple[int, int]] | None = None
    rates: deque[tuple[int, float]] | None = None

    def flaps_since(self, since_ns: int) -> int:
        return sum(n for at, n in self.flaps or () if at >= since_ns)

    def mean_rate_since(self, since_ns: int, min_samples: int = 3) -> float | None:
        """The error rate averaged over the samples received since ``since_ns``; None with fewer than ``min_samples``."""
        window = [r for at, r in self.rates or () if at >= since_ns]
        return sum(window) / len(window) if len(window) >= min_samples else None


def _windowed(
    window: deque[tuple[int, T]] | None, new: list[tuple[int, T]], since_ns: int
) -> deque[tuple[int, T]] | None:
    """``window`` with ``new`` (receipt ns, value) appended and the entries received before ``since_ns`` dropped; None
    when that leaves nothing."""
    if window is None:
        if not new:
            return None
        window = deque()
    window.extend(new)
    while window and window[0][0] < since_ns:
        window.popleft()
    return window or None


class _DeviceTracker(Generic[R]):
    kinds: frozenset[str]
    flap_window_ns = rate_window_ns = 0  # how long flaps and error rates are kept

    def __init__(self) -> None:
        self.devices: dict[tuple[str, str, str], DeviceState[R]] = {}

    def _key(self, record: R) -> str:
        raise NotImplementedError

    def _sustained(self, record: R) -> bool:
        raise NotImplementedError

    def _flaps(self, record: R) -> int:
        return 0

    def _rate(self, record: R) -> float | None:
        return None

    def _current(self, previous: R | None, record: R) -> R:
        """The device's state after ``record``, given the record it had (None: none)."""
        return record

    def observe(self, env: Envelope, recv_ns: int) -> None:
        # A batch often holds several samples of each device, all received at once: fold them to the last sample
        # per device (what the device's state is now), keeping what the earlier ones say about flaps and
        # interruptions, so the per-device work below runs once per device, not once per sample.
        last: dict[str, R] = {}
        interrupted: set[str] = set()
        flaps: dict[str, int] = {}
        rates: dict[str, list[float]] = {}
        for record in env.records:
            name = self._key(record)
            last[name] = self._current(last.get(name), record)
            if (rate := self._rate(record)) is not None:
                rates.setdefault(name, []).append(rate)
            if not self._sustained(record):
                interrupted.add(name)
            if n := self._flaps(record):
                flaps[name] = flaps.get(name, 0) + n
        expires_ns = recv_ns + int(env.ttl * NS)
        for name, record in last.items():
            key = (env.cluster, env.node, name)
            state = self.devices.get(key)
            if state is None:
                state = self.devices[key] = DeviceState(
                    env.cluster, env.node, name, record, recv_ns, expires_ns
                )
            elif state.last_seen_ns > recv_ns:
                continue  # an older fact never replaces a newer one
            else:  # updated in place: nothing keeps a device's state across a tick
                record = state.record = self._current(state.record, record)
                state.state = "alive"
                state.last_seen_ns, state.expires_ns = recv_ns, expires_ns
            if not self._sustained(record):
                state.since_ns = None
            elif state.since_ns is None or name in interrupted:
                state.since_ns = recv_ns
            state.flaps = _windowed(state.flaps, [(recv_ns, flaps[name])] if name in flaps else [],
                                    recv_ns - self.flap_window_ns)  # fmt: skip
            state.rates = _windowed(state.rates, [(recv_ns, r) for r in rates.get(name, ())],
                                    recv_ns - self.rate_window_ns)  # fmt: skip

    def tick(self, now_ns: int) -> None:
        latest: dict[tuple[str, str], int] = {}
        for (cluster, node, _), dev in self.devices.items():
            latest[(cluster, node)] = max(latest.get((cluster, node), 0), dev.last_seen_ns)
        for (cluster, node, _), dev in self.devices.items():
            if now_ns < dev.expires_ns:
                dev.state = "alive"
            elif latest[(cluster, node)] > dev.expires_ns:
                dev.state = "vanished"  # its node kept reporting after this device's facts expired
            else:
                dev.state = "stale"

    def forget(self, nodes: set[NodeKey]) -> None:
        self.devices = without_nodes(self.devices, nodes)


class GpuTracker(_DeviceTracker[GpuRecord]):
    kinds = frozenset({"gpu"})

    def _key(self, record: GpuRecord) -> str:
        return str(record.index)

    def _sustained(self, record: GpuRecord) -> bool:
        return bool(record.throttled)


class NicTracker(_DeviceTracker[NicRecord]):
    kinds = frozenset({"nic"})

    def __init__(self, settings: HardwareAlertSettings | None = None) -> None:
        super().__init__()
        s = settings or HardwareAlertSettings()
        self.flap_window_ns, self.rate_window_ns = (
            int(s.nic_flap_window_s * NS),
            int(s.nic_errors_window_s * NS),
        )
        self.max_counters = s.nic_max_counters
        self._names = _CounterNamesTable()

    def _key(self, record: NicRecord) -> str:
        return record.name

    def _sustained(self, record: NicRecord) -> bool:
        return bool(record.congestion_per_s)

    def _flaps(self, record: NicRecord) -> int:
        return record.link_flaps

    def _rate(self, record: NicRecord) -> float | None:
        return record.errors_per_s

    def _current(self, previous: NicRecord | None, record: NicRecord) -> NicRecord:
        """A record of changed counters only adds them to the port's counters so far (whose completeness it keeps):
        the live port shows every counter's latest value. Bounded: a peer sending new names in every record of
        changes would otherwise grow the port's counters without end. The port's merged counters are compact
        (:class:`PortCounters`), copied from a received record once, then updated in place: a changed record costs its
        own counters, not the port's hundreds (607 per port of an AMD Pollara NIC)."""
        if record.counters_full or previous is None:
            # its own map, never changed here: made compact by the port's next record of changes
            return record
        counters = previous.counters
        # counted only near the bound: a count over every changed counter of every port was a tenth of ingest's loop
        if len(counters) + len(record.counters) > self.max_counters and (
            len(counters) + sum(name not in counters for name in record.counters) > self.max_counters
        ):
            return record
        merged = self._names.merge(counters, record.counters)
        return replace(record, counters=merged, counters_full=previous.counters_full)  # type: ignore[no-any-return]


class CounterNames:
    """The counter names of a port, in order, and each one's position: shared by every live port with the same names
    (the ports of one NIC model and driver all have them). ``changes`` remembers, per set of changed names a record
    brought (in its order), their positions: a port's traffic moves the same counters from one sample to the next, so
    a record of changes is applied in one NumPy assignment without looking its names up (bounded: a peer sending other
    names each time only misses)."""

    __slots__ = ("__weakref__", "changes", "names", "positions")

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self.positions = {name: i for i, name in enumerate(names)}
        self.changes: dict[tuple[str, ...], np.ndarray[Any, np.dtype[np.intp]]] = {}

    def positions_of(self, changed: tuple[str, ...]) -> np.ndarray[Any, np.dtype[np.intp]]:
        """The positions of ``changed``, names these names all have."""
        found = self.changes.get(changed)
        if found is None:
            found = np.fromiter(map(self.positions.__getitem__, changed), np.intp, len(changed))
            if len(self.changes) < MAX_CHANGE_SETS:
                self.changes[changed] = found
        return found


class PortCounters(Mapping[str, int]):
    """A live port's counters: the values in one int64 array (every counter is a BIGINT, ``STORED_BOUNDS``) over
    shared :class:`CounterNames`. At 1024 nodes x 8 ports of 607 ``ethtool -S`` counters, a dict per port (its table,
    a name and an int object per counter) held about 430 MB; this holds 40. Read like the dict it stands for;
    changed in place by its tracker only."""

    __slots__ = ("names", "numbers")

    def __init__(self, names: CounterNames, numbers: array[int]) -> None:
        self.names, self.numbers = names, numbers

    def __getitem__(self, name: str) -> int:
        return self.numbers[self.names.positions[name]]

    def __contains__(self, name: object) -> bool:
        return name in self.names.positions

    def __iter__(self) -> Iterator[str]:
        return iter(self.names.names)

    def __len__(self) -> int:
        return len(self.numbers)

    def __repr__(self) -> str:
        return f"PortCounters({dict(self)!r})"


class _CounterNamesTable:
    """Every distinct :class:`CounterNames` in use, once: a set is forgotten with the last port using it, so a peer
    sending new names costs only while its ports live."""

    def __init__(self) -> None:
        self._by_names: weakref.WeakValueDictionary[tuple[str, ...], CounterNames] = (
            weakref.WeakValueDictionary()
        )

    def _get(self, names: tuple[str, ...]) -> CounterNames:
        found = self._by_names.get(names)
        if found is None:
            found = self._by_names[names] = CounterNames(names)
        return found

    def merge(self, counters: Mapping[str, int], changed: Mapping[str, int]) -> PortCounters:
        """``counters`` with ``changed`` applied. A received record's map is copied compact; the tracker's own
        counters are updated in place, or, where ``changed`` names a counter the port did not have, copied over the
        names with the new ones appended."""
        if not isinstance(counters, PortCounters):
            counters = PortCounters(self._get(tuple(counters)), array("q", counters.values()))
        if isinstance(changed, PortCounters):  # the merge of several records of a port in one batch
            keys, values = changed.names.names, np.frombuffer(changed.numbers, np.int64)
        else:  # a record's values: BIGINTs (STORED_BOUNDS), as decoding checked
            keys, values = tuple(changed), np.fromiter(changed.values(), np.int64, len(changed))
        names = counters.names
        # names the port did not have (rare)
        if keys not in names.changes and not names.positions.keys() >= set(keys):
            new = [name for name in keys if name not in names.positions]
            names = self._get(names.names + tuple(new))
            counters = PortCounters(names, counters.numbers + array("q", (changed[name] for name in new)))
        np.frombuffer(counters.numbers, np.int64)[names.positions_of(keys)] = values
        return counters
