"""The local journal: segment files in `<home>/journal` (the default store).

The journal's format and its files are `journal/`'s (`format`, `storage`,
`writer`, `reader`, `checkpoint`); `LocalJournal` is them behind the seam
(`store/seam.py`): the closed runs go to `<home>/history.db`
(`store/sqlite_history.py`) and `ctx.log` lines to `<home>/logs`
(`store/log_files.py`). It keeps its place on the hot path: nothing here
runs per record.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, cast

from fusee_runtime.journal import checkpoint as ckpt
from fusee_runtime.journal.reader import JournalRead, Tail, first_lsns, locate, recover
from fusee_runtime.journal.storage import Storage
from fusee_runtime.journal.writer import JournalWriter
from fusee_runtime.model.json import JsonObject
from fusee_runtime.store.log_files import FileRunLog
from fusee_runtime.store.sqlite_history import SqliteHistory

if TYPE_CHECKING:
    from fusee_runtime.store.seam import Answer

log = logging.getLogger("fusee")


class LocalJournal:
    """The journal in segment files on local disk (`journal/format.py`), with its
    checkpoints beside them."""

    def __init__(self, directory: Path, storage: Storage, segment_bytes: int) -> None:
        self.directory = directory
        self.storage = storage
        self.segment_bytes = segment_bytes
        self.name = str(directory)
        self.loop_safe = storage.loop_safe
        self.remote = False
        self.shard = (0, 1)
        self.epoch = 0

    def open(self) -> None:
        pass  # the engine made the directory, under the home's lock

    def close(self) -> None:
        pass

    def read(self) -> JournalRead:
        """Cuts the leftovers of an interrupted checkpoint, takes the newest whole one
        (a damaged one is passed over for the one before), and scans the journal after
        it from where it says the next record went, cutting a torn tail."""
        journal, storage = self.directory, self.storage
        ckpt.remove_leftovers(journal, storage)
        base, passed = ckpt.newest(journal, storage)
        for e in passed:
            log.error("fusee: passing over a damaged checkpoint: %s", e)
        after = base.lsn if base is not None else 0
        at = base.body.get("at") if base is not None else None
        scan = recover(journal, storage, after=after, at=at)
        return JournalRead(base, [e.path for e in passed], scan)

    def writer(
        self,
        tail: Tail,
        on_durable: Callable[[int], None],
        on_failed: Callable[[BaseException], None],
        sync: bool,
        record_bytes_max: int,
    ) -> JournalWriter:
        self.epoch = tail.next_lsn
        return JournalWriter(
            self.directory,
            self.storage,
            tail,
            self.segment_bytes,
            on_durable=on_durable,
            on_failed=on_failed,
            sync=sync,
            record_bytes_max=record_bytes_max,
            commit_on_append=False,
        )

    def history(self, home: Path, on_stored: Callable[[list[str]], None]) -> SqliteHistory:
        return SqliteHistory(home, on_stored)

    def token_secret(self) -> None:
        return None

    def run_log(self, home: Path) -> FileRunLog:
        return FileRunLog(home / "logs")

    def tasks(self) -> None:
        return None  # one process: it has every label (docs/postgresql.md, routing)

    def relay(self, answer: Answer) -> None:
        return None  # commands reach its owner on the home's socket alone

    def write_checkpoint(self, lsn: int, body: JsonObject) -> int:
        """Writes the checkpoint atomically and durably, then deletes the segments and
        checkpoints it makes unnecessary; returns its size in bytes."""
        journal, storage = self.directory, self.storage
        path = ckpt.write(journal, storage, lsn, body)
        size = path.stat().st_size
        try:
            segments = [(p, first or 0) for p, first in first_lsns(journal, storage)]
            doomed, old = ckpt.compactable(segments, ckpt.listed(journal))
            for p in [*old, *doomed]:
                storage.remove(p)
            if doomed or old:
                storage.sync_dir(journal)
        except OSError as e:
            # The checkpoint holds; what was not deleted is deleted after the next one.
            log.error("fusee: compaction after the checkpoint at lsn %d stopped: %s", lsn, e)
        return size

    def replay_floor(self) -> int:
        return ckpt.replay_floor(ckpt.listed(self.directory))

    def set_aside(self, damaged: list[Path] | list[int]) -> None:
        """Renames damaged checkpoints to `.damaged` once the home opened without them:
        kept to look at, and no longer counted as the one to fall back on."""
        paths = cast("list[Path]", damaged)  # (what its `read` found: files)
        for path in paths:
            self.storage.rename(path, path.with_name(path.name + ".damaged"))
        if paths:
            self.storage.sync_dir(paths[0].parent)

    def locate(self, lsn: int) -> tuple[str, int]:
        return locate(self.directory, self.storage, lsn)

    def disk_bytes(self) -> int:
        """Bytes of the segment files now (0 if the directory cannot be read)."""
        try:
            return sum(p.stat().st_size for p in self.storage.list_segments(self.directory))
        except OSError:
            return 0
