"""The history store: closed runs, in `<home>/history.db` (SQLite, WAL mode).

A run that closed (durably, in the journal) is queued here, and one
background thread writes the queue in batches, one transaction and one
`fsync` per batch, off the durability path: nothing waits for it but the
engine's memory, which drops a closed run once its row is committed, and
compaction, which deletes journal segments only once a checkpoint no longer
needs them (a run not yet committed here is kept in the checkpoint).
Writing a run again is harmless (`INSERT OR REPLACE` by run id), so a crash
between closing a run and committing it is repaired by moving it again on
open.

Each row keeps what `list()` shows (status, times, error, attributes, a
failed run's failure) in columns, with indexes for the filters `list` takes (the search attributes
in a table of their own, `fusee_runtime.search`), and the run's whole
record (every record of its journal, and how it was created when that is
not a `RunStarted` of its own) as JSON, from which `history()` and a
closed run's `result()` are answered.

The loop reads through its own connection (WAL: while the thread writes).

When the store fails. The store holds nothing the engine needs to keep the
open runs going, so its failures never stop the home:

- *It cannot be read* (not a database, truncated, a directory where the
  file should be, a damaged page): the home opens all the same (`damage`
  says why, once, in the log). Open runs go on; a closed run stays in
  memory and in the checkpoints, as it does until the store takes it. What
  needs the closed runs it holds raises `HistoryDamaged`, whose message
  names the file and what to do. Damage that a read or a write finds later
  stops the store's use, reads and writes, until the next open. (Opening
  itself needs the store only to replay a reset, after the checkpoint, of
  a run that only the store holds: that raises `HistoryDamaged` too.)
- *It cannot be written* (a full disk): the batch is kept and written again
  every `RETRY_S`; the log says once what failed, and once that it writes
  again (`history_db.rollback` says why it may find no transaction to roll back).

The file, and SQLite's `-wal` and `-shm` beside it, are created 0600.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

from fusee_runtime import search
from fusee_runtime.engine.history_db import (
    ADDED,
    COLUMNS,
    INDEXES,
    NAME,
    SCHEMA,
    connect,
    create_private,
    damaged,
    has_table,
    is_damage,
    rollback,
)
from fusee_runtime.errors import Failure, HistoryDamaged
from fusee_runtime.model.records import R
from fusee_runtime.model.run import Status
from fusee_runtime.search import Condition

log = logging.getLogger("fusee")

BATCH_DELAY_S = 0.05
"""How long the thread lets closed runs gather before it writes a batch."""
BATCH_ROWS_MAX = 5000
RETRY_S = 1.0
"""How long the thread waits before writing again after a failed batch (a full disk)."""


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
    attributes: dict[str, Any]
    failure: dict[str, Any] | None = None
    """A failed run's recorded failure, as `RunInfo.failure` gives it (the store
    takes it from the run's records: `failure_of`)."""

    def columns(self) -> tuple[Any, ...]:
        """Its values in the order of `COLUMNS` (the same as its fields')."""
        return tuple(getattr(self, name) for name in COLUMNS.split(", "))


@dataclass
class Closed:
    """A closed run queued for the store."""

    row: Row
    creation: dict[str, Any] | None
    records: list[tuple[int, Sequence[Any]]]
    """`(lsn, record)`, each record as its JSON array (`model.codec.array`)."""
    again: bool = False
    """Queued again on open: it may have been stored, then pruned, before the crash."""


@dataclass
class _Flush:
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


_STOP = object()


