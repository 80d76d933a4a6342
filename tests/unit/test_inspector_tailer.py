"""The tailer on real files: partial lines, truncation, rotation, bad lines, checkpoints only after acks."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from ranksight.agent.collectors.inspector.tailer import Chunk, Tailer
from ranksight.simulate.inspector import JobSpec, simulate


def lines(n: int, seed: int = 0) -> list[str]:
    procs = simulate(JobSpec(nodes=2, gpus_per_node=2, pp=2, steps=max(2, n // 6 + 2), seed=seed))
    out = [line for proc_lines in procs.values() for line in proc_lines]
    return out[:n]


def ack_all(tailer: Tailer, chunks: list[Chunk]) -> None:
    for c in chunks:
        tailer.acked(c)


def test_reads_only_complete_lines_and_resumes_a_partial_write(tmp_path: Path) -> None:
    data = lines(3)
    log = tmp_path / "node000-pid1.log"
    tailer = Tailer(tmp_path, tmp_path / "state.json")
    log.write_text(data[0] + "\n" + data[1][:40])  # the second line is still being written
    [chunk] = tailer.poll()
    assert len(chunk.records) == 1 and chunk.bad_lines == 0
    assert tailer.poll() == []
    with log.open("a") as fh:
        fh.write(data[1][40:] + "\n" + data[2] + "\n")
    [chunk] = tailer.poll()
    assert [r.sn for r in chunk.records] == [json.loads(x)["coll_perf"]["coll_sn"] for x in data[1:3]]


def test_bad_lines_are_counted_and_skipped(tmp_path: Path) -> None:
    data = lines(2)
    (tmp_path / "h-pid2.jsonl").write_text(f"{data[0]}\nnot json\n{{}}\n{data[1]}\n")
    tailer = Tailer(tmp_path, tmp_path / "state.json")
    [chunk] = tailer.poll()
    assert len(chunk.records) == 2 and chunk.bad_lines == 2 and "not JSON" in (chunk.first_error or "")
    assert tailer.status()["bad_lines"] == 2


def test_truncation_and_rotation_restart_at_zero(tmp_path: Path) -> None:
    data = lines(6)
    log = tmp_path / "h-pid3.log"
    tailer = Tailer(tmp_path, tmp_path / "state.json")
    log.write_text("".join(x + "\n" for x in data[:3]))
    assert len(tailer.poll()[0].records) == 3
    log.write_text(data[3] + "\n")  # truncated and rewritten, shorter than before
    [chunk] = tailer.poll()
    assert [r.sn for r in chunk.records] == [json.loads(data[3])["coll_perf"]["coll_sn"]]
    os.rename(log, tmp_path / "h-pid3.log.1")  # rotated: a new file under the old name
    log.write_text("".join(x + "\n" for x in data[4:6]))
    [chunk] = tailer.poll()
    assert len(chunk.records) == 2 and chunk.end == log.stat().st_size


def test_only_acknowledged_offsets_are_saved_and_restored(tmp_path: Path) -> None:
    data = lines(4)
    log = tmp_path / "h-pid4.log"
    log.write_text(data[0] + "\n" + data[1] + "\n")
    state = tmp_path / "state.json"
    tailer = Tailer(tmp_path, state, chunk_bytes=4096)
    first = tailer.poll()
    with log.open("a") as fh:
        fh.write(data[2] + "\n")
    second = tailer.poll()
    ack_all(tailer, second)  # acked out of order: nothing may be committed before the first chunk is
    tailer.save()
    assert json.loads(state.read_text())["files"][str(log)]["offset"] == 0
    ack_all(tailer, first)
    tailer.save()
    assert json.loads(state.read_text())["files"][str(log)]["offset"] == second[0].end

    restarted = Tailer(tmp_path, state)  # an agent restart resumes after the acknowledged lines
    restarted.load()
    with log.open("a") as fh:
        fh.write(data[3] + "\n")
    [chunk] = restarted.poll()
    assert [r.sn for r in chunk.records] == [json.loads(data[3])["coll_perf"]["coll_sn"]]


def test_unacknowledged_lines_are_read_again_after_a_restart(tmp_path: Path) -> None:
    data = lines(2)
    (tmp_path / "h-pid5.log").write_text(data[0] + "\n" + data[1] + "\n")
    state = tmp_path / "state.json"
    tailer = Tailer(tmp_path, state)
    assert len(tailer.poll()[0].records) == 2
    tailer.save()  # crash before the ack
    again = Tailer(tmp_path, state)
    again.load()
    assert len(again.poll()[0].records) == 2


def test_big_file_is_read_in_bounded_chunks(tmp_path: Path) -> None:
    data = lines(200)
    (tmp_path / "h-pid6.log").write_text("".join(x + "\n" for x in data))
    tailer = Tailer(tmp_path, tmp_path / "state.json", chunk_bytes=8192)
    total, passes = 0, 0
    while chunks := tailer.poll():
        assert all(len(c.records) * 300 < 8192 for c in chunks)
        total += sum(len(c.records) for c in chunks)
        passes += 1
    assert total == len(data) and passes > 3


def test_non_regular_files_named_like_dumps_are_skipped(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "a-pid1.log")
    (tmp_path / "b-pid2.log").mkdir()
    (tmp_path / "c-pid3.log").write_text("".join(x + "\n" for x in lines(5)))
    tailer = Tailer(tmp_path, tmp_path / "state.json")
    result: list[list[Chunk]] = []
    poll = threading.Thread(target=lambda: result.append(tailer.poll()), daemon=True)
    poll.start()
    poll.join(10)
    assert result, "poll blocked on the FIFO"
    assert [len(c.records) for c in result[0]] == [5]
    assert tailer.status()["skipped"] == {
        str(tmp_path / "a-pid1.log"): "a FIFO",
        str(tmp_path / "b-pid2.log"): "a directory",
    }
    os.unlink(tmp_path / "a-pid1.log")
    tailer.poll()
    assert list(tailer.skipped) == [str(tmp_path / "b-pid2.log")]  # gone: forgotten


def test_a_late_ack_of_an_earlier_reading_commits_nothing(tmp_path: Path) -> None:
    """Hostile: a chunk is read, the file is truncated and written again (same inode), and the new reading's second
    chunk happens to end where the old chunk did; the old chunk's ack arriving late must not stand for the new one."""
    data = [x + "\n" for x in lines(6)]
    log = tmp_path / "h-pid7.log"
    log.write_text("".join(data[:3]))
    tailer = Tailer(tmp_path, tmp_path / "state.json")
    [old] = tailer.poll()
    log.write_text(data[3])  # truncated: a new reading from 0
    [first] = tailer.poll()
    with log.open("a") as fh:  # grown to exactly the old chunk's end
        rest = "".join(data[4:6])
        fh.write((rest + " " * (old.end - first.end - len(rest) - 1))[: old.end - first.end - 1] + "\n")
    [second] = tailer.poll()
    assert (second.inode, second.end) == (old.inode, old.end) and second.generation != old.generation
    tailer.acked(old)  # late
    tailer.acked(first)
    tailer.save()
    assert json.loads((tmp_path / "state.json").read_text())["files"][str(log)]["offset"] == first.end
