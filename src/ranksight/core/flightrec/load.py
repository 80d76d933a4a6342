"""PyTorch Flight Recorder dumps, from captured bytes to typed records.

Three byte forms are read, recognized by content (never by file name):

* torch's pickle (``torch._C._distributed_c10d._dump_fr_trace()``, the files torch writes on a watchdog timeout): loaded
  by :class:`PlainUnpickler`, which admits only the opcodes of plain containers and scalars: any global, class or
  persistent id is refused, so a hostile pickle cannot run code;
* torch's JSON (``_dump_fr_trace_json()``, the worker server's ``fr_trace_json``): the same keys, no Python frames;
* ranksight's JSON: torch's keys plus ``ranksight`` (rank, host, pid, world size, job, dump time, every thread's Python
  stack), what an agent writes for each process that answered a dump request through ``ranksight.client``.

The schema read (torch 2.13, dump ``version`` "2.10"): ``entries`` (the ring of the last collectives: ``process_group``
as [name, description], ``pg_id``, ``profiling_name`` "<backend>:<op>[ <peers>]", ``collective_seq_id``,
``p2p_seq_id``, ``is_p2p``, ``record_id``, ``state`` scheduled/started/completed, sizes, dtypes, ``time_created_ns``,
``frames`` [{name, filename, line}] in the pickle only), ``pg_status`` (per ``pg_id``: last enqueued, started and
completed collective sequence ids), ``pg_config`` (per group name: description and ranks; empty for gloo). Torch names
the rank only in the file name (its dump files are ``<prefix><rank>``), so a bare torch dump takes its rank from the
trailing digits of the file's name.
"""

from __future__ import annotations

import io
import json
import pickle
import re
import struct
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ranksight.errors import ParseError

MAX_FRAMES = 64  # frames kept per stack: the innermost ones, where a rank is stuck
MAX_THREADS = 256
MAX_RANKS = (
    1 << 20
)  # above any job's world size: a rank or world size beyond is not one (and would size sets)
_TRAILING_RANK = re.compile(r"(\d+)(?:\.[A-Za-z]+[0-9]*)*$")
_INTEGER_TEXT = re.compile(r"-?\d{1,30}")


class DumpError(ParseError, ValueError):
    """Bytes that are not a Flight Recorder dump this reader understands; the message says what and where."""


@dataclass(frozen=True)
class Frame:
    filename: str
    line: int
    name: str

    def where(self) -> str:
        return f"{self.name} at {self.filename}:{self.line}"

    def as_dict(self) -> dict[str, Any]:
        return {"filename": self.filename, "line": self.line, "name": self.name}


@dataclass(frozen=True)
class Entry:
    """One collective or point-to-point call a rank enqueued."""

    pg_name: str
    pg_desc: str
    pg_id: int | None
    backend: str
    op: str  # all_reduce, broadcast, send, ...
    peers: str  # "0->1" for send/recv, "" otherwise
    collective_seq_id: int
    p2p_seq_id: int
    is_p2p: bool
    record_id: int
    state: str
    input_sizes: tuple[tuple[int, ...], ...]
    output_sizes: tuple[tuple[int, ...], ...]
    input_dtypes: tuple[str, ...]
    output_dtypes: tuple[str, ...]
    time_created_ns: int
    frames: tuple[Frame, ...]  # outermost first

    @property
    def seq(self) -> int:
        return self.p2p_seq_id if self.is_p2p else self.collective_seq_id

    @property
    def collective(self) -> str:
        return f"{self.backend}:{self.op}"


@dataclass(frozen=True)
class GroupStatus:
    last_enqueued: int
    last_started: int
    last_completed: int


@dataclass(frozen=True)
class ThreadStack:
    thread_id: int
    name: str
    main: bool
    frames: tuple[Frame, ...]  # outermost first, like a traceback


