"""Drive the real, unmodified NCCL Inspector profiler plugin: a simulated job's operations go through the plugin's own
code, which writes the dump files (``<gethostname()>-pid<pid>.log``) exactly as inside a real NCCL job.

The plugin (``../shared/peers/inspector/libnccl-profiler-inspector-<version>.so``, built from NVIDIA/nccl tags
v2.28.9-1, v2.29.3-1 and v2.30.7-1 with CUDA stand-ins; see that folder's PROVENANCE.md) exports one symbol,
``ncclProfiler_v5``. Its layout, and those of the event descriptor and state-args unions, are declared here from the
facts of the plugin's ``nccl/profiler_v5.h`` of the same tags (the same layout in all three; ``ext-profiler/inspector/``
up to 2.29, ``plugins/profiler/inspector/`` in 2.30); the event-type bits and the ``ncclProfilerKernelChStop`` state
(22) from its ``nccl/profiler.h``; the calling order from NCCL's ``src/plugin/profiler.cc``:

- per communicator, ``init(&ctx, commHash, &mask, commName, nNodes, nRanks, rank, logFn)``; the returned mask says
  which events the plugin wants (2.28/2.29: collectives and kernel channels; 2.30 adds P2P), and NCCL starts no other;
- per operation, ``startEvent(Coll or P2p)`` and ``stopEvent`` at the launch, then per channel ``startEvent(KernelCh,
  parentObj=the op, pTimer=GPU start)``, ``recordEventState(KernelChStop, pTimer=GPU stop)`` and ``stopEvent`` when
  the kernel ends. The plugin takes the op's time from the pTimer values only (the longest channel, ns / 1000), so the
  driver makes all of an op's calls at the op's completion time: the dump thread sees the op exactly when it ends.

:func:`rank_main` is one rank's process (``python -m ranksight.simulate.inspector_plugin PLAN``): it takes its own
UTS namespace and its node's host name (``unshare(CLONE_NEWUTS)`` + ``sethostname``: needs root, as in CI), so the
plugin names its file after that node, then replays its operations on its own clock. A job of such processes is
:mod:`ranksight.simulate.plugin_job`. This module imports nothing else of ranksight: a rank's process starts fast.

Nothing of the plugin's code is copied; the structures are declared from the header's field list.
"""

from __future__ import annotations

import ctypes
import json
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ranksight.errors import RanksightError

PLUGIN_VERSIONS = ("2.28.9", "2.29.3", "2.30.7")
SAMPLED_VERSIONS = frozenset({"2.28.9", "2.29.3"})
DEFAULT_PLUGIN_DIR = Path(__file__).resolve().parents[3].parent / "shared" / "peers" / "inspector"

# nccl/profiler.h: event type bits and the kernel channel's stop state
PROFILE_COLL = 1 << 1
PROFILE_P2P = 1 << 2
PROFILE_KERNEL_CH = 1 << 6
KERNEL_CH_STOP = 22
_CLONE_NEWUTS = 0x04000000  # linux/sched.h
_DATATYPE = b"ncclInt8"  # one byte per element: count is the message size in bytes


class _GroupApi(ctypes.Structure):
    _fields_ = [("graphCaptured", ctypes.c_bool), ("groupDepth", ctypes.c_int)]


class _CollApi(ctypes.Structure):
    _fields_ = [("func", ctypes.c_char_p), ("count", ctypes.c_size_t), ("datatype", ctypes.c_char_p),
                ("root", ctypes.c_int), ("stream", ctypes.c_void_p), ("graphCaptured", ctypes.c_bool)]  # fmt: skip


class _P2pApi(ctypes.Structure):
    _fields_ = [("func", ctypes.c_char_p), ("count", ctypes.c_size_t), ("datatype", ctypes.c_char_p),
                ("stream", ctypes.c_void_p), ("graphCaptured", ctypes.c_bool)]  # fmt: skip


class _KernelLaunch(ctypes.Structure):
    _fields_ = [("stream", ctypes.c_void_p)]


class _Coll(ctypes.Structure):
    _fields_ = [("seqNumber", ctypes.c_uint64), ("func", ctypes.c_char_p), ("sendBuff", ctypes.c_void_p),
                ("recvBuff", ctypes.c_void_p), ("count", ctypes.c_size_t), ("root", ctypes.c_int),
                ("datatype", ctypes.c_char_p), ("nChannels", ctypes.c_uint8), ("nWarps", ctypes.c_uint8),
                ("algo", ctypes.c_char_p), ("proto", ctypes.c_char_p), ("parentGroup", ctypes.c_void_p)]  # fmt: skip


class _P2p(ctypes.Structure):
    _fields_ = [("func", ctypes.c_char_p), ("buff", ctypes.c_void_p), ("datatype", ctypes.c_char_p),
                ("count", ctypes.c_size_t), ("peer", ctypes.c_int), ("nChannels", ctypes.c_uint8),
                ("parentGroup", ctypes.c_void_p)]  # fmt: skip


class _ProxyOp(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_int), ("channelId", ctypes.c_uint8), ("peer", ctypes.c_int),
                ("nSteps", ctypes.c_int), ("chunkSize", ctypes.c_int), ("isSend", ctypes.c_int)]  # fmt: skip