class HistoryStore:
    """`<home>/history.db`: a writer thread for closed runs, and reads for the loop
    (`journal/pg_history.PgHistory` keeps the thread and the rest, in PostgreSQL)."""

    def __init__(self, home: Path, on_stored: Callable[[list[str]], None]) -> None:
        """`on_stored(run_ids)` is called on the writer thread after each commit."""
        self.path = home / NAME
        self._on_stored = on_stored
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._hurry = threading.Event()
        self._thread: threading.Thread | None = None
        self._db: sqlite3.Connection | None = None
        self.failed: BaseException | None = None
        """Why the last batch failed (None once one is written)."""
        self.damage: HistoryDamaged | None = None
        """Why the store cannot be used (found on open, a read or a write): reads raise
        it, and nothing more is written to it until the next open."""
        self.pruned_before = 0.0
        """The latest cutoff this store pruned at (0: none since open)."""
        self.rows_written = 0
        self.batches = 0

    def open(self) -> None:
        """Opens the store (made 0600 if there is none) and starts its writer thread.

        A store that cannot be opened does not stop the home: `damage` says
        why (logged once), and the store takes no runs.
        """
        try:
            create_private(self.path)
            db = connect(self.path)
        except (sqlite3.Error, OSError) as e:
            self._found_damaged(e)
            return
        try:
            had_attributes = has_table(db, "attributes")
            db.executescript(SCHEMA)
            if not had_attributes:
                # A store written before search attributes could be listed by.
                db.executescript(f"BEGIN; {search.TABLE}; {search.FILL}; COMMIT;")
            columns = {c[1] for c in db.execute("PRAGMA table_info(runs)")}
            for column, statement in ADDED:
                if column not in columns:
                    db.execute(statement)
            db.executescript(INDEXES)
        except sqlite3.Error as e:
            db.close()
            self._found_damaged(e)
            return
        self._db = db
        self._thread = threading.Thread(target=self._run, name="fusee-history", daemon=True)
        self._thread.start()

    def _found_damaged(self, e: BaseException) -> HistoryDamaged:
        """The store is damaged: it is not used again until the next open (reads raise,
        writes stop). Says so once in the log; returns the error to raise."""
        if self.damage is None:
            self.damage = damaged(self.path, e)
            log.error(
                "fusee: %s (closed runs stay in memory and in checkpoints meanwhile)",
                self.damage,
            )
        return HistoryDamaged(str(self.damage), self.damage.path)

    def broken(self, why: str) -> HistoryDamaged:
        """The error for a stored run that cannot be used (`damaged`)."""
        return damaged(self.path, why)

    def _usable(self) -> None:
        """Raises `HistoryDamaged` if the store was found damaged."""
        if self.damage is not None:
            raise HistoryDamaged(str(self.damage), self.damage.path)

    @property
    def db(self) -> sqlite3.Connection:
        assert self._db is not None, "the history store is not open"
        return self._db

    @contextlib.contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """The loop's connection; what SQLite (or a row that does not decode) raises
        becomes `HistoryDamaged`, and damage SQLite finds stops the store's use."""
        self._usable()
        try:
            yield self.db
        except (sqlite3.Error, orjson.JSONDecodeError) as e:
            if is_damage(e):
                raise self._found_damaged(e) from None
            raise damaged(self.path, e) from None

    # -- writes (the thread) -------------------------------------------------------

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
        if self._db is not None:
            self._db.close()
            self._db = None

    def _run(self) -> None:
        db: Any = None  # the writer's connection (`_connect_writer`)
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
                            log.warning("fusee: the history store %s writes again", self.path)
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

    def _next_batch(self) -> list[Any]:
        """The queue's next item, and what is queued behind it: `BATCH_ROWS_MAX` at most."""
        items = [self._queue.get()]
        if isinstance(items[0], Closed):
            self._hurry.wait(BATCH_DELAY_S)  # for more to gather, unless a flush or close hurries
        self._hurry.clear()
        with contextlib.suppress(queue.Empty):  # until the queue is empty
            while len(items) < BATCH_ROWS_MAX:
                items.append(self._queue.get_nowait())
        return items

    def _connect_writer(self) -> Any:
        return connect(self.path)

    def _failed(self, e: Exception, closed: list[Closed]) -> bool:
        """A batch failed: says what failed, once; returns whether to write it again."""
        # Memory and the checkpoints keep the runs (nothing is dropped before it is stored).
        if is_damage(e):
            self.failed = self._found_damaged(e)
            return False
        if self.failed is None:
            log.error(
                "fusee: the history store %s cannot take closed runs (%s); they stay in "
                "memory and in checkpoints, and are written again once it can",
                self.path,
                e,
            )
        self.failed = e
        for c in closed:
            self._queue.put(c)
        return True

    def _write(self, db: Any, closed: list[Closed]) -> None:
        gone: set[str] = set()
        if any(c.again for c in closed):
            gone = {run_id for (run_id,) in db.execute("SELECT run_id FROM pruned")}
        rows = [
            (
                *c.row.columns()[:-2],
                orjson.dumps(c.row.attributes).decode(),
                failure_of(c.row.status, c.records),
                c.creation,
                c.records,
            )
            for c in closed
            if not (c.again and c.row.run_id in gone)
        ]
        # One statement for the whole batch: sqlite3 lets go of the GIL for each step,
        # and with the loop busy, taking it back after every row's insert cost up to a
        # switch interval (5 ms) each; the batch fell behind by tens of thousands.
        fields = ", ".join(f"json_extract(value, '$[{i}]')" for i in range(15))
        tagged = [row[0] for row in rows if row[11] != "{}"]
        db.execute("BEGIN")
        try:
            db.execute(
                f"INSERT OR REPLACE INTO runs ({COLUMNS}, creation, records) "
                f"SELECT {fields} FROM json_each(?)",
                (orjson.dumps(rows).decode(),),
            )
            if tagged:
                db.execute(
                    search.FILL + "WHERE runs.run_id IN (SELECT value FROM json_each(?))",
                    (orjson.dumps(tagged).decode(),),
                )
            db.execute("COMMIT")
        except BaseException:
            rollback(db)
            raise
        self.rows_written += len(rows)
        self.batches += 1
        self._on_stored([c.row.run_id for c in closed])

    # -- reads (the loop) ----------------------------------------------------------
    #
    # Each raises `HistoryDamaged` when the store cannot be read.

    def latest(self, workflow_id: str) -> Row | None:
        """The newest stored run of `workflow_id`."""
        with self._reading() as db:
            got = db.execute(
                f"SELECT {COLUMNS} FROM runs WHERE workflow_id = ? ORDER BY start_lsn DESC LIMIT 1",
                (workflow_id,),
            ).fetchone()
            return _row(got) if got else None

    def exists(self, run_id: str) -> bool:
        with self._reading() as db:
            got = db.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,))
            return got.fetchone() is not None

    def full(self, run_id: str) -> tuple[dict[str, Any] | None, list[list[Any]]] | None:
        """(creation, records) of a stored run."""
        with self._reading() as db:
            got = db.execute(
                "SELECT creation, records FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            if got is None:
                return None
            creation = orjson.loads(got[0]) if got[0] is not None else None
            return creation, orjson.loads(got[1])

    def records_of(self, workflow_id: str) -> list[tuple[str, list[list[Any]]]]:
        """(run_id, records) of every stored run of `workflow_id`, oldest first."""
        with self._reading() as db:
            got = db.execute(
                "SELECT run_id, records FROM runs WHERE workflow_id = ? ORDER BY start_lsn",
                (workflow_id,),
            ).fetchall()
            return [(run_id, orjson.loads(recs)) for run_id, recs in got]

    def list_sql(
        self,
        status: str | None,
        workflow: str | None,
        limit: int | None,
        parent: str | None = None,
        where: Sequence[Condition] = (),
        before: int | None = None,
    ) -> tuple[str, tuple[Any, ...]]:
        """The query `list` runs: newest first, begun before record `before` (EXPLAIN too)."""
        clauses, args = search.sql(where)
        plus = "+" if where else ""  # see search.sql
        for column, value in (("parent_id", parent), ("status", status), ("workflow", workflow)):
            if value is not None:
                clauses.append(f"{plus}{column} = ?")
                args.append(value)
        if before is not None:
            clauses.append(f"{plus}start_lsn < ?")
            args.append(before)
        sql = f"SELECT {COLUMNS} FROM runs"
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        sql += " ORDER BY start_lsn DESC"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        return sql, tuple(args)

    def list(
        self,
        status: str | None,
        workflow: str | None,
        limit: int | None,
        parent: str | None = None,
        where: Sequence[Condition] = (),
        before: int | None = None,
    ) -> list[Row]:
        sql, args = self.list_sql(status, workflow, limit, parent, where, before)
        with self._reading() as db:
            rows = [_row(r) for r in db.execute(sql, args)]
        return self.with_failures(rows)

    def with_failures(self, rows: builtins.list[Row]) -> builtins.list[Row]:
        """`rows`, a failed run's failure read from its records where its row has none
        (written before the store had a `failure` column)."""
        filled = []
        for row in rows:
            if row.status == Status.FAILED and row.failure is None:
                stored = self.full(row.run_id)
                if stored is not None:
                    row = replace(row, failure=failure_of(row.status, stored[1]))
            filled.append(row)
        return filled

    def query_plan(
        self,
        status: str | None,
        workflow: str | None,
        limit: int | None,
        where: Sequence[Condition] = (),
    ) -> str:
        """SQLite's plan for `list` with these filters, one step per line."""
        sql, args = self.list_sql(status, workflow, limit, None, where)
        with self._reading() as db:
            return "\n".join(r[-1] for r in db.execute("EXPLAIN QUERY PLAN " + sql, args))

    def prune(self, before: float, floor: int = 0, keep: Iterable[str] = ()) -> int:
        """Deletes runs closed before `before` (Unix seconds); returns how many.

        `floor` is the lsn from which opening the home may replay the journal
        (the older checkpoint kept): a pruned run that closed after it may be
        found closed again on open, and is remembered so it is not stored
        again. The runs in `keep`, and those a reset that began after `floor`
        started from, stay: replaying that reset needs them.

        Raises:
            HistoryDamaged: the store cannot be read.
        """
        self._usable()
        try:
            n = self._prune(before, floor, keep)
        except (sqlite3.Error, orjson.JSONDecodeError) as e:
            if is_damage(e):
                raise self._found_damaged(e) from None
            if isinstance(e, sqlite3.Error):
                raise  # a full disk, say: nothing is damaged
            raise damaged(self.path, e) from None
        self.pruned_before = max(self.pruned_before, before)
        return n

    def _prune(self, before: float, floor: int, keep: Iterable[str]) -> int:
        db = connect(self.path)  # its own: this runs on a thread, beside the loop's reads
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                kept = set(keep)
                recent = db.execute(
                    "SELECT run_id, creation, records FROM runs "
                    "WHERE start_lsn > ? AND creation IS NOT NULL",
                    (floor,),
                )
                for run_id, creation, recs in recent:
                    if orjson.loads(creation)["kind"] == "reset":
                        kept.add(run_id)
                        kept.add(orjson.loads(recs)[0][1][7]["reset"])
                db.execute("CREATE TEMP TABLE IF NOT EXISTS kept (run_id TEXT PRIMARY KEY)")
                db.execute("DELETE FROM kept")
                db.executemany("INSERT OR IGNORE INTO kept VALUES (?)", [(k,) for k in kept])
                doomed = "closed_at < ? AND run_id NOT IN (SELECT run_id FROM kept)"
                db.execute(
                    "INSERT OR IGNORE INTO pruned SELECT run_id, close_lsn FROM runs "
                    f"WHERE {doomed} AND close_lsn > ?",
                    (before, floor),
                )
                db.execute("DELETE FROM pruned WHERE close_lsn <= ?", (floor,))
                doomed_ids = f"SELECT run_id FROM runs WHERE {doomed}"
                db.execute(f"DELETE FROM attributes WHERE run_id IN ({doomed_ids})", (before,))
                n = db.execute(f"DELETE FROM runs WHERE {doomed}", (before,)).rowcount
                db.execute("COMMIT")
            except BaseException:
                rollback(db)
                raise
        finally:
            db.close()
        return n


def failure_of(status: str, records: Sequence[Sequence[Any]]) -> dict[str, Any] | None:
    """The recorded failure of a failed run, from its records (`(lsn, record)` pairs),
    as `Run.info` gives it; None for a run of another status."""
    if status != Status.FAILED:
        return None
    for _, rec in reversed(records):
        if rec[0] == R.RunFailed:
            return Failure.from_json(rec[2]).to_json()
    return None


def _row(values: Iterable[Any]) -> Row:
    v = list(values)
    v[-2] = orjson.loads(v[-2])
    v[-1] = orjson.loads(v[-1]) if v[-1] is not None else None
    return Row(*v)