@dataclass(frozen=True)
class RankDump:
    rank: int
    source: str  # the file (or process) it came from
    form: str  # torch-pickle | torch-json | ranksight
    version: str
    entries: tuple[Entry, ...]
    pg_status: dict[int, GroupStatus]
    pg_ranks: dict[str, tuple[int, ...]]  # from pg_config where torch filled it in (not for gloo)
    host: str | None = None
    pid: int | None = None
    world_size: int | None = None
    job: str | None = None
    dump_time_ns: int | None = None
    threads: tuple[ThreadStack, ...] = field(default=())
    gpu: int | None = None  # the CUDA device index the process used (ranksight's dumps, when it had one)


class PlainUnpickler(pickle.Unpickler):
    """Admits dicts, lists, tuples, sets, str, bytes, numbers, booleans and None; nothing that names a global."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(
            f"refused: the pickle names {module}.{name} (only plain data is admitted)"
        )

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refused: the pickle uses persistent ids (only plain data is admitted)")


def load_plain_pickle(data: bytes) -> Any:
    try:
        return PlainUnpickler(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError, IndexError, AttributeError,
            MemoryError, RecursionError, OverflowError, struct.error) as exc:  # fmt: skip
        raise DumpError(f"not a readable pickle: {exc or type(exc).__name__}") from None


def check_plain_size(value: Any, limit: int) -> None:
    """Refuse loaded data with more than ``limit`` elements in all (keys, items, scalars), counted as a writer would
    see them: a pickle's shared references (or a cycle) count each time, so what a few bytes stand for is known
    before anything (``json.dumps``) walks all of it."""
    stack, count = [value], 0
    while stack:
        item = stack.pop()
        count += 1
        if count > limit:
            raise DumpError("it references the same data over and over, beyond its own size (refused)")
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset):
            stack.extend(item)


def rank_from_name(name: str) -> int | None:
    """The rank torch puts at the end of a dump file's name (``nccl_trace_rank_3``, ``rank3.pkl``)."""
    match = _TRAILING_RANK.search(name.rsplit("/", 1)[-1])
    return int(match.group(1)) if match else None


# Elements a dump may make the reader visit: a pickle can reference one list from many places (its memo), so a few
# bytes can stand for a structure far larger than themselves; every element costs at least a byte as written once.
_BUDGET: ContextVar[list[int]] = ContextVar("flight_recorder_budget")


def _consume(count: int) -> None:
    budget = _BUDGET.get([1 << 62])
    budget[0] -= count
    if budget[0] < 0:
        raise DumpError("it references the same data over and over, beyond its own size (refused)")


def parse_dump(data: bytes, source: str, rank: int | None = None, max_bytes: int | None = None) -> RankDump:
    """One rank's dump from its bytes; ``rank`` overrides what the content or ``source``'s name says."""
    token = _BUDGET.set([len(data) + 4096])
    try:
        return _parse_dump(data, source, rank, max_bytes)
    finally:
        _BUDGET.reset(token)


def load_plain(data: bytes, source: str) -> tuple[Any, str]:
    """A dump's bytes as plain data and their form, told by content: JSON is parsed, a pickle is loaded by
    :class:`PlainUnpickler` only; anything else is a :class:`DumpError` naming ``source``."""
    if data[:1] == b"\x80":
        try:
            return load_plain_pickle(data), "torch-pickle"
        except DumpError as exc:
            raise DumpError(f"{source}: {exc}") from None
    if data.lstrip()[:1] == b"{":
        try:
            raw = json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise DumpError(f"{source}: not valid JSON: {str(exc)[:200]}") from None
        return raw, "ranksight" if isinstance(raw, dict) and "ranksight" in raw else "torch-json"
    if not data:
        raise DumpError(f"{source}: empty")
    raise DumpError(f"{source}: neither a pickle nor a JSON object (starts with {data[:8]!r})")


def _parse_dump(data: bytes, source: str, rank: int | None, max_bytes: int | None) -> RankDump:
    if max_bytes is not None and len(data) > max_bytes:
        raise DumpError(f"{source}: {len(data)} bytes, over the {max_bytes}-byte limit")
    raw, form = load_plain(data, source)
    try:
        return _dump_from(raw, source, form, rank)
    except DumpError as exc:
        raise DumpError(f"{source}: {exc}") from None


