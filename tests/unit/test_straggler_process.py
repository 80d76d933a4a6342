"""The straggler engine in its own process (``aggregator.stragglers.process``): the same findings as the engine on a
thread from the same records, raw and summarized, and a process that dies is replaced with empty engines."""

from __future__ import annotations

import contextlib
import os
import signal
import time

from ranksight.aggregator.models.engines import EngineProcess
from ranksight.aggregator.models.straggler.settings import StragglerSettings
from ranksight.aggregator.state import NS, LiveState
from ranksight.formats.inspector import parse_op as parse
from ranksight.simulate.inspector import run_job, summarize
from tests.unit.test_stragglers_live import EPOCH_CLOCK_S, SPEC, envelope


def job_envelopes(summarized: set[str]) -> list:  # type: ignore[type-arg]
    """The simulated job's records per node: summaries from the nodes in ``summarized``, raw records from the rest."""
    timed = run_job(SPEC)[0]
    out, raw = [], {}
    for (host, _), lines in timed.items():
        raw.setdefault(host, []).extend(parse(x) for _, x in lines)
    for seq, (host, recs) in enumerate(sorted(raw.items()), start=1):
        if host in summarized:
            summaries = [x for _, x in summarize(sorted(recs, key=lambda r: r.dump_ts_us))]
            out.append(envelope("inspector_summary", host, seq, summaries))
        else:
            out.append(envelope("inspector", host, seq, recs))
    return out


def evaluated(state: LiveState, at_ns: int) -> None:
    """One background evaluation at ``at_ns``, waited for and picked up."""
    state.tick(at_ns)
    running = state.stragglers._running
    if running is not None:
        running.exception(timeout=60)
    state.tick(at_ns + 1)


def findings(state: LiveState) -> list[tuple[str, int | None, str, float, float]]:
    return [(f.hostname, f.pid, f.kind, f.slowdown, f.z) for f in state.stragglers.clusters["c"].findings]


def test_the_engine_process_finds_what_the_engine_thread_finds() -> None:
    results = {}
    for process in (True, False):
        state = LiveState()
        settings = StragglerSettings(
            clock_ahead_s=EPOCH_CLOCK_S,
            window_s=2.0,
            evaluate_every_s=1.0,
            retain_windows=10,
            process=process,
        )
        state.stragglers.configure(settings, background=True)
        try:
            state.tick(1 * NS)  # the first evaluation: nothing yet, so no process started
            assert state.stragglers._executor is None
            for env in job_envelopes(summarized={"node000", "node001"}):
                state.observe(env, 5 * NS)
            evaluated(state, 5 * NS)
            results[process] = (findings(state), state.stragglers.records)
            assert state.stragglers.in_process is process
            if (
                process
            ):  # the engine process loads the engines, not the aggregator's settings models or live state
                modules = (
                    state.stragglers._worker().submit(eval, "sorted(__import__('sys').modules)").result(60)
                )
                assert "ranksight.aggregator.models.engines" in modules
                assert [m for m in modules if m.split(".")[0] in ("pydantic", "duckdb", "pyarrow")
                        or m in ("ranksight.core.config", "ranksight.aggregator.models.straggler.settings",
                                 "ranksight.aggregator.state")] == []  # fmt: skip
        finally:
            state.stragglers.close()
    assert results[True] == results[False]
    found, records = results[True]
    assert [(host, pid) for host, pid, *_ in found] == [("node001", SPEC.pid(1, 2))] and records > 0


