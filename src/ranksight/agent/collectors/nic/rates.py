"""Rates from successive counter samples: wrap (32- and 64-bit), reset, link transitions, vanished devices.

A counter that went down either wrapped or was reset. Its width is inferred from the previous value (< 2**32: a 32-bit
counter, else 64-bit); it wrapped if the wrapped delta is under half the range, otherwise it was reset (driver reload,
``perfquery -R``) and that interval's delta is unknown, so rates that need it are null and ``counter_resets`` counts it.
A device that vanishes is forgotten: when it comes back its first sample has no rates, like a new device.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import msgspec

from ranksight.agent.collectors.nic.sysfs import RDMA_WORD_BYTES
from ranksight.agent.collectors.nic.tools import RDMA_RX_BYTES, RDMA_TX_BYTES
from ranksight.schemas.records import NicRecord

# counters whose increase means frames were lost or corrupted
ERROR_COUNTERS = frozenset({
    "symbol_error", "port_rcv_errors", "port_xmit_discards", "port_rcv_remote_physical_errors",
    "local_link_integrity_errors", "excessive_buffer_overrun_errors", "link_error_recovery",
    "port_rcv_switch_relay_errors", "port_xmit_constraint_errors", "port_rcv_constraint_errors",
    "out_of_sequence", "packet_seq_err", "local_ack_timeout_err",
    "rx_errors", "tx_errors", "rx_crc_errors", "rx_frame_errors", "tx_carrier_errors",
    # ionic (``rdma statistic``, ``ethtool -S``)
    "req_rx_pkt_seq_err", "resp_rx_outouf_seq", "req_tx_retry_excd_err", "tx_rdma_ack_timeout",
    "rx_rdma_mtu_discard_pkts", "frames_rx_bad_fcs", "hw_rx_over_errors", "hw_rx_missed_errors",
})  # fmt: skip
# counters whose increase means congestion control is acting: CNPs sent/handled, ECN-marked packets
CONGESTION_MARKS = ("cnp", "ecn")
# counters that count link transitions: netdev carrier up+down changes, RDMA link-down events
FLAP_COUNTERS = ("carrier_changes", "link_downed")
# what, in a counter's name, says it counts trouble (besides ERROR_COUNTERS): errors, drops and discards, congestion
# (CNP/ECN, pause and PFC frames), link transitions, retries and timeouts, frames missed or bad
TROUBLE_MARKS = (*CONGESTION_MARKS, "err", "drop", "discard", "pause", "pfc", "carrier", "link_down", "retr", "timeout",
                 "miss", "bad", "overrun")  # fmt: skip


@lru_cache(maxsize=8192)
def counts_trouble(name: str) -> bool:
    """Whether counter ``name`` counts trouble (published whenever it changes), not traffic (bytes, packets, frames by
    size or queue: published with the changes at most every ``traffic_every_s``)."""
    lowered = name.lower()
    return name in ERROR_COUNTERS or any(mark in lowered for mark in TROUBLE_MARKS)


def counter_delta(previous: int, current: int) -> int | None:
    """Increase from ``previous`` to ``current``, across a wrap; ``None`` when the counter was reset."""
    if current >= previous:
        return current - previous
    width = 2**32 if previous < 2**32 else 2**64
    wrapped = width - previous + current
    return wrapped if wrapped < width // 2 else None


@dataclass
class _Sample:
    at_s: float
    state: str | None
    counters: dict[str, int]


def _byte_keys(record: NicRecord) -> tuple[list[str], list[str], int]:
    """Counters summing to bytes sent and received, and their unit in bytes."""
    if record.kind == "rdma" and "port_xmit_data" not in record.counters:  # counters from ``rdma statistic``
        return (
            [k for k in RDMA_TX_BYTES if k in record.counters],
            [k for k in RDMA_RX_BYTES if k in record.counters],
            1,
        )
    if record.kind == "rdma":
        return ["port_xmit_data"], ["port_rcv_data"], RDMA_WORD_BYTES
    return ["tx_bytes"], ["rx_bytes"], 1


class RateTracker:
    """Keeps the previous sample of each device; :meth:`update` returns the records with rates filled in."""

    def __init__(self) -> None:
        self._previous: dict[str, _Sample] = {}

    def update(self, records: list[NicRecord], at_s: float) -> list[NicRecord]:
        out = []
        for record in records:
            previous = self._previous.get(record.name)
            self._previous[record.name] = _Sample(at_s, record.state, dict(record.counters))
            if previous is None or at_s <= previous.at_s:
                out.append(record)
                continue
            out.append(msgspec.structs.replace(record, **self._rates(record, previous, at_s - previous.at_s)))
        for name in set(self._previous) - {r.name for r in records}:
            del self._previous[name]  # vanished: a later return starts afresh
        return out

    @staticmethod
    def _rates(record: NicRecord, previous: _Sample, dt: float) -> dict[str, object]:
        deltas = {
            key: counter_delta(previous.counters[key], value)
            for key, value in record.counters.items()
            if key in previous.counters
        }

        def per_s(keys: list[str], scale: float = 1.0) -> float | None:
            values = [deltas.get(k) for k in keys]
            if not keys or any(v is None for v in values):
                return None
            return sum(v for v in values if v is not None) * scale / dt

        tx, rx, word = _byte_keys(record)
        flaps_counted = sum(deltas.get(k) or 0 for k in FLAP_COUNTERS)
        state_changed = int(previous.state is not None and record.state != previous.state)
        return {
            "interval_s": dt,
            "tx_bps": per_s(tx, word * 8) if tx and all(k in deltas for k in tx) else None,
            "rx_bps": per_s(rx, word * 8) if rx and all(k in deltas for k in rx) else None,
            "errors_per_s": per_s([k for k in deltas if k in ERROR_COUNTERS and deltas[k] is not None]),
            "congestion_per_s": per_s(
                [k for k in deltas if any(m in k.lower() for m in CONGESTION_MARKS) and deltas[k] is not None]
            ),
            "link_flaps": max(flaps_counted, state_changed),
            "counter_resets": sum(1 for d in deltas.values() if d is None),
        }


@dataclass
class _Published:
    full_at_s: float
    traffic_at_s: float  # when the port's record last carried its changed traffic counters
    counters: dict[str, int]  # each counter's value as last published


class ChangedCounters:
    """Keeps what each port's records said; :meth:`thin` leaves in a record only the counters that changed since they
    were last published, except on a port's first record and then at most every ``full_every_s`` (0: always), or when
    a counter vanished (which a map of changes cannot say): those carry every counter (``counters_full``). Of the
    changed counters, those that count trouble (:func:`counts_trouble`) go with every record, those that count traffic
    at most every ``traffic_every_s`` (0: with every record): under load every traffic counter moves every sample (an
    ionic port's 85 moving ``ethtool -S`` counters, 8 ports a node every 2 s, were most of a cluster's bytes on the
    wire and of the aggregator's NIC work), and their rates go with every record anyway."""

    def __init__(self, full_every_s: float, traffic_every_s: float = 0.0) -> None:
        self.full_every_s = full_every_s
        self.traffic_every_s = traffic_every_s
        self._published: dict[str, _Published] = {}

    def thin(self, records: list[NicRecord], at_s: float) -> list[NicRecord]:
        out = []
        for record in records:
            published = self._published.get(record.name)
            if (published is None or at_s - published.full_at_s >= self.full_every_s
                    or not published.counters.keys() <= record.counters.keys()):  # fmt: skip
                self._published[record.name] = _Published(at_s, at_s, dict(record.counters))
                out.append(record)
                continue
            last = published.counters
            changed = {key: value for key, value in record.counters.items() if last.get(key) != value}
            if at_s - published.traffic_at_s >= self.traffic_every_s:
                published.traffic_at_s = at_s
            else:  # the traffic counters wait: still changed, they go with the next record that carries them
                changed = {key: value for key, value in changed.items() if counts_trouble(key)}
            last.update(changed)
            out.append(msgspec.structs.replace(record, counters=changed, counters_full=False))
        for name in set(self._published) - {r.name for r in records}:
            del self._published[name]  # vanished: its return is a first record again
        return out
