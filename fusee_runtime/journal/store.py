"""Where a home's journal lives: the local files (the default) or PostgreSQL.

A `JournalStore` is what the engine's storage seam (`engine/durability.py`)
and recovery need from a journal, and nothing more:

- `open()` takes the journal for this process alone (the local home's lock
  file is taken by the engine; PostgreSQL takes an advisory lock) and
  `close()` gives it back;
- `read()` is step 1 of recovery: the newest whole checkpoint and every
  record after it, in lsn order, with no gap;
- `writer(...)` makes the group-commit writer that appends after that (a
  `Writer`: an lsn at once, durable once a commit publishes it, fail-stop);
- `write_checkpoint` stores a checkpoint and compacts what it makes
  unnecessary; `replay_floor` says after which lsn opening may replay.

`open_store` picks the store from `Config.store`. The local journal keeps
its place on the hot path: nothing here runs per record.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from fusee_runtime.journal import checkpoint as ckpt
from fusee_runtime.journal.reader import JournalRead, Tail, first_lsns, locate, recover
from fusee_runtime.journal.storage import Storage
from fusee_runtime.journal.writer import Counters, JournalWriter

if TYPE_CHECKING:
    from fusee_runtime.engine.config import Config
    from fusee_runtime.engine.history import HistoryStore
    from fusee_runtime.engine.runlog import RunLog

log = logging.getLogger("fusee")
T = TypeVar("T")


class Writer(Protocol):
    """Group commit, as `journal/writer.py` describes it for the local journal."""

    counters: Counters
    sync_s_recent: float
    """Moving average of the latest commits' seconds."""
    synced_lsn: int
    synced_at: tuple[int, str | None, int]
    """(`synced_lsn`, the segment and offset the next record goes to; None: no segment)."""

    @property
    def next_lsn(self) -> int: ...
    def append(self, payload: bytes) -> int: ...
    def ask(self) -> None: ...
    def commit_here(self) -> int | None: ...
    def close(self) -> None: ...


class JournalStore(Protocol):
    """A home's journal: taken, read, written, checkpointed (see the module)."""

    name: str
    """Where it is, for messages."""
    loop_safe: bool
    """Whether commits may run on the engine's loop when it is idle."""
    remote: bool
    """Whether its calls go over the network (the engine makes them off its loop)."""
    shard: tuple[int, int]
    """Which journal of how many its database holds, once open (`journal/shards.py`):
    a run's id must belong to it. (0, 1) alone."""
    epoch: int
    """This process's turn driving the journal, once open, never lower than an earlier
    driver's (`Ctx.fence`): PostgreSQL counts opens; a local journal, which one
    process drives until it ends, has the lsn it began writing at."""

    def open(self) -> None: ...
    def close(self) -> None: ...
    def read(self) -> JournalRead: ...
    def writer(
        self,
        tail: Tail,
        on_durable: Callable[[int], None],
        on_failed: Callable[[BaseException], None],
        sync: bool,
        record_bytes_max: int,
    ) -> Writer: ...
    def write_checkpoint(self, lsn: int, body: dict[str, Any]) -> int: ...
    def replay_floor(self) -> int: ...
    def history(self, home: Path, on_stored: Callable[[list[str]], None]) -> HistoryStore:
        """Where the runs that closed go (`on_stored` is called with those committed)."""
        ...

    def token_secret(self) -> bytes | None:
        """The completion tokens' secret, when the store keeps it (else the home does)."""
        ...

    def run_log(self, home: Path) -> RunLog:
        """Where `ctx.log` lines go (`engine/runlog.py`): `<home>/logs`, or beside the
        journal when another host may read them."""
        ...

    def set_aside(self, damaged: list[Any]) -> None: ...
    def locate(self, lsn: int) -> tuple[str, int | None]: ...
    def disk_bytes(self) -> int: ...


async def off_loop(store: JournalStore, fn: Callable[[], T]) -> T:
    """`fn()` on a thread for a remote store (network round trips), else right here."""
    return await asyncio.to_thread(fn) if store.remote else fn()


def open_store(home: Path, config: Config) -> JournalStore:
    """The store `config.store` names: the local journal in `<home>/journal` when None,
    else PostgreSQL (`postgresql://...`)."""
    if config.store is None:
        return LocalJournal(home / "journal", config.storage, config.segment_bytes)
    from fusee_runtime.journal.postgres import PgJournal

    return PgJournal(config.store, lease=config.lease)


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

    def history(self, home: Path, on_stored: Callable[[list[str]], None]) -> HistoryStore:
        from fusee_runtime.engine.history import HistoryStore

        return HistoryStore(home, on_stored)

    def token_secret(self) -> None:
        return None

    def run_log(self, home: Path) -> RunLog:
        from fusee_runtime.engine.runlog import RunLog

        return RunLog(home / "logs")

    def write_checkpoint(self, lsn: int, body: dict[str, Any]) -> int:
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

    def set_aside(self, damaged: list[Any]) -> None:
        """Renames damaged checkpoints to `.damaged` once the home opened without them:
        kept to look at, and no longer counted as the one to fall back on."""
        for path in damaged:
            self.storage.rename(path, path.with_name(path.name + ".damaged"))
        if damaged:
            self.storage.sync_dir(damaged[0].parent)

    def locate(self, lsn: int) -> tuple[str, int]:
        return locate(self.directory, self.storage, lsn)

    def disk_bytes(self) -> int:
        """Bytes of the segment files now (0 if the directory cannot be read)."""
        try:
            return sum(p.stat().st_size for p in self.storage.list_segments(self.directory))
        except OSError:
            return 0