def test_an_engine_process_that_dies_is_replaced_with_empty_engines() -> None:
    state = LiveState()
    state.stragglers.configure(StragglerSettings(clock_ahead_s=EPOCH_CLOCK_S, window_s=2.0, evaluate_every_s=1.0, retain_windows=10),
                               background=True)  # fmt: skip
    envelopes = job_envelopes(summarized=set())
    try:
        state.tick(1 * NS)
        for env in envelopes:
            state.observe(env, 5 * NS)
        evaluated(state, 5 * NS)
        assert findings(state)
        executor = state.stragglers._executor
        assert isinstance(executor, EngineProcess)
        os.kill(executor.pid, signal.SIGKILL)
        executor.process.wait(30)
        for env in envelopes:  # the job's records again: a new process folds them into new engines
            state.observe(env, 10 * NS)
        evaluated(state, 10 * NS)
        assert state.stragglers.engine_restarts == 1
        assert state.stragglers._executor is not executor
        assert [(host, pid) for host, pid, *_ in findings(state)] == [("node001", SPEC.pid(1, 2))]
    finally:
        state.stragglers.close()


def test_an_engine_process_that_cannot_start_leaves_the_engine_on_a_thread(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    class NoProcesses:  # what a host without a working sem_open or fork/exec gives
        def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
            pass

        def submit(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            raise OSError("cannot start a process")

        def shutdown(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
            pass

    monkeypatch.setattr("ranksight.aggregator.state.stragglers.EngineProcess", NoProcesses)
    state = LiveState()
    state.stragglers.configure(StragglerSettings(clock_ahead_s=EPOCH_CLOCK_S, window_s=2.0, evaluate_every_s=1.0, retain_windows=10),
                               background=True)  # fmt: skip
    try:
        state.tick(1 * NS)
        for env in job_envelopes(summarized={"node002"}):
            state.observe(env, 5 * NS)
        evaluated(state, 5 * NS)
        assert state.stragglers.engine_restarts == 3 and not state.stragglers.in_process
        assert [(host, pid) for host, pid, *_ in findings(state)] == [("node001", SPEC.pid(1, 2))]
    finally:
        state.stragglers.close()


PARENT = """
import sys, time
sys.path.insert(0, {root!r})
from tests.unit.test_straggler_process import EPOCH_CLOCK_S, job_envelopes, evaluated
from ranksight.aggregator.state import NS, LiveState
from ranksight.aggregator.models.straggler.settings import StragglerSettings
state = LiveState()
state.stragglers.configure(StragglerSettings(clock_ahead_s=EPOCH_CLOCK_S, window_s=2.0, evaluate_every_s=1.0), background=True)
state.tick(1 * NS)
for env in job_envelopes(summarized=set()):
    state.observe(env, 5 * NS)
evaluated(state, 5 * NS)
print(state.stragglers._executor.pid, flush=True)
time.sleep(600)
"""


def test_the_engine_process_stops_when_the_aggregator_is_killed_outright() -> None:
    """SIGKILL (the OOM killer) gives the aggregator no chance to stop its engine process: it must not linger."""
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2] / "src")
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT.format(root=root)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        [worker] = map(int, parent.stdout.readline().split())
        os.kill(worker, 0)  # running
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(worker, 0)
            except ProcessLookupError:
                break
            with contextlib.suppress(ChildProcessError):
                os.waitpid(worker, os.WNOHANG)  # reaped by whoever adopted it; here, not us
            time.sleep(0.1)
        else:
            os.kill(worker, signal.SIGKILL)
            raise AssertionError("the engine process outlived its aggregator")
    finally:
        parent.kill()


def test_ctrl_c_is_the_aggregator_s_to_handle_not_the_engine_process_s() -> None:
    """Ctrl-C on ``ranksight up`` signals the whole process group: the engine process must not die of it with a
    traceback of its own (the aggregator stops it as it shuts down)."""
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2] / "src")
    parent = subprocess.Popen([sys.executable, "-c", PARENT.format(root=root)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    try:
        assert parent.stdout is not None and parent.stderr is not None
        [worker] = map(int, parent.stdout.readline().split())
        os.killpg(parent.pid, signal.SIGINT)
        parent.wait(timeout=30)  # the parent dies of it (KeyboardInterrupt in its sleep)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # then the engine process follows its parent, quietly
            try:
                os.kill(worker, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        stderr = parent.stderr.read()
        assert "KeyboardInterrupt" in stderr and "_process_worker" not in stderr, stderr
    finally:
        parent.kill()
