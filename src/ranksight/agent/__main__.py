"""The agent process: ``ranksight agent`` validates its settings, then becomes this (``exec``, the same pid).

Reads the validated settings as JSON from an inherited file descriptor (``--settings-fd``; never the environment,
where other processes of the user could read the NATS secrets), so the process that runs the collectors holds none of
the command line's modules.
"""

from __future__ import annotations

import argparse
import ctypes
import faulthandler
import os
import signal
import sys

from ranksight.agent.settings import AgentView
from ranksight.core.aio import run_until_signalled
from ranksight.core.config import decode_settings
from ranksight.core.redact import setup_logging
from ranksight.core.websocket_transport import skip_websocket_transport
from ranksight.errors import EXIT_INTERRUPTED, exit_status

# mallopt's M_ARENA_MAX (glibc's malloc.h)
_M_ARENA_MAX = -8


def limit_malloc_arenas(arenas: int = 1) -> None:
    """glibc gives each thread that allocates its own malloc arena; the agent's file-reading threads then keep about
    8 MB of fragmented arenas. One arena costs nothing here (the threads take turns on the GIL). No-op off glibc."""
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is not None:
        mallopt(_M_ARENA_MAX, arenas)


def read_settings(fd: int) -> bytes:
    with os.fdopen(fd, "rb") as settings:
        return settings.read()


def main(argv: list[str] | None = None) -> int:
    limit_malloc_arenas()  # before any thread starts
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # as every ranksight command (ranksight.cli)
    parser = argparse.ArgumentParser(prog="ranksight agent")
    parser.add_argument("--settings-fd", type=int, required=True)
    parser.add_argument("--only", action="append")
    # what the process was started as, kept in its command line for ps and for `ranksight deploy status`
    parser.add_argument("started_as", nargs="*")
    args = parser.parse_args(argv)
    settings = decode_settings(AgentView, read_settings(args.settings_fd))
    skip_websocket_transport(settings.nats.url)  # before nats-py is imported
    from ranksight.agent.runtime import AgentRuntime  # after: it imports nats-py
    from ranksight.core.natsconn import NatsUnreachable

    setup_logging(settings.log_level)
    runtime = AgentRuntime(settings, only=args.only)
    try:
        run_until_signalled(runtime.run, settings.shutdown_timeout_s)
    except NatsUnreachable as exc:  # as ranksight.cli reports it: one line, no traceback
        print(f"ranksight: {exc}", file=sys.stderr)
        return exit_status(exc)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return 0


if __name__ == "__main__":
    sys.exit(main())
