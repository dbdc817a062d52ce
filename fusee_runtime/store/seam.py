"""The storage seam: what the engine and the control surface may ask of a store.

A store keeps a home's journal and what goes with it: the local files (the
default: `store/local.py`, over `journal/`'s format) or PostgreSQL
(`Config.store = "postgresql://..."`: `store/postgres.py` and the `pg_*`
modules). Everything above the seam asks through the protocols here, and
gets its store from the factories: `open_store` (this module) for a home's
journal, `store/shared.py`'s `open_shared` for a database that several
processes share. Nothing outside `store/` (and `journal/`) names a store
kind (`PgJournal`, psycopg, a `pg_*` module); nothing in them imports the
engine or the control surface (`tests/unit/test_architecture.py`).

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
  unnecessary; `replay_floor` says after which lsn opening may replay;
- `history(...)` is where closed runs go (a `HistoryStore`), `run_log(...)`
  where `ctx.log` lines go (a `RunLogStore`), `token_secret()` who keeps the
  completion tokens' secret, and `relay(...)` how commands on other hosts
  reach the driver (a `Relay`; none for the local journal, reached through
  the home's socket).

The local journal keeps its place on the hot path: nothing here runs per
record.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from fusee_runtime.errors import HistoryDamaged
from fusee_runtime.journal.reader import JournalRead, Tail
from fusee_runtime.journal.storage import Storage
from fusee_runtime.journal.writer import Counters
from fusee_runtime.model.json import JsonObject
from fusee_runtime.search import Condition
from fusee_runtime.store.history import Closed, ResetSource, Row
from fusee_runtime.store.local import LocalJournal

if TYPE_CHECKING:
    from asyncio import StreamReader

T = TypeVar("T")


class AnswerWriter(Protocol):
    """Where an answer's lines go, as a socket's writer: `write` each, then `drain`;
    `close` once the answer is whole."""

    def write(self, data: bytes) -> None: ...
    async def drain(self) -> None: ...
    def close(self) -> None: ...


Answer = Callable[["StreamReader", AnswerWriter], Awaitable[None]]
"""How the driver answers one request: `(reader, writer)` of its lines, as a socket's
(`ControlServer.answer`)."""


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
    @property
    def failed(self) -> BaseException | None:
        """What failed a commit (on the writer's thread), once one did."""
        ...

    def append(self, payload: bytes) -> int: ...
    def ask(self) -> None: ...
    def commit_here(self) -> int | None: ...
    def close(self) -> None: ...


class HistoryStore(Protocol):
    """Where closed runs go, and are read back from (`store/history.py`). Every read
    raises `HistoryDamaged` when the store cannot be read."""

    damage: HistoryDamaged | None
    """Why the store cannot be used (found on open, a read or a write), if it cannot."""
    rows_written: int

    def open(self) -> None:
        """Opens the store and starts its writer thread (a store that cannot be opened
        says so in `damage`, and does not stop the home)."""
        ...

    def close(self) -> None:
        """Writes what is queued, then stops the thread and closes the store."""
        ...

    def put(self, closed: Closed) -> None:
        """Queues a closed run for the next batch."""
        ...

    def flush(self) -> None:
        """Returns once everything queued before is committed (raises what failed)."""
        ...

    def broken(self, why: str) -> HistoryDamaged:
        """The error for a stored run that cannot be used, naming where it is."""
        ...

    def latest(self, workflow_id: str) -> Row | None: ...
    def exists(self, run_id: str) -> bool: ...
    def full(self, run_id: str) -> tuple[JsonObject | None, list[list[Any]]] | None:
        """(creation, records) of a stored run."""
        ...

    def records_of(self, workflow_id: str) -> list[tuple[str, list[list[Any]]]]: ...
    def closes(
        self, after: int | None, run_ids: Collection[str] = ()
    ) -> list[tuple[str, int, int]]:
        """(run_id, start_lsn, close_lsn) of the stored runs begun after record `after`
        (None: none) and of those of `run_ids` (`engine/opening.py`)."""
        ...

    def list(
        self,
        status: str | None,
        workflow: str | None,
        limit: int | None,
        parent: str | None = None,
        where: Sequence[Condition] = (),
        before: int | None = None,
    ) -> builtins.list[Row]:
        """Newest first, begun before record `before`: the rows as stored (a failed
        run's row written before the store kept failures has none)."""
        ...

    def query_plan(
        self,
        status: str | None,
        workflow: str | None,
        limit: int | None,
        where: Sequence[Condition] = (),
    ) -> str: ...
    def prune(
        self, before: float, floor: int, keep: Iterable[str], reset_source: ResetSource
    ) -> int:
        """Deletes runs closed before `before` (Unix seconds) but those in `keep` and
        those a reset begun after `floor` started from; returns how many."""
        ...


class RunLogStore(Protocol):
    """Where `ctx.log` lines go, from any thread, never synced (`store/log_files.py`
    says their format)."""

    def write(self, line: JsonObject) -> None:
        """Stores one line (dropped, once reported, if it cannot: never raises)."""
        ...

    def lines(self, id: str, last: int) -> list[JsonObject]:
        """The last `last` lines of the runs of `id`, oldest first, decoded."""
        ...

    def close(self) -> None:
        """Stores what it can of what is pending; lines written afterwards are dropped."""
        ...


class Tasks(Protocol):
    """Step attempts handed to the workers that have their labels, through the store
    (`store/pg_tasks.py` says how). Each call may raise `StoreUnavailable`."""

    async def offer(self, labels: list[str], body: bytes) -> int: ...
    async def look(self, task: int) -> tuple[int | None, bytes | None]: ...
    async def take(self, labels: list[str]) -> tuple[int, bytes] | None: ...
    async def answer(self, task: int, answer: bytes) -> None: ...
    async def withdraw(self, task: int) -> None: ...
    async def close(self) -> None: ...


class Relay(Protocol):
    """The driver's side of the control requests that commands on other hosts make in
    the store (`control/remote.py`)."""

    async def start(self) -> None:
        """Connects and starts taking requests."""
        ...

    def stop_taking(self) -> None:
        """Takes no more requests; the calls in progress go on (until `close`)."""
        ...

    async def close(self) -> None:
        """Stops taking requests, cuts the calls in progress, and disconnects."""
        ...


class JournalStore(Protocol):
    """A home's journal: taken, read, written, checkpointed (see the module)."""

    name: str
    """Where it is, for messages."""
    loop_safe: bool
    """Whether commits may run on the engine's loop when it is idle."""
    remote: bool
    """Whether its calls go over the network (the engine makes them off its loop)."""
    shard: tuple[int, int]
    """Which journal of how many its database holds, once open (`store/shards.py`):
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
    def write_checkpoint(self, lsn: int, body: JsonObject) -> int: ...
    def replay_floor(self) -> int: ...
    def history(self, home: Path, on_stored: Callable[[list[str]], None]) -> HistoryStore:
        """Where the runs that closed go (`on_stored` is called with those committed)."""
        ...

    def token_secret(self) -> bytes | None:
        """The completion tokens' secret, when the store keeps it (else the home does)."""
        ...

    def run_log(self, home: Path) -> RunLogStore:
        """Where `ctx.log` lines go: `<home>/logs`, or beside the journal when another
        host may read them."""
        ...

    def tasks(self) -> Tasks | None:
        """Where a labelled step's attempt is offered to the workers that have its labels
        (a connection of its own, made on first use); None: a store of one process,
        where every step runs in the engine's."""
        ...

    def relay(self, answer: Answer) -> Relay | None:
        """The control requests that commands on other hosts make through the store,
        each answered with `answer` (not taken until `Relay.start`); None when they
        reach the driver on the home's socket alone."""
        ...

    def set_aside(self, damaged: list[Path] | list[int]) -> None: ...
    def locate(self, lsn: int) -> tuple[str, int | None]: ...
    def disk_bytes(self) -> int: ...


class StoreConfig(Protocol):
    """What of `Config` says where a home's journal lives."""

    @property
    def store(self) -> str | None: ...
    @property
    def storage(self) -> Storage: ...
    @property
    def segment_bytes(self) -> int: ...
    @property
    def lease(self) -> float: ...


async def off_loop(store: JournalStore, fn: Callable[[], T]) -> T:
    """`fn()` on a thread for a remote store (network round trips), else right here."""
    return await asyncio.to_thread(fn) if store.remote else fn()


def open_store(home: Path, config: StoreConfig) -> JournalStore:
    """The store `config.store` names: the local journal in `<home>/journal` when None,
    else PostgreSQL (`postgresql://...`). Nothing is connected or read until `open`."""
    if config.store is None:
        return LocalJournal(home / "journal", config.storage, config.segment_bytes)
    from fusee_runtime.store.postgres import PgJournal

    return PgJournal(config.store, lease=config.lease)
