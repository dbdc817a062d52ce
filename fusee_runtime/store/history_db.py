"""The history store's SQLite file (`store/sqlite_history.py`): its schema, how it is
opened (0600, never through a link), and what damage to it looks like."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

from fusee_runtime.errors import HistoryDamaged
from fusee_runtime.journal.safefiles import check_entry, open_file

NAME = "history.db"
CACHE_KIB = 32 << 10
"""SQLite's page cache per connection, in KiB (its default is 2 MiB)."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    workflow_id TEXT NOT NULL,
    workflow TEXT NOT NULL,
    status TEXT NOT NULL,
    started_at REAL NOT NULL,
    closed_at REAL NOT NULL,
    start_lsn INTEGER NOT NULL,
    close_lsn INTEGER NOT NULL,
    error TEXT,
    parent_id TEXT,
    parent_run_id TEXT,
    attributes TEXT NOT NULL,
    failure TEXT,
    creation TEXT,
    records BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_by_start ON runs (start_lsn);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs (status, start_lsn);
CREATE INDEX IF NOT EXISTS runs_by_workflow ON runs (workflow, start_lsn);
CREATE INDEX IF NOT EXISTS runs_by_id ON runs (workflow_id, start_lsn);
CREATE INDEX IF NOT EXISTS runs_by_closed_at ON runs (closed_at);
CREATE TABLE IF NOT EXISTS pruned (run_id TEXT PRIMARY KEY, close_lsn INTEGER NOT NULL);
"""

ADDED = (
    ("parent_id", "ALTER TABLE runs ADD COLUMN parent_id TEXT"),
    ("parent_run_id", "ALTER TABLE runs ADD COLUMN parent_run_id TEXT"),
    ("failure", "ALTER TABLE runs ADD COLUMN failure TEXT"),
)
"""The columns an older store lacks, each with the statement that adds it: a store
written before child workflows has no `parent_id` and `parent_run_id` (its runs have
no parent); one written before `list` gave a stored run's failure has no `failure`
(its failed runs' rows have none: the engine reads it from their records,
`engine/history.with_failures`)."""
INDEXES = "CREATE INDEX IF NOT EXISTS runs_by_parent ON runs (parent_id, start_lsn);"


def connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        # Every committed batch is durable: compaction may delete the journal that held it.
        conn.execute("PRAGMA synchronous=FULL")
        # Run ids are random: with a big store, each insert lands on another index page.
        conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
    except BaseException:
        conn.close()
        raise
    return conn


def create_private(path: Path) -> None:
    """Creates the store's file 0600 (whatever the umask) if it is not there, before
    SQLite does (SQLite would make it 0644, and its `-wal` and `-shm` like it).

    SQLite follows symbolic links: the file, its `-wal` and its `-shm` must be
    no link and this account's (`journal/safefiles.py`) before it opens them.

    Raises:
        HomeUnsafe: one of them is not.
    """
    os.close(open_file(path, os.O_RDWR | os.O_CREAT))
    for suffix in ("-wal", "-shm"):
        check_entry(path.with_name(path.name + suffix))


def is_damage(e: BaseException) -> bool:
    """Whether SQLite says the file is damaged (or not a database at all)."""
    code = getattr(e, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)


def damaged(path: Path, why: BaseException | str) -> HistoryDamaged:
    """The error for a store that cannot be read (`why`: what SQLite or the system
    raised, or what is wrong with a row): names the file, and what to do."""
    name = path.name
    if isinstance(why, IsADirectoryError):
        reason, fix = "it is a directory", "move it aside"
    elif isinstance(why, OSError):
        reason, fix = why.strerror or str(why), "fix that"
    elif isinstance(why, sqlite3.Error) and not is_damage(why):
        reason, fix = str(why), "fix that"  # a full disk, an I/O error, no permission
    else:
        reason = str(why)
        fix = (
            f"move {name}, {name}-wal and {name}-shm aside "
            f"(`sqlite3 {name} .recover` may get their rows back)"
        )
    return HistoryDamaged(
        f"the history store {path} cannot be read ({reason}): open runs go on, but the "
        f"closed runs it holds cannot be listed or looked up. With the home closed, {fix}; "
        "the next open " + ("starts an empty store" if fix.startswith("move") else "uses it"),
        str(path),
    )


def has_table(db: sqlite3.Connection, name: str) -> bool:
    query = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
    return db.execute(query, (name,)).fetchone() is not None


def rollback(db: sqlite3.Connection) -> None:
    """Ends a failed transaction, unless SQLite already did (on a full disk or an I/O
    error it rolls back by itself, and a ROLLBACK then fails and hides why)."""
    if db.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")
