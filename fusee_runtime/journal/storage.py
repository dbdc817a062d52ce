"""The only module that opens, writes and syncs journal files.

`Storage` is the narrow seam every journal file operation goes through, so
tests can subclass it to inject faults (a torn or short write, a failing
`fdatasync`, a full disk) or to hold the disk still at a chosen instant.

A file is opened only if it is no symbolic link and this account's, and a
temporary file is made anew (`journal/safefiles.py`): checked when a file
is opened, never per append.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from fusee_runtime.journal.safefiles import create_afresh, nofollow, open_file

ZERO_CHUNK_BYTES = 1 << 20
FILE_MODE = 0o600
"""Segments and checkpoints are the owner's alone: they hold every input, result and signal."""


class Storage:
    """File operations on the journal, with the semantics of POSIX."""

    loop_safe = True
    """Whether the engine may call `write` and `sync` on its event loop (it commits
    there when the loop is idle). A storage whose calls can wait for something the
    loop must do first (a test that holds the disk still) says False."""

    def list_segments(self, directory: Path) -> list[Path]:
        """Segment files in order."""
        return sorted(directory.glob("*.seg"))

    def read(self, path: Path) -> bytes:
        with open(path, "rb", opener=nofollow) as f:
            return f.read()

    def read_head(self, path: Path, size: int) -> bytes:
        """The first `size` bytes of a file (fewer if it is shorter)."""
        with open(path, "rb", opener=nofollow) as f:
            return f.read(size)

    def open(self, path: Path) -> int:
        """Opens an existing segment for writing."""
        return open_file(path, os.O_RDWR)

    def create(self, path: Path, size_bytes: int, header: bytes) -> int:
        """Creates a segment of `size_bytes` zeros starting with `header`, durably.

        Zeros are written, not just allocated, so later appends overwrite
        blocks the filesystem already counts as written and `fdatasync` has
        no extent or size metadata to flush.
        """
        tmp = path.with_suffix(".tmp")
        fd = create_afresh(tmp, os.O_RDWR, FILE_MODE)
        try:
            zeros = bytes(min(ZERO_CHUNK_BYTES, size_bytes))
            offset = 0
            while offset < size_bytes:
                n = min(len(zeros), size_bytes - offset)
                self.write(fd, offset, zeros[:n] if n < len(zeros) else zeros)
                offset += n
            self.write(fd, 0, header)
            self.sync(fd)
        except BaseException:
            os.close(fd)
            raise
        os.rename(tmp, path)
        self.sync_dir(path.parent)
        return fd

    def write(self, fd: int, offset: int, data: bytes | memoryview) -> None:
        """Writes all of `data` at `offset` of a segment, continuing after short writes."""
        self._write_all(fd, offset, data)

    def _write_all(self, fd: int, offset: int, data: bytes | memoryview) -> None:
        # `write` is the journal's (a test storage that holds or fails appends overrides
        # it); `write_file` (checkpoints, on another thread) comes here directly.
        n = self.pwrite(fd, data, offset)
        if n == len(data):
            return
        if n <= 0:
            raise OSError(errno.EIO, f"pwrite wrote {n} of {len(data)} bytes")
        view = memoryview(data)[n:]
        offset += n
        while view:
            n = self.pwrite(fd, view, offset)
            if n <= 0:
                raise OSError(errno.EIO, f"pwrite wrote {n} of {len(view)} bytes")
            view = view[n:]
            offset += n

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        """One `pwrite(2)`: returns how many bytes it wrote, which may be fewer than asked."""
        return os.pwrite(fd, data, offset)

    def sync(self, fd: int) -> None:
        """Makes every write to `fd` durable. Never retried on failure."""
        os.fdatasync(fd)

    def sync_dir(self, directory: Path) -> None:
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def write_file(self, path: Path, data: bytes) -> None:
        """Makes `path` anew holding `data`, durably (`fsync`: its size changes); what
        was there (a crash's leftover) is unlinked, never written through."""
        fd = create_afresh(path, os.O_WRONLY, FILE_MODE)
        try:
            self._write_all(fd, 0, data)
            os.fsync(fd)
        finally:
            os.close(fd)

    def rename(self, src: Path, dst: Path) -> None:
        """Renames `src` over `dst` atomically (the caller syncs the directory)."""
        os.rename(src, dst)

    def remove(self, path: Path) -> None:
        path.unlink(missing_ok=True)

    def close(self, fd: int) -> None:
        os.close(fd)
