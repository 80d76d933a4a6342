"""Local state is private to the user who runs ranksight: the state dir 0700, the history database and its WAL 0600.

Commands that create state (``ranksight aggregator``, ``ranksight up``, ``ranksight demo``) call :func:`keep_private`
first, before any thread or child process starts: the umask makes every file they create (DuckDB's WAL and temp files,
the JetStream store of the embedded nats-server) private from the start, and a state dir left open by an older version
is closed.
"""

from __future__ import annotations

import os
from pathlib import Path

PRIVATE_UMASK = 0o077
DIR_MODE = 0o700
FILE_MODE = 0o600


def keep_private(state_dir: Path) -> None:
    """Set the process umask to 077 and make ``state_dir`` (created if missing) 0700."""
    os.umask(PRIVATE_UMASK)
    private_dir(state_dir)


def private_dir(path: Path) -> None:
    """``path`` and missing parents created 0700; ``path`` itself set to 0700 if it existed."""
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    path.chmod(DIR_MODE)


def private_files(*paths: Path) -> None:
    """Set each of ``paths`` that exists to 0600."""
    for path in paths:
        if path.exists():
            path.chmod(FILE_MODE)