def _dump_from(raw: Any, source: str, form: str, rank: int | None) -> RankDump:
    top = _mapping(raw, "the dump")
    if "entries" not in top or "version" not in top:
        raise DumpError("no 'entries' or 'version': not a Flight Recorder dump")
    meta = _mapping(top.get("ranksight") or {}, "ranksight")
    if rank is None:
        rank = _opt_int(meta.get("rank"), "ranksight.rank")
    if rank is None:
        rank = rank_from_name(source)
    if rank is None:
        raise DumpError(
            "cannot tell its rank: the file name does not end in the rank and the dump names none"
        )
    _rank(rank, "rank")
    world_size = _opt_int(meta.get("world_size"), "ranksight.world_size")
    if world_size is not None:
        _rank(world_size - 1, "ranksight.world_size")
    entries = tuple(_entry(e, i) for i, e in enumerate(_sequence(top["entries"], "entries")))
    status = {}
    for key, value in _mapping(top.get("pg_status") or {}, "pg_status").items():
        group = _mapping(value, f"pg_status[{key}]")
        status[_int(key, "pg_status key")] = GroupStatus(
            last_enqueued=_int(group.get("last_enqueued_collective", -1), "last_enqueued_collective"),
            last_started=_int(group.get("last_started_collective", -1), "last_started_collective"),
            last_completed=_int(group.get("last_completed_collective", -1), "last_completed_collective"),
        )
    pg_ranks = {}
    for name, value in _mapping(top.get("pg_config") or {}, "pg_config").items():
        ranks = _ranks(_mapping(value, f"pg_config[{name}]").get("ranks", "[]"))
        if ranks:
            pg_ranks[str(name)] = ranks
    threads = tuple(
        _thread(t) for t in _sequence(meta.get("threads") or [], "ranksight.threads")[:MAX_THREADS]
    )
    return RankDump(
        rank=rank,
        source=source,
        form=form,
        version=str(top["version"]),
        entries=entries,
        pg_status=status,
        pg_ranks=pg_ranks,
        host=_opt_str(meta.get("host")),
        pid=_opt_int(meta.get("pid"), "ranksight.pid"),
        world_size=world_size,
        job=_opt_str(meta.get("job")),
        dump_time_ns=_opt_int(meta.get("time_ns"), "ranksight.time_ns"),
        threads=threads,
        gpu=_opt_int(_mapping(meta.get("gpu") or {}, "ranksight.gpu").get("index"), "ranksight.gpu.index"),
    )


def _entry(raw: Any, index: int) -> Entry:
    where = f"entries[{index}]"
    e = _mapping(raw, where)
    try:
        pg = _sequence(e["process_group"], f"{where}.process_group")
        backend, _, call = str(e["profiling_name"]).partition(":")
        op, _, peers = call.partition(" ")
        return Entry(
            pg_name=str(pg[0]),
            pg_desc=str(pg[1]) if len(pg) > 1 else "",
            pg_id=_opt_int(e.get("pg_id"), f"{where}.pg_id"),
            backend=backend,
            op=op or backend,
            peers=peers,
            collective_seq_id=_int(e["collective_seq_id"], f"{where}.collective_seq_id"),
            p2p_seq_id=_int(e.get("p2p_seq_id", 0), f"{where}.p2p_seq_id"),
            is_p2p=bool(e.get("is_p2p", False)),
            record_id=_int(e.get("record_id", index), f"{where}.record_id"),
            state=str(e.get("state", "")),
            input_sizes=_sizes(e.get("input_sizes", []), f"{where}.input_sizes"),
            output_sizes=_sizes(e.get("output_sizes", []), f"{where}.output_sizes"),
            input_dtypes=tuple(str(d) for d in _sequence(e.get("input_dtypes", []), f"{where}.input_dtypes")),
            output_dtypes=tuple(
                str(d) for d in _sequence(e.get("output_dtypes", []), f"{where}.output_dtypes")
            ),
            time_created_ns=_int(e.get("time_created_ns", 0), f"{where}.time_created_ns"),
            frames=_frames(e.get("frames") or [], f"{where}.frames", innermost_first=True),
        )
    except (KeyError, IndexError) as exc:
        raise DumpError(f"{where}: missing {exc}") from None


