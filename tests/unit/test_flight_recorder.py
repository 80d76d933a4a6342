"""Flight Recorder dumps from real gloo jobs (``fixtures/flight_recorder/``): read safely, matched across ranks, and
``ranksight analyze hang`` on each failure shape; hostile and broken input gets a clear error."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from ranksight.aggregator.hang_cli import analyze_hang, print_report
from ranksight.core.cliutil import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from ranksight.core.flightrec import DumpError, analyze, parse_dump, read_directory
from ranksight.core.flightrec.load import rank_from_name

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "flight_recorder"
JOB_FILE = "tests/fr_job.py"


def report(scenario: str, **kwargs: object) -> dict[str, object]:
    read = read_directory(FIXTURES / scenario, max_bytes=1 << 20, max_files=100)
    assert not read.errors
    return analyze(read.dumps, **kwargs).as_dict()  # type: ignore[arg-type]


def only_finding(scenario: str) -> dict[str, object]:
    findings = report(scenario)["findings"]
    assert isinstance(findings, list) and len(findings) == 1, findings
    finding: dict[str, object] = findings[0]
    assert finding["process_group"] == "0:default_pg" and finding["seq"] == 4 and finding["first_divergence"]
    return finding


def test_healthy_job_has_no_finding() -> None:
    result = report("healthy")
    assert (
        result["findings"] == [] and result["ranks_seen"] == [0, 1, 2] and result["ranks_missing_dump"] == []
    )


def test_rank_that_stopped_entering_collectives() -> None:
    finding = only_finding("stopped")
    assert finding["kind"] == "collective_hang" and finding["collective"] == "gloo:all_reduce"
    assert finding["missing_ranks"] == [2] and finding["waiting_ranks"] == [0, 1]
    assert finding["waiting_s"] is None  # torch's own files carry no dump time
    frame = finding["frames"]["2"]  # type: ignore[index]
    # torch's pickle has no thread stacks: the call site of the last collective rank 2 entered
    assert frame["source"] == "collective_call" and frame["seq"] == 3
    assert frame["where"].startswith("train at ") and frame["where"].endswith(f"{JOB_FILE}:73")


def test_rank_calling_another_collective() -> None:
    finding = only_finding("mismatch")
    assert finding["kind"] == "collective_mismatch" and finding["mismatched_ranks"] == [1]
    verdict = finding["verdicts"]["1"]  # type: ignore[index]
    assert verdict["verdict"] == "COLLECTIVE_TYPE_MISMATCH" and verdict["collective"] == "gloo:broadcast"
    assert verdict["expected"]["collective"] == "gloo:all_reduce"
    assert finding["frames"]["1"]["where"].endswith(f"{JOB_FILE}:71")  # type: ignore[index]  # the broadcast call


@pytest.mark.parametrize(
    ("scenario", "verdict", "called", "expected"),
    [
        ("size_mismatch", "SIZE_OR_SYNTAX_MISMATCH", ([[8]], ["Float"]), ([[4]], ["Float"])),
        ("dtype_mismatch", "COLLECTIVE_DTYPE_MISMATCH", ([[4]], ["Double"]), ([[4]], ["Float"])),
    ],
)
def test_rank_calling_the_collective_with_other_sizes_or_dtypes(
    scenario: str, verdict: str, called: tuple[object, object], expected: tuple[object, object]
) -> None:
    """Four ranks; rank 1's all_reduce at seq 4 has twice the elements, or float64 ones: it is the one named, against
    the call the others made (in the dtype job gloo took rank 0's process down with it: its dump is missing)."""
    first = report(scenario)["findings"][0]  # type: ignore[index]
    assert (first["kind"], first["process_group"], first["seq"]) == ("collective_mismatch", "0:default_pg", 4)
    assert first["first_divergence"] and first["mismatched_ranks"] == [1]
    named = first["verdicts"]["1"]
    assert named["verdict"] == verdict and (named["input_sizes"], named["input_dtypes"]) == called
    assert (named["expected"]["input_sizes"], named["expected"]["input_dtypes"]) == expected


def test_mismatch_between_as_many_ranks_on_each_side_names_both() -> None:
    """Rank 0 died in the op, rank 1 called it with 8 elements and rank 2 with 4: no majority says which is odd."""
    first = report("size_tie")["findings"][0]  # type: ignore[index]
    assert first["kind"] == "collective_mismatch" and first["mismatched_ranks"] == [1, 2]
    verdicts = first["verdicts"]
    assert [verdicts[r]["input_sizes"] for r in ("1", "2")] == [[[8]], [[4]]]
    assert [verdicts[r]["expected"]["input_sizes"] for r in ("1", "2")] == [[[4]], [[8]]]


def test_rank_stuck_in_python_named_with_its_frame() -> None:
    finding = only_finding("python_stuck")
    assert finding["kind"] == "collective_hang" and finding["missing_ranks"] == [2]
    assert isinstance(finding["waiting_s"], float) and 2.5 < finding["waiting_s"] < 30
    frame = finding["frames"]["2"]  # type: ignore[index]
    assert frame["source"] == "python_stack" and frame["where"].startswith("next_batch at ")
    assert frame["host"] and isinstance(frame["pid"], int)


def test_killed_rank_has_no_dump() -> None:
    result = report("killed")
    assert result["ranks_missing_dump"] == [2]
    finding = only_finding("killed")
    assert finding["kind"] == "rank_without_dump" and finding["missing_ranks"] == [2]
    assert finding["collective"] == "gloo:all_reduce"


def test_hang_in_a_subgroup_names_its_cause_not_the_rank_it_holds_up() -> None:
    """Four ranks; rank 1 stops before the broadcast of the subgroup [0, 1]. Rank 0 waits in that broadcast; ranks 2
    and 3 wait in the default group's next all_reduce, which ranks 0 and 1 never entered. These dumps were taken with
    that all_reduce created before the broadcast, so creation time alone would call it the first divergence."""
    first, then = report("subgroup")["findings"]  # type: ignore[misc]
    assert (first["process_group"], first["collective"], first["seq"]) == ("1", "gloo:broadcast", 4)
    assert first["first_divergence"] and first["missing_ranks"] == [1] and first["waiting_ranks"] == [0]
    assert first["blocked_ranks"] == {} and first["frames"]["1"]["where"].startswith("wait_for_results at ")
    assert (then["process_group"], then["collective"], then["seq"]) == ("0:default_pg", "gloo:all_reduce", 5)
    assert then["missing_ranks"] == [0, 1] and then["waiting_ranks"] == [2, 3]
    assert not then["first_divergence"]
    held = {"process_group": "1", "collective": "gloo:broadcast", "seq": 4, "seq_kind": "collective"}
    assert then["blocked_ranks"] == {"0": held}  # rank 1, which waits nowhere, stays blamed
    assert then["frames"]["0"]["stack"][-1]["name"] == "broadcast"  # its own stack agrees


def test_deadlock_across_groups_names_both_ranks() -> None:
    """Rank 1 enters the subgroup's broadcast before the default group's all_reduce, rank 0 the other way round: each
    is missing from the op the other waits in, and neither is held up by a hang with a cause of its own."""
    findings = report("crossed")["findings"]
    assert isinstance(findings, list)
    named = {(f["process_group"], f["seq"]): (f["missing_ranks"], f["blocked_ranks"]) for f in findings}
    assert named == {("0:default_pg", 4): ([1], {}), ("1", 4): ([0], {})}


def test_world_size_flag_names_ranks_without_dumps() -> None:
    result = report("healthy", world_size=4)
    assert result["ranks_missing_dump"] == [3] and [f["kind"] for f in result["findings"]] == [
        "rank_without_dump"
    ]


def test_min_wait_hides_a_rank_only_just_behind() -> None:
    assert report("python_stuck", min_wait_s=600)["findings"] == []


def test_pickle_and_json_forms_read_the_same() -> None:
    pickled = parse_dump((FIXTURES / "stopped" / "trace_rank_0").read_bytes(), "trace_rank_0")
    as_json = json.dumps(pickle.loads((FIXTURES / "stopped" / "trace_rank_0").read_bytes()), default=list)
    from_json = parse_dump(as_json.encode(), "rank0.json")
    assert pickled.form == "torch-pickle" and from_json.form == "torch-json"
    assert pickled.entries == from_json.entries and pickled.pg_status == from_json.pg_status


def test_text_report_says_when_a_rank_has_no_frame(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for path in (
        FIXTURES / "stopped"
    ).iterdir():  # torch's JSON form of the same dumps: no call sites, no stacks
        raw = pickle.loads(path.read_bytes())
        for entry in raw["entries"]:
            entry.pop("frames")
        (tmp_path / f"{path.name}.json").write_text(json.dumps(raw, default=list))
    read = read_directory(tmp_path, 1 << 20, 100)
    print_report(analyze(read.dumps))
    assert "  rank 2: no frame (its dump carries no Python stack or call site)\n" in capsys.readouterr().out


def test_rank_from_torch_file_names() -> None:
    assert rank_from_name("/d/nccl_trace_rank_12") == 12
    assert rank_from_name("fr-3.json") == 3 and rank_from_name("rank7.ranksight.json") == 7
    assert rank_from_name("trace.pkl") is None


class Hostile:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (print, ("pwned",))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            pickle.dumps({"version": "2.10", "entries": [Hostile()]}),
            "refused: the pickle names builtins.print",
        ),
        (pickle.dumps({"version": "2.10", "entries": [Path("/")]}), "refused: the pickle names pathlib"),
        ((FIXTURES / "stopped" / "trace_rank_0").read_bytes()[:700], "not a readable pickle"),
        (b"\x80\x04\x8e" + (1 << 30).to_bytes(8, "little") + b"abc", "not a readable pickle"),  # claims 1 GiB
        (b'{"version": "2.10", "entries": [', "not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "neither a pickle nor a JSON object"),
        (b'{"version": "2.10", "entries": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "not valid JSON"),
        (b'{"version": "2.10", "entries": [{"process_group": ["0", ""]}]}', "missing 'profiling_name'"),
        (
            b'{"version": "2.10", "entries": [], "pg_status": {"0": {"last_enqueued_collective": "x"}}}',
            "not an integer",
        ),
        (b'{"entries": []}', "not a Flight Recorder dump"),
        (b"", "empty"),
        (
            b'{"version": "2.10", "entries": [], "ranksight": {"rank": 0, "world_size": 1000000000000}}',
            "ranksight.world_size 999999999999 is not a rank",
        ),
        (
            b'{"version": "2.10", "entries": [], "pg_config": {"0": {"ranks": "[0, 99999999]"}}}',
            "pg_config ranks 99999999 is not a rank",
        ),
        (b'{"version": "2.10", "entries": [], "ranksight": {"rank": -3}}', "rank -3 is not a rank"),
        (b"GIF89a", "neither a pickle nor a JSON object"),
    ],
)
def test_bad_input_gets_a_clear_error(data: bytes, message: str) -> None:
    with pytest.raises(DumpError, match=message) as caught:
        parse_dump(data, "rank0.pkl")
    assert str(caught.value).startswith("rank0.pkl: "), "the error names the file it is about"


def test_self_referencing_pickle_is_refused_not_followed() -> None:
    sizes: list[object] = []
    sizes.append(sizes)
    entry = {
        "process_group": ("0", ""),
        "profiling_name": "gloo:all_reduce",
        "collective_seq_id": 1,
        "input_sizes": sizes,
    }
    with pytest.raises(DumpError, match="not an integer"):
        parse_dump(pickle.dumps({"version": "2.10", "entries": [entry]}), "rank0.pkl")


def test_pickle_that_shares_one_list_everywhere_is_refused_quickly() -> None:
    """A few kilobytes that reference one large list from every entry would stand for billions of elements."""
    sizes = [list(range(100_000))]
    entry = {"process_group": ("0", ""), "profiling_name": "gloo:all_reduce", "collective_seq_id": 1,
             "input_sizes": sizes, "output_sizes": sizes}  # fmt: skip
    data = pickle.dumps({"version": "2.10", "entries": [entry] * 100_000})
    assert len(data) < 1_000_000  # stands for 2e10 integers
    with pytest.raises(DumpError, match="beyond its own size"):
        parse_dump(data, "rank0.pkl")


def test_huge_file_is_refused_by_size(tmp_path: Path) -> None:
    (tmp_path / "rank0.json").write_bytes(b'{"version": "2.10", "entries": []}' + b" " * 2048)
    (tmp_path / "rank1.json").write_bytes(b'{"version": "2.10", "entries": []}')
    read = read_directory(tmp_path, max_bytes=1024, max_files=10)
    assert [d.rank for d in read.dumps] == [1] and "over the 1024-byte limit" in read.errors[0]


def test_cli_exit_codes_and_json_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ranksight.cli import build_parser

    def run(*argv: str) -> int:
        args = build_parser(["analyze", "hang", *argv]).parse_args(["analyze", "hang", *argv])
        return int(analyze_hang(args))

    assert run(str(FIXTURES / "healthy"), "--json") == EXIT_OK
    assert json.loads(capsys.readouterr().out)["findings"] == []
    assert run(str(FIXTURES / "python_stuck"), "--json") == EXIT_FAILED
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"findings", "ranks_seen", "ranks_missing_dump"}
    assert set(out["findings"][0]) >= {"kind", "process_group", "collective", "seq", "missing_ranks",
                                       "mismatched_ranks", "waiting_s", "frames"}  # fmt: skip
    (tmp_path / "notes.txt").write_text("\x1b[31mnot a dump\n")
    assert run(str(tmp_path)) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "no Flight Recorder dump found" in err and "\x1b" not in err and "\\x1b" in err
    assert run(str(tmp_path / "absent")) == EXIT_USAGE
    # a world of 100,000 with two dumps: the ranks without one are a range, not 99,998 numbers on a line
    assert run(str(FIXTURES / "killed"), "--world-size", "100000") == EXIT_FAILED
    text = capsys.readouterr().out
    assert (
        "no dump from ranks 2-99999\n" in text
        and "never arrived: ranks 2-99999\n" in text
        and len(text) < 1000
    )
    assert run(str(FIXTURES / "killed"), "--world-size", "100000", "--json") == EXIT_FAILED
    assert len(json.loads(capsys.readouterr().out)["ranks_missing_dump"]) == 99_998  # --json lists every one


