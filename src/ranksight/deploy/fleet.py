"""Run one action on many hosts: bounded parallelism, a shared jump connection, a progress bar, one result per host.

A host that fails (unreachable, auth, disk full, dropped, failing install) becomes a ``failed`` result with its reason;
the others carry on. Every reason passes through :func:`deploy.plan.redact` before it leaves this module.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TextIO

from nats.aio.client import Client

from ranksight.core.redact import redact
from ranksight.deploy.hosts import Host
from ranksight.deploy.plan import DeployOptions
from ranksight.deploy.ssh import HostFailed, Node, SshOptions, explain, jump_connection
from ranksight.deploy.steps import HostResult

HostAction = Callable[[Node], Awaitable[HostResult]]


class Progress:
    """``[#####.....] 5/10 ok 4 failed 1`` redrawn in place on a terminal; one line per finished host otherwise."""

    def __init__(self, total: int, stream: TextIO = sys.stderr, width: int = 30) -> None:
        self.total, self.stream, self.width = total, stream, width
        self.done = self.failed = 0
        self.tty = stream.isatty()

    def update(self, result: HostResult) -> None:
        self.done += 1
        self.failed += result.failed
        filled = self.width * self.done // max(1, self.total)
        bar = f"[{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total} failed {self.failed}"
        if self.tty:
            self.stream.write(f"\r{bar}" + ("\n" if self.done == self.total else ""))
        else:
            self.stream.write(f"{bar}  {result.host}: {result.result}\n")
        self.stream.flush()


async def run_fleet(
    hosts: Sequence[Host], opts: DeployOptions, action: HostAction, progress: Progress | None = None
) -> list[HostResult]:
    ssh_opts = SshOptions(opts.settings.deploy, opts.accept_new_host_keys)
    limit = asyncio.Semaphore(opts.settings.deploy.parallel)

    async def one(host: Host, tunnel: Any) -> HostResult:
        async with limit:
            try:
                async with Node.open(host, ssh_opts, tunnel) as node:
                    result = await action(node)
            except HostFailed as exc:
                result = HostResult(host.name, "failed", detail=str(exc))
            except Exception as exc:  # a bug or an unforeseen remote answer must not stop the other hosts
                result = HostResult(host.name, "failed", detail=explain(exc, host))
        result.detail = redact(result.detail, opts.secrets)
        if progress:
            progress.update(result)
        return result

    try:
        async with jump_connection(opts.jump, ssh_opts) as tunnel:
            return list(await asyncio.gather(*(one(h, tunnel) for h in hosts)))
    except HostFailed as exc:  # the bastion itself failed: every host fails with that reason
        reason = redact(str(exc), opts.secrets)
        return [HostResult(h.name, "failed", detail=reason) for h in hosts]


async def connect_nats(opts: DeployOptions) -> Client:
    from ranksight.core.natsconn import connect

    return await connect(
        opts.settings.nats, name="ranksight-deploy", max_reconnect_attempts=0, allow_reconnect=False
    )