def _thread(raw: Any) -> ThreadStack:
    t = _mapping(raw, "ranksight.threads[]")
    return ThreadStack(
        thread_id=_int(t.get("id", 0), "thread id"),
        name=str(t.get("name", ""))[:200],
        main=bool(t.get("main", False)),
        frames=_frames(t.get("frames") or [], "thread frames", innermost_first=False),
    )


def _frames(raw: Any, where: str, innermost_first: bool) -> tuple[Frame, ...]:
    """Frames outermost first (as a traceback prints them), the innermost ``MAX_FRAMES`` kept. Torch lists a
    collective's call site innermost first; ranksight's thread stacks come outermost first."""
    frames = _sequence(raw, where)
    frames = list(reversed(frames[:MAX_FRAMES])) if innermost_first else frames[-MAX_FRAMES:]
    out = []
    for item in frames:
        f = _mapping(item, where)
        out.append(Frame(str(f.get("filename", ""))[:1000], _int(f.get("line", 0), f"{where}.line"),
                         str(f.get("name", ""))[:200]))  # fmt: skip
    return tuple(out)


def _sizes(raw: Any, where: str) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(_int(n, where) for n in _sequence(dims, where)) for dims in _sequence(raw, where))


def _ranks(raw: Any) -> tuple[int, ...]:
    # pg_config ranks are the text of a Python list ("[0, 1]"): read as JSON, never evaluated
    _consume(len(raw) if isinstance(raw, str) else 0)
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        raise DumpError(f"pg_config ranks {str(raw)[:80]!r} is not a list of ranks") from None
    return tuple(
        _rank(_int(r, "pg_config ranks"), "pg_config ranks") for r in _sequence(value, "pg_config ranks")
    )


def _rank(value: int, where: str) -> int:
    if not 0 <= value < MAX_RANKS:
        raise DumpError(f"{where} {value} is not a rank (0..{MAX_RANKS - 1})")
    return value


def _mapping(value: Any, where: str) -> dict[Any, Any]:
    if not isinstance(value, dict):
        raise DumpError(f"{where} is a {type(value).__name__}, not a map")
    _consume(1)
    return value


def _sequence(value: Any, where: str) -> list[Any] | tuple[Any, ...]:
    if not isinstance(value, list | tuple):
        raise DumpError(f"{where} is a {type(value).__name__}, not a list")
    _consume(len(value))
    return value


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool):
        raise DumpError(f"{where} is a boolean, not an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and _INTEGER_TEXT.fullmatch(value):
        return int(value)  # torch's JSON writes pg_status numbers as text
    raise DumpError(f"{where} is {str(value)[:40]!r}, not an integer")


def _opt_int(value: Any, where: str) -> int | None:
    return None if value is None else _int(value, where)


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)[:256]


@dataclass
class DirectoryRead:
    dumps: list[RankDump]
    errors: list[str]  # one line per file that was not read, saying why


def read_directory(directory: Path, max_bytes: int, max_files: int) -> DirectoryRead:
    """Every dump under ``directory`` (any file names; symbolic links are not followed). A file that is not a dump, is
    over ``max_bytes`` or names a rank already read is reported in ``errors`` and skipped; past ``max_files`` files
    the rest are reported as not read."""
    read = DirectoryRead([], [])
    seen: dict[int, str] = {}
    paths = sorted(p for p in directory.rglob("*") if p.is_file() and not p.is_symlink())
    if len(paths) > max_files:
        read.errors.append(f"{directory}: {len(paths)} files, only the first {max_files} read")
    for path in paths[:max_files]:
        try:
            if path.stat().st_size > max_bytes:
                raise DumpError(f"{path}: {path.stat().st_size} bytes, over the {max_bytes}-byte limit")
            dump = parse_dump(path.read_bytes(), str(path), max_bytes=max_bytes)
        except DumpError as exc:
            read.errors.append(str(exc))
            continue
        except OSError as exc:
            read.errors.append(f"{path}: {exc.strerror or exc}")
            continue
        if dump.rank in seen:
            read.errors.append(f"{path}: rank {dump.rank} was already read from {seen[dump.rank]}")
            continue
        seen[dump.rank] = str(path)
        read.dumps.append(dump)
    return read