def test_command_line_end_to_end() -> None:
    proc = subprocess.run([sys.executable, "-m", "ranksight.cli", "analyze", "hang", str(FIXTURES / "mismatch")],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == EXIT_FAILED, proc.stderr
    assert (
        "COLLECTIVE_TYPE_MISMATCH, called gloo:broadcast" in proc.stdout
        and "rank 1 is at train at" in proc.stdout
    )


def test_gpu_of_a_named_rank_comes_from_its_dump() -> None:
    dumps = []
    for path in sorted((FIXTURES / "python_stuck").iterdir()):
        raw = json.loads(path.read_bytes())
        raw["ranksight"]["gpu"] = {"index": raw["ranksight"]["rank"] + 4, "visible_devices": "4,5,6"}
        dumps.append(parse_dump(json.dumps(raw).encode(), path.name))
    (finding,) = analyze(dumps).findings
    assert finding.frames[2]["gpu"] == 6
    raw["ranksight"]["gpu"] = [6]
    with pytest.raises(DumpError, match=r"ranksight\.gpu is a list, not a map"):
        parse_dump(json.dumps(raw).encode(), path.name)


def with_p2p(
    ops: dict[int, list[tuple[str, int, str]]], sizes: dict[int, list[list[int]]] | None = None
) -> list[object]:
    """The real healthy dumps plus point-to-point entries in the shape NCCL's Flight Recorder writes them (gloo
    records none: checked on torch 2.13): ``profiling_name`` "nccl:send 0->1" / "nccl:recv 1<-0" (group ranks),
    ``is_p2p``, the rank's own ``p2p_seq_id``, ``collective_seq_id`` left at the group's last collective. ``sizes``
    gives a rank's P2P tensors other shapes (input and output, as torch records the one tensor of a send or recv)."""
    dumps = []
    for path in sorted((FIXTURES / "healthy").iterdir()):
        raw = json.loads(path.read_bytes())
        rank = int(path.stem.rsplit("-", 1)[1])
        last = raw["entries"][-1]
        for p2p_seq, (name, peer, state) in enumerate(ops.get(rank, []), start=1):
            peers = f"{rank}->{peer}" if name == "send" else f"{rank}<-{peer}"
            raw["entries"].append({**last, "profiling_name": f"nccl:{name} {peers}", "is_p2p": True,
                                   "p2p_seq_id": p2p_seq, "state": state, "process_group": ["0", "default_pg"],
                                   "pg_id": 0, "record_id": last["record_id"] + p2p_seq,
                                   "time_created_ns": last["time_created_ns"] + p2p_seq})  # fmt: skip
            if sizes and rank in sizes:
                raw["entries"][-1].update(input_sizes=sizes[rank], output_sizes=sizes[rank])
        dumps.append(parse_dump(json.dumps(raw).encode(), path.name))
    return dumps


def test_send_whose_receiver_never_posted_the_recv_names_the_receiver() -> None:
    # a pipeline: 0 -> 1 -> 2; rank 1 never posts its second recv from 0. Its p2p_seq_id 2 is a send to 2: the pairing
    # is per (sender, receiver) in order, not by equal ids
    dumps = with_p2p({0: [("send", 1, "completed"), ("send", 1, "started")],
                      1: [("recv", 0, "completed"), ("send", 2, "completed")],
                      2: [("recv", 1, "completed")]})  # fmt: skip
    (finding,) = analyze(dumps).findings  # type: ignore[arg-type]
    assert (finding.kind, finding.seq_kind, finding.collective, finding.seq) == (
        "p2p_hang",
        "p2p",
        "nccl:send",
        2,
    )
    assert finding.missing_ranks == [1] and finding.waiting_ranks == [0]
    assert finding.frames[1]["source"] == "none"  # torch's JSON has no frames


def test_recv_whose_sender_never_sent_names_the_sender_and_matched_ops_are_quiet() -> None:
    dumps = with_p2p({1: [("send", 2, "completed")], 2: [("recv", 1, "completed"), ("recv", 1, "scheduled")]})
    (finding,) = analyze(dumps).findings  # type: ignore[arg-type]
    assert finding.kind == "p2p_hang" and finding.missing_ranks == [1] and finding.waiting_ranks == [2]
    assert finding.collective == "nccl:recv" and finding.seq == 2
    matched = with_p2p({0: [("send", 2, "started")], 2: [("recv", 0, "started")]})  # both posted: in flight
    assert analyze(matched).findings == []  # type: ignore[arg-type]


def test_send_and_recv_of_other_sizes_are_a_mismatch_naming_both_ends() -> None:
    # fr_trace's rule for P2P: the send's input sizes must equal the recv's output sizes
    dumps = with_p2p({0: [("send", 2, "started")], 2: [("recv", 0, "started")]}, sizes={2: [[7, 3]]})
    (finding,) = analyze(dumps).findings  # type: ignore[arg-type]
    assert (finding.kind, finding.seq_kind, finding.seq) == ("collective_mismatch", "p2p", 1)
    assert finding.mismatched_ranks == [0, 2]
    assert finding.verdicts[2]["verdict"] == "SIZE_OR_SYNTAX_MISMATCH"
    assert (
        finding.verdicts[2]["output_sizes"] == [[7, 3]]
        and finding.verdicts[2]["expected"]["collective"] == "nccl:send"
    )
