"""The run log in files: `ctx.log` lines in `<home>/logs/`.

Format. One JSON object per line, appended to `<home>/logs/fusee.log`:

    {"ts":1700000000.25,"level":"info","id":"o-1","workflow":"order","run_id":"9f…",
     "step":"charge","attempt":2,"msg":"charging 1800 cents"}

`ts` is the engine clock's Unix seconds; `level` is debug, info, warn or
error; `workflow` is the run's workflow, the name it is registered under;
`step` and `attempt` are null outside a step function. Lines written before
`workflow` was added lack it: a reader takes every field but `id` as
optional. What the engine writes, and when, is `engine/runlog.py`'s; a
store of the lines takes them as they are (`encode_line`), and a journal in
PostgreSQL keeps the same lines in a table (`store/pg_log.py`).

Rotation. Before a line would take the file past `file_bytes_max`, it is
renamed `fusee.log.1` (`.1` becomes `.2`, and so on up to `files_kept`; the
oldest goes). `LogTail` follows the files by inode, so a rename does not
lose a reader's place.

Not durable. A line is written and flushed on its own, never synced, and
the journal does not know about it: that keeps `ctx.log` off the journal's
hot path, and a power loss can drop the last lines.

Threads. Plain `def` steps run in the engine's thread pool and log from
there, so a lock guards the file.

Safety. The file is opened only if it is no symbolic link and this
account's (`journal/safefiles.py`), by the writer and by readers alike:
another account that once could write to `logs/` cannot get the lines
appended to a file of its own.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from pathlib import Path
from typing import BinaryIO, cast

import orjson

from fusee_runtime.journal.safefiles import check_dir, nofollow, open_file, private_dir
from fusee_runtime.model.json import JsonObject

log = logging.getLogger("fusee")

FILE_NAME = "fusee.log"
FILE_BYTES_MAX = 8 << 20
"""Size at which the log file is rotated."""
FILES_KEPT = 3
"""Rotated files kept beside the current one: `fusee.log.1` (newest) to `.3`."""
ROTATED_FILES_MAX = 1000
"""Most rotated files a reader looks for, whatever `files_kept` was."""


def encode_line(line: JsonObject) -> bytes:
    """A line of the run log as it is stored: its JSON and a newline."""
    try:
        return orjson.dumps(line) + b"\n"
    except TypeError:  # a message with lone surrogates, which UTF-8 cannot hold
        msg = str(line["msg"]).encode("utf-8", "backslashreplace").decode()
        return orjson.dumps({**line, "msg": msg}) + b"\n"


def id_of(line: JsonObject) -> str:
    """The workflow id a line is of (its `id`: the engine tags every line with it)."""
    return cast(str, line["id"])


class FileRunLog:
    """The home's log file; one per open engine that drives runs.

    Args:
        directory: where the files go (`<home>/logs`), made on the first line.
        file_bytes_max: rotate before a line would take the file past this size.
        files_kept: rotated files to keep (at least 1).
    """

    def __init__(
        self,
        directory: Path,
        file_bytes_max: int = FILE_BYTES_MAX,
        files_kept: int = FILES_KEPT,
    ) -> None:
        if file_bytes_max < 1 or files_kept < 1:
            raise ValueError("file_bytes_max and files_kept must be at least 1")
        self.directory = directory
        self.path = directory / FILE_NAME
        self.file_bytes_max = file_bytes_max
        self.files_kept = files_kept
        self._lock = threading.Lock()
        self._file: BinaryIO | None = None
        self._size = 0
        self._closed = False
        self._failing = False

    def close(self) -> None:
        """Closes the file; lines logged afterwards (a step thread still running) are dropped."""
        with self._lock:
            self._closed = True
            self._close_file()

    def write(self, line: JsonObject) -> None:
        """Appends one line and flushes it (no sync). A write error drops the line, once
        reported on the `fusee` logger: the run log must never fail a run."""
        self.append(id_of(line), encode_line(line))

    def append(self, id: str, data: bytes) -> None:
        """Appends the line `data` (JSON and a newline) of a run of `id`."""
        with self._lock:
            if self._closed:
                return
            try:
                if self._file is None:
                    self._open()
                if self._size and self._size + len(data) > self.file_bytes_max:
                    self._rotate()
                assert self._file is not None
                self._file.write(data)
                self._file.flush()
                self._size += len(data)
                self._failing = False
            except OSError as e:
                if not self._failing:
                    log.warning("fusee: cannot write the run log %s: %s", self.path, e)
                self._failing = True
                self._close_file()

    def lines(self, id: str, last: int) -> list[JsonObject]:
        """The last `last` lines of the runs of `id`, oldest first, decoded."""
        decoded = (orjson.loads(line) for line in read_all(self.directory))
        return [line for line in decoded if line.get("id") == id][-last:]

    def _open(self) -> None:
        private_dir(self.directory, parents=True)
        torn = False
        # 0600: the lines hold what the runs' code chose to log (its data, often).
        fd = open_file(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
        with contextlib.suppress(OSError):  # an empty file: nothing to end
            torn = os.pread(fd, 1, os.lseek(fd, -1, os.SEEK_END)) != b"\n"
        self._file = os.fdopen(fd, "ab")
        if torn:
            # The last line was cut (a power loss): end it, so the next line stays whole.
            self._file.write(b"\n")
        self._size = self._file.tell()

    def _rotate(self) -> None:
        self._close_file()
        for k in range(self.files_kept - 1, 0, -1):
            older = rotated(self.path, k)
            if older.exists():
                os.replace(older, rotated(self.path, k + 1))
        os.replace(self.path, rotated(self.path, 1))
        self._open()

    def _close_file(self) -> None:
        if self._file is not None:
            f, self._file = self._file, None
            with contextlib.suppress(OSError):
                f.close()


def rotated(path: Path, k: int) -> Path:
    """The `k`th newest rotated file of `path` (`fusee.log.1` is the newest)."""
    return path.with_name(f"{path.name}.{k}")


class LogTail:
    """Reads a run log from its oldest kept line, then what is appended, across rotations.

    The reader holds the file it reads open, and knows it by inode: when the
    current file's inode changes, its own file was rotated, so it reads that
    to its end, then every rotated file newer than it, then the new one.
    Best effort: a file rotated out and deleted between two reads is lost.
    """

    def __init__(self, directory: Path) -> None:
        self.path = directory / FILE_NAME
        self._file: BinaryIO | None = None
        self._ino: tuple[int, int] | None = None
        self._partial = b""

    def read(self) -> list[bytes]:
        """The whole lines written since the last call (first call: every kept line).

        Raises:
            HomeUnsafe: the directory or a file is not this account's alone
                (`journal/safefiles.py`): lines another account wrote are not shown.
        """
        lines: list[bytes] = []
        if self._ino is None:
            check_dir(self.path.parent)
        if self._file is not None:
            moved = _ino(self.path) != self._ino
            lines += self._drain()  # after the check: a moved file is final, read all of it
            if not moved:
                return lines
            self._file.close()
            self._file, self._partial = None, b""
        try:
            f = open(self.path, "rb", opener=nofollow)  # noqa: SIM115 (held open across reads)
        except FileNotFoundError:
            return lines  # nothing yet, or the writer is between two files
        ino = _key(os.fstat(f.fileno()))
        for path in self._between(self._ino, ino):
            lines += _whole_lines(path)
        self._file, self._ino = f, ino
        lines += self._drain()
        return lines

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def _drain(self) -> list[bytes]:
        assert self._file is not None
        data = self._partial + self._file.read()
        *lines, self._partial = data.split(b"\n")
        return [line for line in lines if line]

    def _between(self, older: tuple[int, int] | None, newer: tuple[int, int]) -> list[Path]:
        """Rotated files newer than inode `older` (None: all) and older than `newer`,
        oldest first."""
        chain: list[tuple[Path, tuple[int, int]]] = []  # newest first
        for k in range(1, ROTATED_FILES_MAX + 1):
            path = rotated(self.path, k)
            key = _ino(path)
            if key is None:
                break
            chain.append((path, key))
        keys = [key for _, key in chain]
        start = keys.index(newer) + 1 if newer in keys else 0
        end = keys.index(older) if older in keys else len(chain)
        return [path for path, _ in reversed(chain[start:end])]


def read_all(directory: Path) -> list[bytes]:
    """Every kept line of the run log in `directory`, oldest first."""
    tail = LogTail(directory)
    try:
        return tail.read()
    finally:
        tail.close()


def _whole_lines(path: Path) -> list[bytes]:
    try:
        with open(path, "rb", opener=nofollow) as f:
            data = f.read()
    except FileNotFoundError:
        return []
    *lines, _torn = data.split(b"\n")
    return [line for line in lines if line]


def _key(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _ino(path: Path) -> tuple[int, int] | None:
    try:
        return _key(path.stat())
    except FileNotFoundError:
        return None
