"""The history store: where closed runs go, written by a thread, read by the loop.

A run that closed (durably, in the journal) is queued here (`put`), and one
background thread writes the queue in batches, one transaction each, off
the durability path: nothing waits for it but the engine's memory, which
drops a closed run once its row is committed (`on_stored`), and compaction,
which deletes the journal only once a checkpoint no longer needs it (a run
not yet committed here is kept in the checkpoint). Writing a run again is
harmless (by run id, the new row replaces the old), so a crash between
closing a run and committing it is repaired by queueing it again on open
(`Closed.again`). A batch that fails (a full disk, the server gone) is kept
and written again every `RETRY_S`; the log says once what failed, and once
that it writes again.

Each row keeps what `list()` shows in columns (a `Row`: plain values the
engine decides, `engine/checkpoints.py`), with indexes for the filters
`list` takes, and the run's whole record (how it was made, `creation`, when
that is not a `RunStarted` of its own; every record of its journal,
`records`) as JSON, which the store never reads into: `history()` and a
closed run's `result()` are answered from it by the engine.

`HistoryBase` is that thread and the reads, once for both stores: the
SQLite file of a home (`store/sqlite_history.py`) and the `fusee_runs`
table beside a PostgreSQL journal (`store/pg_history.py`). Each says how it
opens, connects, writes a batch and reads (what its errors mean); the SQL
they share is `store/history_sql.py`'s.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import queue
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, cast

import orjson

from fusee_runtime.errors import HistoryDamaged, StoreUnavailable
from fusee_runtime.model.codec import arrayer
from fusee_runtime.model.json import Json, JsonObject
from fusee_runtime.model.records import Record
from fusee_runtime.model.sealing import PLAIN, Chain
from fusee_runtime.search import Condition
from fusee_runtime.store.history_sql import COLUMNS, Dialect

log = logging.getLogger("fusee")

BATCH_DELAY_S = 0.05
"""How long the thread lets closed runs gather before it writes a batch."""
BATCH_ROWS_MAX = 5000
RETRY_S = 1.0
"""How long the thread waits before writing again after a failed batch (a full disk)."""
IDS_PER_QUERY = 500
"""Run ids bound in one query of `closes` (SQLite takes 32,766 values, PostgreSQL 65,535)."""

ResetSource = Callable[[JsonObject, Callable[[], list[list[Json]]]], "str | None"]
"""`prune`'s question to the engine: the run that a stored run of this `creation` was
reset from (None: it was not made by a reset), its records decoded when asked for."""

JsonText = str | bytes
"""A JSON column as the database gives it: text in SQLite, bytea in PostgreSQL."""
_Columns = tuple[
    str,
    str,
    str,
    str,
    float,
    float,
    int,
    int,
    str | None,
    str | None,
    str | None,
    "JsonText | JsonObject",
    "JsonText | None",
]
"""A row of `COLUMNS` as both schemas declare them (SQLite gives the attributes as
text, psycopg decodes PostgreSQL's jsonb)."""


class Cursor(Protocol):
    """What the stores read of a DB-API cursor (sqlite3's, psycopg's)."""

    @property
    def rowcount(self) -> int: ...
    def fetchone(self) -> Sequence[object] | None: ...
    def fetchall(self) -> Sequence[Sequence[object]]: ...
    def __iter__(self) -> Iterator[Sequence[object]]: ...


class Connection(Protocol):
    """What the stores ask of a DB-API connection (sqlite3's, psycopg's)."""

    def execute(self, sql: str, params: Sequence[object] = ..., /) -> Cursor: ...
    def close(self) -> None: ...


Db = TypeVar("Db", bound=Connection)


R = TypeVar("R")


class ReadLost(StoreUnavailable):
    """The reads' connection was lost (a store's `_reading` says so): read once more on
    a new one; lost again, the caller gets this `StoreUnavailable`."""


@dataclass(frozen=True)
class Row:
    """One closed run as the store holds it (its records read only when asked)."""

    run_id: str
    workflow_id: str
    workflow: str
    status: str
    started_at: float
    closed_at: float
    start_lsn: int
    close_lsn: int
    error: str | None
    parent_id: str | None
    parent_run_id: str | None
    attributes: dict[str, Json]
    failure: JsonObject | None = None
    """A failed run's recorded failure, as `RunInfo.failure` gives it (the engine's, as
    its `RunFailed` folded; for an older row, `engine/history.failure_of`)."""

    def columns(self) -> tuple[object, ...]:
        """Its values in the order of `COLUMNS` (the same as its fields')."""
        return tuple(getattr(self, name) for name in COLUMNS.split(", "))


@dataclass
class Closed:
    """A closed run queued for the store."""

    row: Row
    creation: JsonObject | None
    """How the run was made (`engine/creation.py`), its values made by the chain."""
    records: Sequence[tuple[int, Record]]
    """`(lsn, record)` of each of its records."""
    again: bool = False
    """Queued again on open: it may have been stored, then pruned, before the crash."""
    chain: Chain = PLAIN
    """The engine's payload codecs, which make the payloads of what is stored."""

    def arrays(self) -> list[tuple[int, tuple[object, ...]]]:
        """Its records as the store keeps them, each its JSON array (`model.codec.array`):
        made on the store's thread, not on the engine's loop."""
        made = arrayer(self.chain)
        return [(lsn, made(rec)) for lsn, rec in self.records]


@dataclass
class _Flush:
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


class _Stop:
    """What tells the thread to stop (`_STOP`)."""


_STOP = _Stop()


class HistoryBase(Generic[Db]):
    """The writer thread for closed runs and the reads for the loop (see the module);
    a store says how it connects (`_connect_writer`), writes a batch (`_write`), reads
    (`_reading`) and what of its errors is damage (`_damaged`), over its connections
    (`Db`)."""

    dialect: Dialect
    thread_name = "fusee-history"

    def __init__(self, where: str, on_stored: Callable[[list[str]], None]) -> None:
        """`on_stored(run_ids)` is called on the writer thread after each commit."""
        self.where = where
        """Where it is, for messages."""
        self._on_stored = on_stored
        self._queue: queue.SimpleQueue[Closed | _Flush | _Stop] = queue.SimpleQueue()
        self._hurry = threading.Event()
        self._thread: threading.Thread | None = None
        self.failed: BaseException | None = None
        """Why the last batch failed (None once one is written)."""
        self.damage: HistoryDamaged | None = None
        """Why the store cannot be used (found on open, a read or a write): reads raise
        it, and nothing more is written to it until the next open."""
        self.pruned_before = 0.0
        """The latest cutoff this store pruned at (0: none since open)."""
        self.rows_written = 0
        self.batches = 0

    # -- what each store says ----------------------------------------------------------

    def _connect_writer(self) -> Db:
        raise NotImplementedError

    def _write(self, db: Db, closed: list[Closed]) -> None:
        """Writes one batch in one transaction, then calls `_stored`."""
        raise NotImplementedError

    def _reading(self) -> contextlib.AbstractContextManager[Db]:
        """The loop's connection, with the store's errors said as `HistoryDamaged`."""
        raise NotImplementedError

    def _damaged(self, e: BaseException) -> HistoryDamaged | None:
        """The error to keep if `e` says the store is damaged (its use then stops)."""
        return None

    def _close_reads(self) -> None:
        pass

    def _start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()

    def _usable(self) -> None:
        """Raises `HistoryDamaged` if the store was found damaged."""
        if self.damage is not None:
            raise HistoryDamaged(str(self.damage), self.damage.path)

    # -- writes (the thread) -------------------------------------------------------------

    def put(self, closed: Closed) -> None:
        """Queues a closed run for the next batch (a damaged store takes none)."""
        if self.damage is None:
            self._queue.put(closed)

    def flush(self) -> None:
        """Returns once everything queued before is committed (raises what failed)."""
        self._usable()
        if self._thread is None or not self._thread.is_alive():
            if self.failed is not None:
                raise self.failed
            return
        flush = _Flush()
        self._queue.put(flush)
        self._hurry.set()
        flush.done.wait()
        if flush.error is not None:
            raise flush.error

    def close(self) -> None:
        """Writes what is queued, then stops the thread and closes the store."""
        if self._thread is not None:
            self._queue.put(_STOP)
            self._hurry.set()
            self._thread.join()
            self._thread = None
        self._close_reads()

    def _run(self) -> None:
        db: Db | None = None  # the writer's connection (`_connect_writer`)
        try:
            while True:
                items = self._next_batch()
                # A damaged store takes nothing more: memory and the checkpoints keep them.
                closed = [i for i in items if isinstance(i, Closed) and self.damage is None]
                retry = False
                if closed:
                    try:
                        if db is None:
                            db = self._connect_writer()
                        self._write(db, closed)
                    except Exception as e:
                        if db is not None:
                            db.close()  # the next batch starts on a fresh connection
                            db = None
                        retry = self._failed(e, closed)
                    else:
                        if self.failed is not None:
                            log.warning("fusee: the history store %s writes again", self.where)
                        self.failed = None
                for item in items:
                    if isinstance(item, _Flush):
                        item.error = self.damage or self.failed
                        item.done.set()
                if any(i is _STOP for i in items):
                    return
                if retry:
                    self._hurry.wait(RETRY_S)
        finally:
            if db is not None:
                db.close()

    def _next_batch(self) -> list[Closed | _Flush | _Stop]:
        """The queue's next item, and what is queued behind it: `BATCH_ROWS_MAX` at most."""
        items = [self._queue.get()]
        if isinstance(items[0], Closed):
            self._hurry.wait(BATCH_DELAY_S)  # for more to gather, unless a flush or close hurries
        self._hurry.clear()
        with contextlib.suppress(queue.Empty):  # until the queue is empty
            while len(items) < BATCH_ROWS_MAX:
                items.append(self._queue.get_nowait())
        return items

    def _failed(self, e: Exception, closed: list[Closed]) -> bool:
        """A batch failed: says what failed, once; returns whether to write it again."""
        # Memory and the checkpoints keep the runs (nothing is dropped before it is stored).
        damage = self._damaged(e)
        if damage is not None:
            self.failed = damage
            return False
        if self.failed is None:
            log.error(
                "fusee: the history store %s cannot take closed runs (%s); they stay in "
                "memory and in checkpoints, and are written again once it can",
                self.where,
                e,
            )
        self.failed = e
        for c in closed:
            self._queue.put(c)
        return True

    def _stored(self, rows: int, closed: list[Closed]) -> None:
        """A batch of `rows` rows (the runs `closed`) is committed."""
        self.rows_written += rows
        self.batches += 1
        self._on_stored([c.row.run_id for c in closed])

    # -- reads (the loop) ----------------------------------------------------------------
    #
    # Each raises `HistoryDamaged` when the store cannot be read.

    def _read(self, read: Callable[[Any], R]) -> R:
        """`read(db)` on the reads' connection; once more, on a new connection, when a
        store's `_reading` says the first was lost (`ReadLost`: a session the server
        ended, a restart): a read changes nothing, so it may be made twice."""
        try:
            with self._reading() as db:
                return read(db)
        except ReadLost:
            with self._reading() as db:
                return read(db)

    def latest(self, workflow_id: str) -> Row | None:
        """The newest stored run of `workflow_id`."""

        def read(db: Any) -> Row | None:
            got = db.execute(self.dialect.latest(), (workflow_id,)).fetchone()
            return self._row(got) if got else None

        return self._read(read)

    def exists(self, run_id: str) -> bool:
        return self._read(
            lambda db: db.execute(self.dialect.exists(), (run_id,)).fetchone() is not None
        )

    def full(self, run_id: str) -> tuple[JsonObject | None, list[list[Any]]] | None:
        """(creation, records) of a stored run."""

        def read(db: Any) -> tuple[JsonObject | None, list[list[Any]]] | None:
            got = db.execute(self.dialect.full(), (run_id,)).fetchone()
            if got is None:
                return None
            made, recs = cast("tuple[JsonText | None, JsonText]", got)  # (the schemas')
            creation = orjson.loads(made) if made is not None else None
            return creation, orjson.loads(recs)

        return self._read(read)

    def closes(
        self, after: int | None, run_ids: Collection[str] = ()
    ) -> list[tuple[str, int, int]]:
        """(run_id, start_lsn, close_lsn) of the stored runs begun after record `after`
        (None: none of them) and of those of `run_ids`: what opening asks before it
        replays the journal (`engine/opening.py`)."""
        p = self.dialect.p
        head = f"SELECT run_id, start_lsn, close_lsn FROM {self.dialect.runs} "
        ids = list(run_ids)

        def read(db: Any) -> list[tuple[str, int, int]]:
            got: list[tuple[str, int, int]] = []
            if after is not None:  # (by the index on start_lsn)
                got += db.execute(head + f"WHERE start_lsn > {p}", (after,)).fetchall()
            for i in range(0, len(ids), IDS_PER_QUERY):
                part = ids[i : i + IDS_PER_QUERY]
                where = f"WHERE run_id IN ({', '.join([p] * len(part))})"
                got += db.execute(head + where, part).fetchall()
            return got

        return self._read(read)

    def records_of(self, workflow_id: str) -> list[tuple[str, list[list[Any]]]]:
        """(run_id, records) of every stored run of `workflow_id`, oldest first."""

        def read(db: Any) -> list[tuple[str, list[list[Any]]]]:
            got = db.execute(self.dialect.records_of(), (workflow_id,)).fetchall()
            got = cast("Sequence[tuple[str, JsonText]]", got)  # (the schemas')
            return [(run_id, orjson.loads(recs)) for run_id, recs in got]

        return self._read(read)

    def list(
        self,
        status: str | None,
        workflow: str | None,
        limit: int | None,
        parent: str | None = None,
        where: Sequence[Condition] = (),
        before: int | None = None,
    ) -> list[Row]:
        """The stored runs with this status, workflow, parent and search conditions,
        newest first, begun before record `before`: `limit` at most."""
        sql, args = self.dialect.list(status, workflow, limit, parent, where, before)
        return self._read(lambda db: [self._row(r) for r in db.execute(sql, args)])

    def query_plan(
        self,
        status: str | None,
        workflow: str | None,
        limit: int | None,
        where: Sequence[Condition] = (),
    ) -> str:
        """The database's plan for `list` with these filters, one step per line."""
        sql, args = self.dialect.list(status, workflow, limit, None, where, None)
        return self._read(
            lambda db: "\n".join(
                cast(str, r[-1]) for r in db.execute(self.dialect.explain + sql, args)
            )
        )

    def _row(self, values: Sequence[object]) -> Row:
        """A row of `COLUMNS`, its JSON decoded."""
        v = cast(_Columns, tuple(values))  # (the schemas')
        attributes = v[-2]
        if self.dialect.attributes_text:
            attributes = orjson.loads(cast(JsonText, attributes))
        failure = orjson.loads(v[-1]) if v[-1] is not None else None
        return Row(*v[:-2], cast("dict[str, Json]", attributes), failure)

    # -- prune ---------------------------------------------------------------------------

    def _prune_rows(
        self, db: Db, before: float, floor: int, keep: Iterable[str], reset_source: ResetSource
    ) -> int:
        """Deletes the runs closed before `before` in the open transaction of `db`
        (`prune`); returns how many."""
        sql = self.dialect
        kept = set(keep)
        made = db.execute(sql.made_after(), (floor,)).fetchall()
        for run_id, creation, recs in cast("Sequence[tuple[str, JsonText, JsonText]]", made):
            source = reset_source(orjson.loads(creation), functools.partial(orjson.loads, recs))
            if source is not None:
                kept.add(run_id)
                kept.add(source)
        doomed, args = sql.doomed(before, kept)
        self._keeping(db, kept)
        db.execute(sql.remember_pruned(doomed), (*args, floor))
        db.execute(sql.forget_pruned(), (floor,))
        self._deleting(db, doomed, args)
        return db.execute(sql.delete(doomed), args).rowcount

    def _keeping(self, db: Db, kept: set[str]) -> None:
        """Before `prune` deletes: where the dialect's `not_kept` finds the kept runs."""

    def _deleting(self, db: Db, doomed: str, args: tuple[object, ...]) -> None:
        """Before `prune` deletes the doomed runs: what goes with them."""
