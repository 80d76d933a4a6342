"""The probe client: RTT and jitter from many small echoes, then upload and download, each timed by its receiver.

Beside each rate, the share of the bandwidth phases each end's loop was stalled (busy, or starved of CPU): the prober's
over both phases, the probed server's while it received the upload. Each phase uses its own connection, so a refused or busy server fails fast and a phase's leftovers never disturb the
next. Errors are :class:`ProbeError` with a message that says what happened (refused, busy, timeout, not a probe server).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import asdict, dataclass

from ranksight.agent.probe.protocol import (
    REPLY_SIZE,
    Op,
    ProbeProtocolError,
    Reply,
    Request,
    Status,
    rate_bps,
    rtt_stats_us,
)
from ranksight.agent.probe.streams import StallMeter, receive_timed, send_for
from ranksight.errors import RanksightError


class ProbeError(RanksightError, RuntimeError):
    """The probe could not be completed; the message is meant for a person."""


@dataclass(frozen=True)
class ProbeBudget:
    echo_count: int = 50
    echo_size: int = 64
    bandwidth: bool = True  # False: a light probe (RTT and jitter only)
    bytes: int = 64 * 1024**2  # per direction
    seconds: float = 1.0  # per direction
    timeout_s: float = 5.0  # connect and every single read or write


@dataclass(frozen=True)
class ProbeResult:
    rtt_us: float | None
    jitter_us: float | None
    upload_bps: float | None
    download_bps: float | None
    bytes: int
    duration_s: float
    src_stall_share: float | None = None  # this end, over both bandwidth phases (None: a light probe)
    dst_stall_share: float | None = None  # the server, while it received the upload

    def as_dict(self) -> dict[str, float | int | None]:
        return asdict(self)


async def run_probe(host: str, port: int, budget: ProbeBudget = ProbeBudget()) -> ProbeResult:
    started = time.monotonic()
    try:
        rtt_us, jitter_us, moved = await _echo(host, port, budget)
        upload = download = src_stall = dst_stall = None
        if budget.bandwidth:
            async with StallMeter() as stall:
                upload, up_bytes, dst_stall = await _upload(host, port, budget)
                download, down_bytes = await _download(host, port, budget)
            moved += up_bytes + down_bytes
            src_stall = round(stall.share, 3)
    except ProbeProtocolError as exc:
        raise ProbeError(f"{host}:{port} is not a ranksight probe server: {exc}") from None
    except asyncio.IncompleteReadError:
        raise ProbeError(f"{host}:{port} closed the connection mid-probe") from None
    except TimeoutError:
        raise ProbeError(f"{host}:{port} did not answer within {budget.timeout_s}s") from None
    except OSError as exc:
        raise ProbeError(f"cannot probe {host}:{port}: {exc.strerror or exc}") from None
    return ProbeResult(
        rtt_us, jitter_us, upload, download, moved, time.monotonic() - started, src_stall, dst_stall
    )


async def _open(
    host: str, port: int, req: Request, timeout: float
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, Reply]:
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    writer.write(req.encode())
    await asyncio.wait_for(writer.drain(), timeout)
    grant = Reply.decode(await asyncio.wait_for(reader.readexactly(REPLY_SIZE), timeout))
    if grant.status is not Status.OK:
        writer.close()
        reason = {Status.BUSY: "is busy (probe limit reached)", Status.REFUSED: "refused this client (not in its allow list)",
                  Status.BAD_REQUEST: "rejected the request"}[grant.status]  # fmt: skip
        raise ProbeError(f"probe server {host}:{port} {reason}")
    return reader, writer, grant


async def _echo(host: str, port: int, b: ProbeBudget) -> tuple[float | None, float | None, int]:
    reader, writer, grant = await _open(host, port, Request(Op.ECHO, b.echo_size, b.echo_count), b.timeout_s)
    size, count = grant.a, grant.b
    payload = bytes(size)
    samples = []
    try:
        for _ in range(count):
            t0 = time.perf_counter_ns()
            writer.write(payload)
            await asyncio.wait_for(reader.readexactly(size), b.timeout_s)
            samples.append(time.perf_counter_ns() - t0)
    finally:
        writer.close()
    rtt, jitter = rtt_stats_us(samples)
    return rtt, jitter, 2 * size * count


async def _upload(host: str, port: int, b: ProbeBudget) -> tuple[float | None, int, float]:
    req = Request(Op.UPLOAD, b.bytes, 0, int(b.seconds * 1000))
    reader, writer, grant = await _open(host, port, req, b.timeout_s)
    try:
        await send_for(writer, grant.a, grant.c / 1000, b.timeout_s)
        if writer.can_write_eof():
            writer.write_eof()
        # the server measured what it received: (bytes, timed bytes, timed ns)
        result = Reply.decode(
            await asyncio.wait_for(reader.readexactly(REPLY_SIZE), grant.c / 1000 + 2 * b.timeout_s)
        )
    finally:
        writer.close()
    return rate_bps(result.b, result.c), result.a, result.stall_permille / 1000


async def _download(host: str, port: int, b: ProbeBudget) -> tuple[float | None, int]:
    req = Request(Op.DOWNLOAD, b.bytes, 0, int(b.seconds * 1000))
    reader, writer, grant = await _open(host, port, req, b.timeout_s)
    try:
        meter = await receive_timed(reader, grant.a, grant.c / 1000 + 2 * b.timeout_s, b.timeout_s)
    finally:
        with contextlib.suppress(Exception):
            writer.close()
    return rate_bps(meter.timed, meter.elapsed_ns), meter.total
