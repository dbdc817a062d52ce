"""The history store of a home: closed runs in `<home>/history.db` (SQLite, WAL mode).

The store of `store/history.py` (a writer thread, batches, reads for the
loop), in a file of the home: each batch is one transaction and one
`fsync`. The search attributes have a table of their own
(`fusee_runtime.search`). The loop reads through its own connection (WAL:
while the thread writes). The file's schema, how it is opened and what
damage to it looks like are `store/history_db.py`'s.

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

import contextlib
import logging
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import orjson

from fusee_runtime import search
from fusee_runtime.errors import HistoryDamaged
from fusee_runtime.store.history import Closed, HistoryBase, ResetSource
from fusee_runtime.store.history_db import (
    ADDED,
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
from fusee_runtime.store.history_sql import COLUMNS, Dialect

log = logging.getLogger("fusee")

SQLITE = Dialect(
    runs="runs",
    pruned="pruned",
    p="?",
    where=search.sql,
    plus="+",
    explain="EXPLAIN QUERY PLAN ",
    not_kept="run_id NOT IN (SELECT run_id FROM kept)",
    kept_bound=False,
    insert_new=("INSERT OR IGNORE INTO", ""),
    attributes_text=True,
)


class SqliteHistory(HistoryBase[sqlite3.Connection]):
    """`<home>/history.db`: a writer thread for closed runs, and reads for the loop."""

    dialect = SQLITE

    def __init__(self, home: Path, on_stored: Callable[[list[str]], None]) -> None:
        """`on_stored(run_ids)` is called on the writer thread after each commit."""
        self.path = home / NAME
        super().__init__(str(self.path), on_stored)
        self._db: sqlite3.Connection | None = None

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
        self._start()

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

    def _damaged(self, e: BaseException) -> HistoryDamaged | None:
        return self._found_damaged(e) if is_damage(e) else None

    def broken(self, why: str) -> HistoryDamaged:
        """The error for a stored run that cannot be used (`damaged`)."""
        return damaged(self.path, why)

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

    def _close_reads(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def _connect_writer(self) -> sqlite3.Connection:
        return connect(self.path)

    def _write(self, db: sqlite3.Connection, closed: list[Closed]) -> None:
        gone: set[str] = set()
        if any(c.again for c in closed):
            gone = {run_id for (run_id,) in db.execute("SELECT run_id FROM pruned")}
        rows = [
            (
                *c.row.columns()[:-2],
                orjson.dumps(c.row.attributes).decode(),
                c.row.failure,
                c.creation,
                c.arrays(),
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
        self._stored(len(rows), closed)

    def prune(
        self, before: float, floor: int, keep: Iterable[str], reset_source: ResetSource
    ) -> int:
        """Deletes runs closed before `before` (Unix seconds); returns how many.

        `floor` is the lsn from which opening the home may replay the journal
        (the older checkpoint kept): a pruned run that closed after it may be
        found closed again on open, and is remembered so it is not stored
        again. The runs in `keep`, and those a reset that began after `floor`
        started from (`reset_source` says which), stay: replaying that reset
        needs them.

        Raises:
            HistoryDamaged: the store cannot be read.
        """
        self._usable()
        try:
            db = connect(self.path)  # its own: this runs on a thread, beside the loop's reads
            try:
                db.execute("BEGIN IMMEDIATE")
                try:
                    n = self._prune_rows(db, before, floor, keep, reset_source)
                    db.execute("COMMIT")
                except BaseException:
                    rollback(db)
                    raise
            finally:
                db.close()
        except (sqlite3.Error, orjson.JSONDecodeError) as e:
            if is_damage(e):
                raise self._found_damaged(e) from None
            if isinstance(e, sqlite3.Error):
                raise  # a full disk, say: nothing is damaged
            raise damaged(self.path, e) from None
        self.pruned_before = max(self.pruned_before, before)
        return n

    def _keeping(self, db: sqlite3.Connection, kept: set[str]) -> None:
        db.execute("CREATE TEMP TABLE IF NOT EXISTS kept (run_id TEXT PRIMARY KEY)")
        db.execute("DELETE FROM kept")
        db.executemany("INSERT OR IGNORE INTO kept VALUES (?)", [(k,) for k in kept])

    def _deleting(self, db: sqlite3.Connection, doomed: str, args: tuple[object, ...]) -> None:
        doomed_ids = f"SELECT run_id FROM runs WHERE {doomed}"
        db.execute(f"DELETE FROM attributes WHERE run_id IN ({doomed_ids})", args)
