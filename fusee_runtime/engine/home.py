"""Ownership of a home: one process at a time holds `<home>/LOCK`."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from fusee_runtime.errors import HomeLocked


class HomeLock:
    """An exclusive `flock` on `<home>/LOCK`, with the owner's pid written in it.

    The kernel drops a flock when its process dies, so a lock left by a
    crashed process is simply taken over.
    """

    def __init__(self, home: Path) -> None:
        self.path = home / "LOCK"
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise HomeLocked(str(self.path.parent), self.owner()) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def owner(self) -> int | None:
        """The pid written by the process holding (or last holding) the lock."""
        try:
            return int(self.path.read_text().strip() or 0) or None
        except (OSError, ValueError):
            return None

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
