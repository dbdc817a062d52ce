"""Four ways to damage a history store (`history.db`), shared by the engine and CLI tests.

Each takes the store's path after a clean close (so no `-wal` beside it). And a disk
whose `fdatasync` fails on demand (`FailingSync`).
"""

from __future__ import annotations

import errno
import threading
from pathlib import Path

from fusee_runtime.journal.storage import Storage


class FailingSync(Storage):
    """A disk whose `fdatasync` fails with EIO once `broken` is set (its writes still
    reach the file: the home opened again reads them)."""

    def __init__(self) -> None:
        self.broken = threading.Event()

    def sync(self, fd: int) -> None:
        if self.broken.is_set():
            raise OSError(errno.EIO, "Input/output error")
        super().sync(fd)


def overwrite_header(store: Path) -> None:
    """Its first 16 bytes (SQLite's magic string) overwritten: "file is not a database"."""
    with open(store, "r+b") as f:
        f.write(b"\xa5" * 16)


def truncate(store: Path) -> None:
    """Cut to 100 bytes: the header says more pages than there are."""
    with open(store, "r+b") as f:
        f.truncate(100)


def directory(store: Path) -> None:
    """Replaced by a directory (not empty)."""
    store.unlink()
    store.mkdir()
    (store / "something").write_text("x")


def flip_page_2(store: Path) -> None:
    """The first 4 bytes of page 2 (the `runs` table's root) flipped: SQLite opens the
    file, and fails the queries that read that page."""
    with open(store, "r+b") as f:
        f.seek(4096)
        got = f.read(4)
        f.seek(4096)
        f.write(bytes(b ^ 0xFF for b in got))


DAMAGES = [overwrite_header, truncate, directory, flip_page_2]
