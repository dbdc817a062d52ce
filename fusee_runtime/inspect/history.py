"""The history store's part of an inspection: SQLite's quick_check, and its rows by status.

SQLite is opened so that it writes nothing, not even its shared-memory
index: with a `-wal` beside the store (an owner running, or one that
crashed) through it with `mode=ro&readonly_shm=1`, which reads the `-shm`
without writing it (or builds a private index when it is stale); with no
`-wal` (a cleanly closed store, whose file then holds everything) with
`immutable=1`. A plain `mode=ro` would create both files next to a closed
store, and write read marks into a running one's. A `-wal` without a
`-shm` cannot be read that way: the report then says so and does not look
inside.
"""

from __future__ import annotations

import re
import sqlite3
import stat
from pathlib import Path
from typing import TypedDict

from fusee_runtime.inspect.reading import Changed, Damage, HomeUnreadable

QUICK_CHECK_ERRORS_MAX = 20
"""Problems SQLite's quick_check lists before it stops."""

IDS_PER_QUERY = 500
"""Run ids per `IN (...)` query (SQLite allows 32,766 parameters; a few hundred is plenty)."""


class _Rows(TypedDict):
    quick_check: list[str]
    runs: int
    statuses: dict[str, int]
    also_in_journal: int


class Report(TypedDict):
    """The history store's part of the report, as `fusee check --json` gives it: its
    rows by status (None: not read), quick_check's findings, why it was not read, and
    its damage."""

    file: str
    bytes: int
    runs: int | None
    statuses: dict[str, int] | None
    also_in_journal: int
    quick_check: list[str] | None
    unread: str | None
    damage: Damage | None


def inspect_history(path: Path, closed: set[str]) -> Report | None:
    """The history store's part of the report (None: the home has none yet).

    `closed` are the closed runs the checkpoint and the journal still hold;
    `also_in_journal` says how many of them the store holds too.

    Raises:
        Changed: the store's `-wal` vanished while it was read.
    """
    wal = path.with_name(path.name + "-wal")
    try:
        st = path.stat()
        mode = st.st_mode
        size = st.st_size if stat.S_ISREG(mode) else 0
        if wal.exists():
            size += wal.stat().st_size
    except FileNotFoundError:
        if not path.exists():
            return None
        raise Changed(str(wal)) from None
    except OSError as e:
        raise HomeUnreadable(f"cannot read the history store {path}: {e}") from None
    report: Report = {
        "file": str(path),
        "bytes": size,
        "runs": None,
        "statuses": None,
        "also_in_journal": 0,
        "quick_check": None,
        "unread": None,
        "damage": None,
    }
    if not stat.S_ISREG(mode):
        report["damage"] = _not_a_file(path, mode)
        return report
    # See the module's docstring: neither way writes a byte, not even the -shm.
    how = "mode=ro&readonly_shm=1" if wal.exists() else "immutable=1"
    try:
        db = sqlite3.connect(f"{path.absolute().as_uri()}?{how}", uri=True)
    except sqlite3.Error as e:
        return _history_failed(report, path, e)
    try:
        rows, page_bytes = _history_rows(db, closed)
    except sqlite3.Error as e:
        return _history_failed(report, path, e)
    finally:
        db.close()
    report["quick_check"] = rows["quick_check"]
    report["runs"] = rows["runs"]
    report["statuses"] = rows["statuses"]
    report["also_in_journal"] = rows["also_in_journal"]
    if rows["quick_check"] != ["ok"]:
        report["damage"] = _quick_check_damage(path, page_bytes, rows["quick_check"])
    return report


def _not_a_file(path: Path, mode: int) -> Damage:
    """The damage of something else than a file where the store goes (a directory, say):
    opening the home goes on without a store, and reads of closed runs fail."""
    what = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
    reason = (
        f"it is {what}: the home opens without its store (open runs go on), but closed "
        "runs cannot be listed or looked up until it is moved aside"
    )
    return {"kind": "history", "file": str(path), "offset": None, "reason": reason}


def _history_rows(db: sqlite3.Connection, closed: set[str]) -> tuple[_Rows, int]:
    """quick_check's findings, the rows by status and how many of `closed` are rows;
    and the store's page size."""
    problems = [r[0] for r in db.execute(f"PRAGMA quick_check({QUICK_CHECK_ERRORS_MAX})")]
    page_bytes = db.execute("PRAGMA page_size").fetchone()[0]
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    statuses: dict[str, int] = {}
    also = 0
    if "runs" in tables:  # a store whose owner died before making its table holds none
        got = db.execute("SELECT status, count(*) FROM runs GROUP BY status ORDER BY status")
        statuses = dict(got.fetchall())
        ids = sorted(closed)
        for i in range(0, len(ids), IDS_PER_QUERY):
            chunk = ids[i : i + IDS_PER_QUERY]
            marks = ", ".join("?" * len(chunk))
            sql = f"SELECT count(*) FROM runs WHERE run_id IN ({marks})"
            also += db.execute(sql, chunk).fetchone()[0]
    rows: _Rows = {
        "quick_check": problems,
        "runs": sum(statuses.values()),
        "statuses": statuses,
        "also_in_journal": also,
    }
    return rows, page_bytes


def _history_failed(report: Report, path: Path, e: sqlite3.Error) -> Report:
    """The report of a store SQLite refuses: damage when it says so, else unread."""
    code = getattr(e, "sqlite_errorcode", None)
    if code in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
        offset = 0 if code == sqlite3.SQLITE_NOTADB else None
        report["damage"] = {
            "kind": "history",
            "file": str(path),
            "offset": offset,
            "reason": str(e),
        }
    elif code == sqlite3.SQLITE_CANTOPEN and path.with_name(path.name + "-wal").exists():
        report["unread"] = (
            f"SQLite cannot open it without writing ({e}): it has a -wal but no -shm, which "
            "only a writer may create; the owner's next open of the home does"
        )
    else:
        report["unread"] = f"SQLite cannot open it read-only: {e}"
    return report


def _quick_check_damage(path: Path, page_bytes: int, problems: list[str]) -> Damage:
    """The damage quick_check found: its first finding, at the page it names if it names one."""
    first = " ".join(problems[0].split())
    m = re.search(r"\bpage (\d+)", first, re.IGNORECASE)
    offset = (int(m.group(1)) - 1) * page_bytes if m else None
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    reason = f"quick_check: {first}{more}"
    return {"kind": "history", "file": str(path), "offset": offset, "reason": reason}