class _ProxyStep(ctypes.Structure):
    _fields_ = [("step", ctypes.c_int)]


class _KernelCh(ctypes.Structure):
    _fields_ = [("channelId", ctypes.c_uint8), ("pTimer", ctypes.c_uint64)]


class _NetPlugin(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int64), ("data", ctypes.c_void_p)]


class _DescrUnion(ctypes.Union):
    _fields_ = [("groupApi", _GroupApi), ("collApi", _CollApi), ("p2pApi", _P2pApi),
                ("kernelLaunch", _KernelLaunch), ("coll", _Coll), ("p2p", _P2p), ("proxyOp", _ProxyOp),
                ("proxyStep", _ProxyStep), ("kernelCh", _KernelCh), ("netPlugin", _NetPlugin)]  # fmt: skip


class EventDescr(ctypes.Structure):
    """``ncclProfilerEventDescr_v5_t``: type, parent, rank, then the anonymous union."""

    _anonymous_ = ("u",)
    _fields_ = [("type", ctypes.c_uint64), ("parentObj", ctypes.c_void_p), ("rank", ctypes.c_int),
                ("u", _DescrUnion)]  # fmt: skip


class _StateProxyStep(ctypes.Structure):
    _fields_ = [("transSize", ctypes.c_size_t)]


class _StateProxyCtrl(ctypes.Structure):
    _fields_ = [("appendedProxyOps", ctypes.c_int)]


class _StateNetPlugin(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p)]


class _StateKernelCh(ctypes.Structure):
    _fields_ = [("pTimer", ctypes.c_uint64)]


class StateArgs(ctypes.Union):
    """``ncclProfilerEventStateArgs_v5_t``."""

    _fields_ = [("proxyStep", _StateProxyStep), ("proxyCtrl", _StateProxyCtrl), ("netPlugin", _StateNetPlugin),
                ("kernelCh", _StateKernelCh)]  # fmt: skip


# ncclDebugLogger_t is variadic; the plugin passes everything after ``fmt`` as varargs, which a callback declared with
# the fixed arguments only receives correctly (SysV x86-64: the fixed ones are in the same registers)
LOGGER = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_ulong, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p)
_INIT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint64, ctypes.POINTER(ctypes.c_int),
                         ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, LOGGER)  # fmt: skip
_START = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(EventDescr)
)
_STOP = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
_RECORD = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(StateArgs))
_FINALIZE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)


class ProfilerV5(ctypes.Structure):
    """``ncclProfiler_v5_t``: the plugin's one exported symbol."""

    _fields_ = [("name", ctypes.c_char_p), ("init", _INIT), ("startEvent", _START), ("stopEvent", _STOP),
                ("recordEventState", _RECORD), ("finalize", _FINALIZE)]  # fmt: skip


class PluginError(RanksightError, RuntimeError):
    """The plugin could not be loaded or refused a call."""


def plugin_path(version: str, plugin_dir: Path = DEFAULT_PLUGIN_DIR) -> Path:
    if version not in PLUGIN_VERSIONS:
        raise PluginError(f"unknown plugin version {version!r} (known: {', '.join(PLUGIN_VERSIONS)})")
    return plugin_dir / f"libnccl-profiler-inspector-{version}.so"


@dataclass
class _CommContext:
    ctx: ctypes.c_void_p
    mask: int


