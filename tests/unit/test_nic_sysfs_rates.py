"""NIC sysfs reader on the captured tree, and rates on fake trees: wrap, reset, flaps, vanished devices."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from msgspec.structs import replace

from ranksight.agent.collectors.nic.rates import (
    ERROR_COUNTERS,
    ChangedCounters,
    RateTracker,
    counter_delta,
    counts_trouble,
)
from ranksight.agent.collectors.nic.sysfs import read_nics
from ranksight.agent.collectors.nic.tools import parse_ethtool_stats
from ranksight.aggregator.component_settings import HardwareAlertSettings
from ranksight.aggregator.state.devices import NicTracker, PortCounters
from ranksight.schemas.codec import decode_event, encode_event
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import NicRecord
from ranksight.schemas.structs import to_builtins
from ranksight.schemas.wire import event_type
from tests.gpu_nic_support import SYSFS_TREE, write_tree

IONIC = Path(__file__).resolve().parents[2] / "fixtures/metrics/nic/ionic/dme_ethtool_S_enp132s0.txt"

PORT = "class/infiniband/mlx5_0/ports/1"


def test_fixture_tree_ports_and_netdev() -> None:
    nics = {n.name: n for n in read_nics(SYSFS_TREE)}
    assert list(nics) == ["hfi1_0/1", "mlx4_0/1", "mlx4_0/2", "mlx5_0/1", "eth0"]
    mlx5 = nics["mlx5_0/1"]
    assert (mlx5.kind, mlx5.state, mlx5.phys_state, mlx5.link_layer) == (
        "rdma",
        "ACTIVE",
        "ACTIVE",
        "InfiniBand",
    )
    assert mlx5.speed_bps == 25e9
    assert mlx5.tx_bytes == 2880761508848 * 4 and mlx5.rx_bytes == 18126345378 * 4
    assert (mlx5.tx_packets, mlx5.rx_packets) == (10907922116, 541889824)
    assert mlx5.counters["roce_slow_restart_cnps"] == 131 and mlx5.counters["out_of_sequence"] == 1
    assert nics["hfi1_0/1"].phys_state == "LinkUp" and nics["hfi1_0/1"].speed_bps == 100e9
    eth0 = nics["eth0"]
    assert (eth0.kind, eth0.state, eth0.speed_bps, eth0.counters) == (
        "netdev",
        "up",
        1e9,
        {"carrier_changes": 2},
    )


@pytest.mark.parametrize(
    ("previous", "current", "delta"),
    [(10, 15, 5), (2**32 - 10, 5, 15), (2**64 - 1, 9, 10), (1000, 5, None), (5 * 10**12, 100, None)],
)
def test_counter_delta_wrap_and_reset(previous: int, current: int, delta: int | None) -> None:
    assert counter_delta(previous, current) == delta


def _port(root: Path, xmit: int, rcv: int, state: str = "4: ACTIVE", downed: int = 0, cnp: int = 0,
          errors: int = 0) -> None:  # fmt: skip
    write_tree(root, {
        f"{PORT}/state": state, f"{PORT}/rate": "200 Gb/sec (4X HDR)", f"{PORT}/counters/port_xmit_data": xmit,
        f"{PORT}/counters/port_rcv_data": rcv, f"{PORT}/counters/link_downed": downed,
        f"{PORT}/counters/symbol_error": errors, f"{PORT}/hw_counters/np_cnp_sent": cnp,
    })  # fmt: skip


def test_rates_wrap_reset_and_congestion(tmp_path: Path) -> None:
    tracker = RateTracker()
    _port(tmp_path, xmit=2**32 - 250, rcv=1000)
    (first,) = tracker.update(read_nics(tmp_path), at_s=100.0)
    assert first.tx_bps is None and first.interval_s is None
    _port(tmp_path, xmit=250, rcv=3000, cnp=4000, errors=6)  # xmit wrapped at 32 bits
    (second,) = tracker.update(read_nics(tmp_path), at_s=102.0)
    assert second.tx_bps == 500 * 4 * 8 / 2 and second.rx_bps == 2000 * 4 * 8 / 2
    assert second.congestion_per_s == 2000 and second.errors_per_s == 3 and second.counter_resets == 0
    _port(tmp_path, xmit=10, rcv=3500, cnp=4000)  # xmit and symbol_error reset (driver reload)
    (third,) = tracker.update(read_nics(tmp_path), at_s=104.0)
    assert third.tx_bps is None and third.rx_bps == 500 * 4 * 8 / 2
    assert third.counter_resets == 2 and third.congestion_per_s == 0


def test_link_flap_and_vanished_device(tmp_path: Path) -> None:
    tracker = RateTracker()
    write_tree(tmp_path, {"class/net/ens1/operstate": "up", "class/net/ens1/carrier_changes": 2,
                          "class/net/ens1/statistics/tx_bytes": 100})  # fmt: skip
    _port(tmp_path, xmit=0, rcv=0)
    tracker.update(read_nics(tmp_path), at_s=1.0)
    write_tree(tmp_path, {"class/net/ens1/operstate": "down", "class/net/ens1/carrier_changes": 3})
    _port(tmp_path, xmit=0, rcv=0, state="1: DOWN", downed=1)
    nics = {n.name: n for n in tracker.update(read_nics(tmp_path), at_s=3.0)}
    assert nics["ens1"].state == "down" and nics["ens1"].link_flaps == 1
    assert nics["mlx5_0/1"].state == "DOWN" and nics["mlx5_0/1"].link_flaps == 1
    write_tree(tmp_path, {"class/net/ens1/operstate": "up", "class/net/ens1/carrier_changes": 8})
    nics = {n.name: n for n in tracker.update(read_nics(tmp_path), at_s=5.0)}
    assert nics["ens1"].link_flaps == 5  # counter saw more transitions than the two samples show
    for path in sorted((tmp_path / "class/infiniband").rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    assert [n.name for n in tracker.update(read_nics(tmp_path), at_s=7.0)] == ["ens1"]
    _port(tmp_path, xmit=5, rcv=5)  # back: treated as new, no rates from a stale baseline
    back = {n.name: n for n in tracker.update(read_nics(tmp_path), at_s=9.0)}["mlx5_0/1"]
    assert back.tx_bps is None and back.counter_resets == 0


def test_virtual_netdevs_and_loopback_skipped(tmp_path: Path) -> None:
    write_tree(tmp_path, {"devices/virtual/net/veth0/operstate": "up", "class/net/lo/operstate": "unknown"})
    (tmp_path / "class/net/veth0").symlink_to(tmp_path / "devices/virtual/net/veth0")
    assert read_nics(tmp_path) == []
    assert [n.name for n in read_nics(tmp_path, netdevs=["veth0"])] == ["veth0"]


def _ionic(name: str = "enp132s0") -> NicRecord:
    return parse_ethtool_stats(IONIC.read_bytes(), name)


def test_changed_counters_between_full_records() -> None:
    port = _ionic()
    assert len(port.counters) == 607
    changes = ChangedCounters(full_every_s=60.0)
    (first,) = changes.thin([port], at_s=0.0)
    assert first.counters_full and first.counters == port.counters
    moved = replace(port, **{"counters": {**port.counters, "frames_rx_ok": port.counters["frames_rx_ok"] + 9,
                                                 "rx_crc_errors": 5}})  # fmt: skip
    (second,) = changes.thin([moved], at_s=2.0)
    assert not second.counters_full
    assert second.counters == {"frames_rx_ok": port.counters["frames_rx_ok"] + 9, "rx_crc_errors": 5}
    assert replace(second, **{"counters": {}}) == replace(moved, **{"counters": {}, "counters_full": False})
    (still,) = changes.thin([moved], at_s=4.0)
    assert still.counters == {} and not still.counters_full
    (due,) = changes.thin([moved], at_s=60.0)  # 60 s after the last full record
    assert due.counters_full and due.counters == moved.counters
    fewer = replace(moved, **{"counters": {k: v for k, v in moved.counters.items() if k != "rx_crc_errors"}})
    (gone,) = changes.thin([fewer], at_s=62.0)  # a vanished counter: only a full map says so
    assert gone.counters_full and gone.counters == fewer.counters
    assert changes.thin([], at_s=64.0) == []  # the port vanished: its return starts with every counter
    (back,) = changes.thin([fewer], at_s=66.0)
    assert back.counters_full


def test_changed_counters_every_record_full_at_zero() -> None:
    changes, port = ChangedCounters(full_every_s=0.0), _ionic()
    assert all(changes.thin([port], at_s=t)[0].counters_full for t in (0.0, 0.0, 2.0))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_changed_counters_latest_values_are_each_sample(seed: int) -> None:
    """What history reads (each counter's latest value, per port) equals every sample the agent read."""
    rng = random.Random(seed)
    ports = [_ionic(f"enp{i}s0") for i in range(3)]
    changes = ChangedCounters(full_every_s=10.0)
    latest: dict[str, dict[str, int]] = {p.name: {} for p in ports}
    for step in range(40):
        ports = [replace(p, **{"counters": {k: v + rng.choice((0, 0, 0, 1, 1000)) for k, v in p.counters.items()}})
                 for p in ports]  # fmt: skip
        for record in changes.thin(ports, at_s=step * 2.0):
            if record.counters_full:
                latest[record.name] = {}
            latest[record.name].update(record.counters)
        assert latest == {p.name: p.counters for p in ports}


def test_changed_traffic_counters_wait_those_of_trouble_do_not() -> None:
    port = _ionic()
    changes = ChangedCounters(full_every_s=60.0, traffic_every_s=10.0)
    (first,) = changes.thin([port], at_s=0.0)
    assert first.counters_full
    busy = _moved(port, frames_rx_ok=9, frames_rx_bad_fcs=5)
    (second,) = changes.thin([busy], at_s=2.0)
    assert (
        second.counters == {"frames_rx_bad_fcs": busy.counters["frames_rx_bad_fcs"]}
        and not second.counters_full
    )
    (third,) = changes.thin([busy], at_s=4.0)
    assert third.counters == {}  # the traffic counter still waits; the error counter did not move again
    (due,) = changes.thin(
        [_moved(busy, octets_rx_ok=7)], at_s=10.0
    )  # every traffic change since it was published
    assert due.counters == {"frames_rx_ok": busy.counters["frames_rx_ok"],
                            "octets_rx_ok": port.counters["octets_rx_ok"] + 7}  # fmt: skip
    (after,) = changes.thin([_moved(busy, octets_rx_ok=7, frames_rx_ok=1)], at_s=12.0)
    assert after.counters == {}


def test_counters_of_trouble_are_told_from_counters_of_traffic() -> None:
    trouble = [*ERROR_COUNTERS, "np_cnp_sent", "rp_cnp_handled", "np_ecn_marked_roce_packets", "rx_prio3_pause",
               "carrier_changes", "link_downed", "rx_dropped", "tx_discards", "req_tx_retry_excd_err",
               "rx_missed_errors", "frames_rx_bad_fcs", "rnr_nak_retry_err"]  # fmt: skip
    traffic = ["frames_rx_ok", "octets_tx_ok", "rx_3_bytes", "tx_12_pkts", "port_xmit_data", "port_rcv_packets",
               "frames_rx_1024b_1518b", "rx_0_cache_get", "unicast_xmit_packets", "rx_bytes"]  # fmt: skip
    assert all(map(counts_trouble, trouble)) and not any(map(counts_trouble, traffic))


@pytest.mark.parametrize("seed", [1, 2])
def test_with_traffic_counters_waiting_trouble_is_live_at_once_and_traffic_at_each_turn(seed: int) -> None:
    rng = random.Random(seed)
    ports = [_ionic(f"enp{i}s0") for i in range(2)]
    changes = ChangedCounters(full_every_s=30.0, traffic_every_s=6.0)
    latest: dict[str, dict[str, int]] = {p.name: {} for p in ports}
    for step in range(40):
        ports = [replace(p, **{"counters": {k: v + rng.choice((0, 0, 1, 1000)) for k, v in p.counters.items()}})
                 for p in ports]  # fmt: skip
        for record in changes.thin(ports, at_s=step * 2.0):
            if record.counters_full:
                latest[record.name] = {}
            latest[record.name].update(record.counters)
        for p in ports:
            assert {k: v for k, v in latest[p.name].items() if counts_trouble(k)} == {
                k: v for k, v in p.counters.items() if counts_trouble(k)
            }
        if step % 3 == 0:  # every 6 s (and with every full record, each 30 s): every counter
            assert latest == {p.name: p.counters for p in ports}
        else:
            assert latest != {p.name: p.counters for p in ports}


def _moved(port: NicRecord, **deltas: int) -> NicRecord:
    return replace(
        port, **{"counters": {**port.counters, **{k: port.counters[k] + d for k, d in deltas.items()}}}
    )


def test_the_live_port_shows_every_counters_latest_value() -> None:
    """The aggregator's live port (what ``nics`` answers) adds each record of changed counters to the port's
    counters so far; several samples of a port in one envelope all count."""
    changes, tracker, port = ChangedCounters(full_every_s=60.0), NicTracker(), _ionic()
    samples = [[port], [_moved(port, frames_rx_ok=5)], [_moved(port, frames_rx_ok=9), _moved(port, frames_rx_ok=9,
               octets_rx_ok=100)], [_moved(port, frames_rx_ok=9, octets_rx_ok=100)]]  # fmt: skip
    received = []
    for seq, batch in enumerate(samples, start=1):
        records = [changes.thin([sample], at_s=seq * 2.0)[0] for sample in batch]
        assert seq == 1 or not any(r.counters_full for r in records)
        env = Envelope(type=event_type("nic"), cluster="c", node="n", agent="a", seq=seq, ts=seq, ttl=6.0,
                       records=records)  # fmt: skip
        received.append((decode_event(encode_event(env)), [dict(r.counters) for r in records]))
        tracker.observe(received[-1][0], recv_ns=seq * 10**9)
        live = tracker.devices[("c", "n", "enp132s0")].record
        assert live.counters == batch[-1].counters and live.counters_full
    # merged in place, but never into a received record: each still holds what was sent
    assert all([r.counters for r in env.records] == sent for env, sent in received)
    fresh = NicTracker()  # an aggregator that has not seen the port's full record (yet) says so
    changed = replace(port, **{"counters": {"frames_rx_ok": 1}, "counters_full": False})
    fresh.observe(Envelope(type=event_type("nic"), cluster="c", node="n", agent="a", seq=1, ts=1, ttl=6.0,
                           records=[changed]), recv_ns=1)  # fmt: skip
    live = fresh.devices[("c", "n", "enp132s0")].record
    assert (live.counters, live.counters_full) == ({"frames_rx_ok": 1}, False)


def test_a_peer_naming_new_counters_in_every_record_is_bounded() -> None:
    """Records of changed counters, each with 1000 names never seen before: the live port keeps at most
    ``nic_max_counters`` of them, the record that would pass it standing alone (incomplete)."""
    tracker = NicTracker(HardwareAlertSettings(nic_max_counters=2500))
    port = NicRecord(name="eth9", kind="netdev", counters={"rx_bytes": 1})
    sizes = []
    for seq in range(1, 6):
        record = port if seq == 1 else replace(port, **{"counters": {f"c{seq}_{i}": i for i in range(1000)}, "counters_full": False})  # fmt: skip
        tracker.observe(Envelope(type=event_type("nic"), cluster="c", node="n", agent="a", seq=seq, ts=seq, ttl=6.0,
                                 records=[record]), recv_ns=seq)  # fmt: skip
        live = tracker.devices[("c", "n", "eth9")].record
        assert len(live.counters) <= 2500
        sizes.append((len(live.counters), live.counters_full))
    # 2 and 3 add up (2001 counters), 4 would pass 2500 and stands alone, 5 adds to it: incomplete from 4 on
    assert sizes == [(1, True), (1001, True), (2001, True), (1000, False), (2000, False)]


def test_changed_counters_near_the_bound_merge_when_they_add_no_name() -> None:
    """Near ``nic_max_counters`` a record of changed counters is still merged when all its names are known: the bound
    is on the names a port keeps, not on the sizes of its port and record added up."""
    tracker = NicTracker(HardwareAlertSettings(nic_max_counters=1200))
    full = NicRecord(name="eth9", kind="netdev", counters={f"c{i}": i for i in range(1000)})
    changed = replace(full, **{"counters": {f"c{i}": i + 1 for i in range(500)}, "counters_full": False})
    for seq, record in enumerate((full, changed), start=1):
        tracker.observe(Envelope(type=event_type("nic"), cluster="c", node="n", agent="a", seq=seq, ts=seq, ttl=6.0,
                                 records=[record]), recv_ns=seq)  # fmt: skip
    live = tracker.devices[("c", "n", "eth9")].record
    assert (len(live.counters), live.counters["c0"], live.counters["c999"], live.counters_full) == (
        1000,
        1,
        999,
        True,
    )


def test_live_ports_keep_their_counters_compact_over_shared_names() -> None:
    """From a port's first record of changes on, every live port of the same NIC model shares one set of counter
    names and keeps its values in one int64 array (not a dict per port); it reads, compares and serializes like the
    dict it stands for, a new name gives the port its own names, and names no live port uses any more are
    forgotten."""
    tracker, port = NicTracker(), _ionic()
    unchanged = replace(port, **{"counters": {}, "counters_full": False})
    for node in ("n1", "n2"):
        for seq, (record, count) in enumerate(((port, 1), (unchanged, 1), (unchanged, 2)), start=1):
            env = Envelope(type=event_type("nic"), cluster="c", node=node, agent="a", seq=seq, ts=seq, ttl=6.0,
                           records=[record] * count)  # fmt: skip
            tracker.observe(decode_event(encode_event(env)), recv_ns=seq)
    one, two = (tracker.devices[("c", n, port.name)].record.counters for n in ("n1", "n2"))
    assert isinstance(one, PortCounters) and one.names is two.names and one.numbers is not two.numbers
    assert one == port.counters and list(one) == list(port.counters) and one.numbers.itemsize == 8
    assert (
        list(one.values()) == list(port.counters.values())
        and tracker.devices[("c", "n1", port.name)].record.counters_full
    )
    assert to_builtins(tracker.devices[("c", "n1", port.name)].record)["counters"] == port.counters

    big = 2**63 - 1
    changed = replace(port, **{"counters": {"frames_rx_ok": big, "brand_new": 7}, "counters_full": False})
    later = replace(port, **{"counters": {"frames_tx_ok": 3}, "counters_full": False})
    env = Envelope(type=event_type("nic"), cluster="c", node="n1", agent="a", seq=4, ts=4, ttl=6.0,
                   records=[changed, later])  # fmt: skip
    tracker.observe(decode_event(encode_event(env)), recv_ns=4)
    one = tracker.devices[("c", "n1", port.name)].record.counters
    assert one == {**port.counters, "frames_rx_ok": big, "brand_new": 7, "frames_tx_ok": 3}
    assert (
        list(one)[-1] == "brand_new" and one.names is not two.names and two == port.counters
    )  # n2 untouched
    shared = two.names.names
    tracker.forget({("c", "n2")})
    del two
    assert shared not in tracker._names._by_names  # what live ports use, no more


def test_records_of_changes_apply_by_remembered_positions_within_a_bound() -> None:
    """A port's records of changes land on the right counters whether their set of names was seen before (its
    positions remembered) or not, in any order; a peer sending a new set of names in every record is applied as
    exactly and makes the remembered sets stop growing at their bound."""
    from ranksight.aggregator.state.devices import MAX_CHANGE_SETS

    tracker = NicTracker()
    full = NicRecord(name="eth9", kind="netdev", counters={f"c{i}": i for i in range(100)})
    expected = dict(full.counters)
    rng = random.Random(7)
    sets = [rng.sample(range(100), 10) for _ in range(4)]
    for seq in range(1, 3 * MAX_CHANGE_SETS):
        if seq == 1:
            record = full
        else:
            picked = sets[seq % 4] if seq % 2 else rng.sample(range(100), 10)  # seen sets, and ever new ones
            changes = {f"c{i}": seq * 1000 + i for i in picked}
            expected.update(changes)
            record = replace(full, **{"counters": changes, "counters_full": False})
        tracker.observe(Envelope(type=event_type("nic"), cluster="c", node="n", agent="a", seq=seq, ts=seq, ttl=6.0,
                                 records=[record]), recv_ns=seq)  # fmt: skip
        live = tracker.devices[("c", "n", "eth9")].record.counters
        assert dict(live) == expected
    assert isinstance(live, PortCounters) and len(live.names.changes) == MAX_CHANGE_SETS
