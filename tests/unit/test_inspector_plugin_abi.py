"""The ctypes declarations of the Inspector plugin's ``ncclProfiler_v5`` interface, against the x86-64 SysV layout of
the C structs in the plugin's ``nccl/profiler_v5.h`` (NVIDIA/nccl v2.28.9-1 .. v2.30.7-1): a field out of place would
hand the plugin garbage. (The tests with the real plugin, tests/integration/test_inspector_plugin.py, show the whole
binding working.)"""

from __future__ import annotations

import ctypes

from ranksight.simulate.inspector_plugin import EventDescr, ProfilerV5, StateArgs, _Coll, _KernelCh, _P2p


def _offsets(struct: type[ctypes.Structure]) -> dict[str, int]:
    return {name: getattr(struct, name).offset for name, *_ in struct._fields_}


def test_the_event_descriptor_has_the_c_layout() -> None:
    assert _offsets(EventDescr) == {"type": 0, "parentObj": 8, "rank": 16, "u": 24}
    assert _offsets(_Coll) == {"seqNumber": 0, "func": 8, "sendBuff": 16, "recvBuff": 24, "count": 32, "root": 40,
                               "datatype": 48, "nChannels": 56, "nWarps": 57, "algo": 64, "proto": 72,
                               "parentGroup": 80}  # fmt: skip
    assert _offsets(_P2p) == {"func": 0, "buff": 8, "datatype": 16, "count": 24, "peer": 32, "nChannels": 36,
                              "parentGroup": 40}  # fmt: skip
    assert _offsets(_KernelCh) == {"channelId": 0, "pTimer": 8}
    assert ctypes.sizeof(EventDescr) == 24 + 88  # the union is as large as its largest member, coll


def test_the_state_args_and_the_plugin_struct_have_the_c_layout() -> None:
    assert ctypes.sizeof(StateArgs) == 8
    assert _offsets(ProfilerV5) == {"name": 0, "init": 8, "startEvent": 16, "stopEvent": 24, "recordEventState": 32,
                                    "finalize": 40}  # fmt: skip