class Plugin:
    """The plugin loaded in this process, called as NCCL calls it. The process's environment must already hold the
    plugin's settings (it reads them at the first ``init``) and ``LD_LIBRARY_PATH`` its CUDA stand-ins."""

    def __init__(self, path: Path) -> None:
        if not path.is_file():
            raise PluginError(f"no plugin at {path}")
        stubs = path.parent / "stubs"
        # the stand-in runtime is the plugin's own dependency (rpath $ORIGIN/stubs): the same handle selects the device
        self._cudart = ctypes.CDLL(str(stubs / "libcudart.so.13"), mode=ctypes.RTLD_GLOBAL)
        self._lib = ctypes.CDLL(str(path))
        self.api = ProfilerV5.in_dll(self._lib, "ncclProfiler_v5")
        self.name = (self.api.name or b"").decode()
        self._start, self._stop, self._record = (
            self.api.startEvent,
            self.api.stopEvent,
            self.api.recordEventState,
        )
        self._logger = LOGGER(
            lambda level, flags, where, line, fmt: None
        )  # held: the plugin keeps the pointer
        self._comms: dict[int, _CommContext] = {}
        self._names: dict[str, bytes] = {}

    def set_device(self, device: int) -> None:
        self._cudart.cudaSetDevice(device)

    def init_comm(self, comm_hash: int, name: str | None, nnodes: int, nranks: int, rank: int) -> None:
        ctx, mask = ctypes.c_void_p(), ctypes.c_int(0)
        encoded = name.encode() if name else None
        rc = self.api.init(ctypes.byref(ctx), comm_hash, ctypes.byref(mask), encoded, nnodes, nranks, rank,
                           self._logger)  # fmt: skip
        if rc != 0 or not ctx.value:
            raise PluginError(
                f"init of communicator {comm_hash:#x} failed (result {rc}; NCCL_INSPECTOR_ENABLE=1?)"
            )
        self._comms[comm_hash] = _CommContext(ctx, mask.value)

    def wants(self, comm_hash: int, event_type: int) -> bool:
        return bool(self._comms[comm_hash].mask & event_type)

    def operation(
        self,
        comm_hash: int,
        rank: int,
        func: str,
        size: int,
        seq: int,
        peer: int,
        start_ns: int,
        stop_ns: int,
        channels: int = 2,
    ) -> None:
        """One collective (NCCL's ``seqNumber`` ``seq``) or Send/Recv (to ``peer``) of ``size`` bytes, start to
        kernel end, in NCCL's order; its GPU time is ``stop_ns - start_ns`` (the longest of its channels)."""
        p2p = func in ("Send", "Recv")
        event_type = PROFILE_P2P if p2p else PROFILE_COLL
        comm = self._comms[comm_hash]
        if not comm.mask & event_type:
            return  # NCCL starts no event the plugin did not ask for
        descr = EventDescr(type=event_type, rank=rank)
        name = self._names.setdefault(func, func.encode())
        if p2p:
            descr.p2p = _P2p(func=name, datatype=_DATATYPE, count=size, peer=peer, nChannels=channels)
        else:
            descr.coll = _Coll(seqNumber=seq, func=name, count=size, datatype=_DATATYPE, nChannels=channels, nWarps=16,
                               algo=b"RING", proto=b"SIMPLE")  # fmt: skip
        handle, kernel = ctypes.c_void_p(), ctypes.c_void_p()
        self._check(self._start(comm.ctx, ctypes.byref(handle), ctypes.byref(descr)))
        if not handle.value:
            return  # filtered by the plugin (2.30: under its minimum size)
        self._check(self._stop(handle))
        ch = EventDescr(type=PROFILE_KERNEL_CH, parentObj=handle, rank=rank)
        state = StateArgs()
        state.kernelCh.pTimer = stop_ns
        # channels start a little apart: channel 0, the longest, gives the op's time; each lasts at least 1 µs (the
        # plugin takes a channel's GPU time in whole µs and replaces a 0 by the CPU's time between our calls)
        apart_ns = max(0, min(1000, (stop_ns - start_ns - 1000) // channels))
        for channel in range(channels):
            ch.kernelCh.channelId, ch.kernelCh.pTimer = channel, start_ns + channel * apart_ns
            self._check(self._start(comm.ctx, ctypes.byref(kernel), ctypes.byref(ch)))
            self._check(self._record(kernel, KERNEL_CH_STOP, ctypes.byref(state)))
            self._check(self._stop(kernel))

    @staticmethod
    def _check(rc: int) -> None:
        if rc != 0:
            raise PluginError(f"plugin call failed (result {rc})")


# -- one rank's process ----------------------------------------------------------------------------------------------
def _set_hostname(name: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWUTS) != 0:
        raise PluginError(
            f"unshare(CLONE_NEWUTS): {os.strerror(ctypes.get_errno())} (a host name per node needs root)"
        )
    socket.sethostname(name)


def rank_main(plan_path: Path) -> None:
    """Run one rank's process from its plan (written by :func:`ranksight.simulate.plugin_job.run_job_through_plugin`);
    print how late (µs of this process's clock) it handed the plugin its ops, as one JSON line."""
    plan = json.loads(plan_path.read_text())
    _set_hostname(plan["hostname"])
    plugin = Plugin(Path(plan["plugin"]))
    plugin.set_device(plan["device"])
    for comm in plan["comms"]:
        plugin.init_comm(int(comm["hash"], 16), comm["name"], comm["nnodes"], comm["nranks"], comm["rank"])
    late_us = []
    # each op: [comm hash, rank, func, size, seqNumber, peer, exec µs, end µs on this process's clock]
    for comm_hash, rank, func, size, seq, peer, exec_us, end_us in plan["ops"]:
        wait = end_us / 1e6 - time.time()
        if wait > 0:
            time.sleep(wait)
        late_us.append(max(0, round(time.time() * 1e6) - end_us))
        plugin.operation(
            int(comm_hash, 16), rank, func, size, seq, peer, (end_us - exec_us) * 1000, end_us * 1000
        )
    # the plugin does not drain its buffers at finalize: its dump thread writes the last ops
    time.sleep(plan["drain_s"])
    late_us.sort()
    n = len(late_us)
    print(json.dumps({"ops": n, "late_p50_us": late_us[n // 2] if n else 0,
                      "late_p99_us": late_us[min(n - 1, n * 99 // 100)] if n else 0,
                      "late_max_us": late_us[-1] if n else 0}), flush=True)  # fmt: skip
    # no finalize: the 2.29.3 plugin's teardown races its own dump thread (it crashed here now and then), and every
    # plugin flushes its file after each dump, so leaving as a job that never destroys its communicators loses nothing
    os._exit(0)


if __name__ == "__main__":
    rank_main(Path(sys.argv[1]))
