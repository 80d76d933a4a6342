"""Xid events: the kernel log parsers on the driver's lines as public sources print them (fixtures/kernel), the
``gpu_xid`` rule's classes and severities from NVIDIA's Xid catalog with overrides, and the events' lifetime."""

from __future__ import annotations

from pathlib import Path

import pytest

from ranksight.agent.collectors.xid_parse import KmsgParseError, parse_kmsg, parse_lines, parse_xid
from ranksight.aggregator.alerts import AlertEngine
from ranksight.aggregator.analysis.xid import GpuXidRule, resolution
from ranksight.aggregator.state import NS, LiveState
from ranksight.schemas.envelope import Envelope
from ranksight.schemas.records import GpuXidRecord
from ranksight.schemas.wire import event_type

KERNEL = Path(__file__).resolve().parents[2] / "fixtures" / "kernel"


def test_dmesg_lines_in_every_form() -> None:
    events = parse_lines((KERNEL / "nvidia-xid-dmesg-lines.txt").read_text())
    got = [(e.kind, e.code, e.pci, e.pid, e.process) for e in events]
    assert got == [
        ("xid", 13, "0000:cb:00", None, None),
        ("xid", 32, "0000:01:00", None, None),
        ("xid", 63, "0000:10:1c", 1896, None),
        ("xid", 79, "0000:00:01.0", None, None),
        ("xid", 79, "0000:3b:00", 1, "python3"),
        ("xid", 79, "0000:01:00", None, None),
        ("xid", 48, "0000:01:00", None, None),
        ("sxid", 11001, "0000:00:00.0", None, None),
        ("sxid", 12028, "0000:05:00.0", None, None),
    ]
    assert events[0].message.startswith("Graphics SM Warp Exception on (GPC 7, TPC 0, SM 0)")
    assert events[1].message == "Channel ID 00000009 intr 00800000"
    assert events[2].message == "Row Remapper: New row marked for remapping, reset gpu to activate."
    assert events[5].message == "" and events[7].message == "Fatal, ingress invalid command"


def test_kmsg_records_keep_their_sequence_and_skip_continuations() -> None:
    events = parse_lines((KERNEL / "nvidia-xid-kmsg.txt").read_text())
    assert [(e.code, e.kernel_seq, e.pid, e.process) for e in events] == [(79, 1022, 1234, "python"),
                                                                         (94, 1023, 1234, "python")]  # fmt: skip
    assert parse_kmsg("6,339,5140900,-;hello").seq == 339
    with pytest.raises(KmsgParseError):
        parse_kmsg("no prefix here")
    assert parse_xid("NVRM: GPU at PCI:0000:01:00: GPU-34d7") is None
    long = parse_xid("NVRM: Xid (PCI:0000:01:00): 31, pid=7, name=x, " + "y" * 5000)
    assert long is not None and len(long.message) == 1000


def _state(records: list[GpuXidRecord], node: str = "n1", ttl: float = 1800, recv_ns: int = NS) -> LiveState:
    state = LiveState()
    state.observe(Envelope(type=event_type("gpu_xid"), cluster="c", node=node, agent="a", seq=1, ts=0, ttl=ttl,
                           records=records), recv_ns)  # fmt: skip
    return state


def _xid(code: int, kind: str = "xid", message: str = "m", pci: str = "0000:3b:00") -> GpuXidRecord:
    return GpuXidRecord(kind=kind, code=code, pci=pci, message=message)  # type: ignore[arg-type]


def test_rule_classes_and_severities() -> None:
    state = _state([_xid(79), _xid(13, pci="0000:cb:00"), _xid(45, pci="0000:01:00"), _xid(99999, pci="0000:02:00"),
                    _xid(11001, "sxid", "Fatal, ingress invalid command", "0000:00:00.0")])  # fmt: skip
    found = {
        c.evidence["xid"]: (c.severity, c.evidence["resolution"]) for c in GpuXidRule().evaluate(state, NS)
    }
    assert found == {79: ("critical", "reboot"), 13: ("warning", "restart_app"), 99999: ("warning", "investigate"),
                     11001: ("critical", "drain")}  # fmt: skip  # 45 (preemptive cleanup) is ignored
    overridden = {c.evidence["xid"]: c.severity for c in GpuXidRule({"13": "drain"}).evaluate(state, NS)}
    assert overridden[13] == "critical" and resolution(13, {"13": "drain"}) == "drain"


def test_an_event_fires_once_counts_repeats_and_expires() -> None:
    state = _state([_xid(79)], ttl=60)
    state.observe(Envelope(type=event_type("gpu_xid"), cluster="c", node="n1", agent="a", seq=2, ts=0, ttl=60,
                           records=[_xid(79)]), 10 * NS)  # fmt: skip
    engine = AlertEngine()
    [fired] = engine.evaluate([GpuXidRule()], state, 11 * NS)
    assert fired.node == "n1" and fired.entity == "gpu 0000:3b:00" and "(2 times)" in fired.summary
    assert fired.evidence["count"] == 2
    state.tick(71 * NS)  # 60 s after the last one
    [resolved] = engine.evaluate([GpuXidRule()], state, 71 * NS)
    assert resolved.state == "resolved"
