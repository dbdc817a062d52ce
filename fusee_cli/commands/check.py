"""`fusee check`: verify a home's journal, checkpoints and history store without touching them.

Check reads what opening the home reads, the way it reads it, and reports
what opening would make of it:

- **Checkpoints** (`<home>/journal/<lsn>.ckpt`, `fusee_runtime.journal.checkpoint`):
  each must read whole. Opening starts from the newest one that does and
  passes over a damaged newer one; check reports such a file as damage all
  the same (exit 1), since the fallback it leaves is the last one.
- **Segments**: all of them, from the first on disk (compaction keeps the
  ones the older checkpoint needs, to fall back on), by the recovery rule
  of `fusee_runtime.journal.format` with `repair=False`. A torn tail is
  reported as what the next open would cut, not as damage: it is what a
  crash mid-append leaves, and also what a batch the owner is writing at
  this instant looks like. Beyond the reader's rules, the journal must
  back the checkpoint opening starts from, as `recover(after=...)` demands:
  begin at or before the record after it, and reach it.
- **History store** (`<home>/history.db`): SQLite's `quick_check`, and its
  rows by status. Closed runs are those rows plus the closed runs the
  checkpoint and the journal after it still hold, counted once by run id.

Read only and lock-free, so safe while another process owns the home:
segments and checkpoints are read through a storage that refuses every
write, sync, rename and removal. SQLite is opened so that it writes
nothing either, not even its shared-memory index: with a `-wal` beside
the store (an owner running, or one that crashed) through it with
`mode=ro&readonly_shm=1`, which reads the `-shm` without writing it (or
builds a private index when it is stale); with no `-wal` (a cleanly
closed store, whose file then holds everything) with `immutable=1`. A
plain `mode=ro` would create both files next to a closed store, and
write read marks into a running one's. A `-wal` without a `-shm` cannot be
read that way: check then says so and does not look inside.

An owner at work can make a read look damaged: a batch half written with
whole frames after it, a segment or checkpoint that compaction deletes
between listing and reading, a store that starts its `-wal` meanwhile. So
check looks again until two looks in a row find the same problems; real
damage does not move, a write in flight finishes.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from fusee_cli import session
from fusee_cli.options import DEFAULT_HOME, App, Home, Json
from fusee_cli.session import CliError, Code

if TYPE_CHECKING:
    import sqlite3

    from fusee_runtime.journal.reader import Scan
    from fusee_runtime.journal.storage import Storage

SCANS_MAX = 3
"""Looks at a home that shows a problem, looking for two in a row that agree."""

RESCAN_DELAY_MS = 50
"""Pause before looking again, long enough for a batch in flight to land."""

QUICK_CHECK_ERRORS_MAX = 20
"""Problems SQLite's quick_check lists before it stops."""

IDS_PER_QUERY = 500
"""Run ids per `IN (...)` query (SQLite allows 32,766 parameters; a few hundred is plenty)."""

WHAT = {
    "journal": "journal corrupt in",
    "checkpoint": "checkpoint damaged:",
    "history": "history store damaged:",
}


class _Changed(Exception):
    """A file listed a moment ago is gone: an owner compacted or closed meanwhile."""


def check(
    as_json: Json = False,
    home: Home = DEFAULT_HOME,
    app: App = None,
) -> None:
    """Verify the home's journal, checkpoints and history store; exit 1 if one is damaged.

    Takes no lock and changes no file, so it is safe while another process
    owns the home. A torn tail (a crash mid-append, or a batch being written
    right now) is reported with the bytes the next open would cut; damage
    is reported with its file and byte offset. The app module is not
    imported.

    Example: fusee check --home .fusee --json
    """
    with session.reporting():
        if not (home / "journal").is_dir():
            raise CliError(Code.USAGE, f"no journal in {home}")
        report = inspect(home)
        if as_json:
            session.print_json(report)
        else:
            _show(report)
        history = report["history"]
        if history is not None and history["unread"] is not None:
            session.echo_err(f"warning: the history store was not checked: {history['unread']}")
        damages = report["damages"]
        if damages:
            more = len(damages) - 1
            also = f" (and {more} more: see the report)" if more else ""
            raise CliError(Code.FAILED, _damage_line(damages[0]) + also)


def inspect(home: Path) -> dict[str, Any]:
    """What the home holds, as `fusee check --json` prints it.

    Raises:
        CliError: a file cannot be read, or keeps vanishing under check (exit 2).
    """
    import time

    seen: Any = None
    for looks in range(1, SCANS_MAX + 1):
        try:
            report = _look(home)
        except _Changed as e:
            if looks == SCANS_MAX:
                message = f"{e} vanished while check read it, {looks} times"
                raise CliError(Code.USAGE, message) from None
            time.sleep(RESCAN_DELAY_MS / 1000)
            continue
        history = report["history"]
        found = (report["damages"], history and history["unread"])
        if not any(found) or found == seen or looks == SCANS_MAX:
            return report
        seen = found
        time.sleep(RESCAN_DELAY_MS / 1000)
    raise AssertionError("unreachable: the last look always returns")


def _look(home: Path) -> dict[str, Any]:
    """One look at the home: checkpoints first (the journal read after is as new at least)."""
    from fusee_runtime.engine.history import NAME

    directory = home / "journal"
    base, checkpoints = _checkpoints(directory)
    data: dict[Path, bytes] = {}
    report = _journal(directory, data, base)
    closed: set[str] = set()
    if report["runs"] is not None:
        closed = {run_id for run_id, is_closed in report["runs"].items() if is_closed}
    history = _history(home / NAME, closed)
    runs = report.pop("runs")
    if runs is not None:
        report["runs_open"] = sum(not c for c in runs.values())
        report["runs_closed"] = None
        if history is None:
            report["runs_closed"] = len(closed)
        elif history["runs"] is not None:
            report["runs_closed"] = history["runs"] + len(closed) - history["also_in_journal"]
    damages = [*report.pop("journal_damages"), *_checkpoint_damages(checkpoints)]
    if history is not None and history["damage"] is not None:
        damages.append(history["damage"])
    ckpt_bytes = sum(c["bytes"] for c in checkpoints)
    report.update(
        healthy=not damages,
        damage=damages[0] if damages else None,
        damages=damages,
        checkpoint=base and {"file": base["file"], "lsn": base["lsn"]},
        checkpoints=checkpoints,
        history=history,
        total_bytes=report["bytes"] + ckpt_bytes + (history["bytes"] if history else 0),
    )
    return report


# -- checkpoints ---------------------------------------------------------------------------


def _checkpoints(directory: Path) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """(the checkpoint opening starts from, every checkpoint file newest first).

    Each entry has its file, lsn, bytes, the records and runs it holds, `used`
    (opening starts from it) and `damage` (why it cannot be read, or None).
    The one used carries its runs (run id: closed) under `runs`, or None
    when this version cannot make sense of its body (opening then refuses
    the home: it falls back only over a file that does not read whole).
    """
    from fusee_runtime.journal import checkpoint as ckpt

    storage = _read_only({})
    out: list[dict[str, Any]] = []
    base = None
    for lsn, path in ckpt.listed(directory):
        entry: dict[str, Any] = {
            "file": str(path),
            "lsn": lsn,
            "bytes": None,
            "records": None,
            "runs": None,
            "runs_open": None,
            "used": False,
            "damage": None,
        }
        out.append(entry)
        try:
            raw = storage.read(path)
        except FileNotFoundError:
            raise _Changed(str(path)) from None
        entry["bytes"] = len(raw)
        try:
            got = ckpt.decode(path, raw)
        except ckpt.CheckpointDamaged as e:
            entry["damage"] = e.reason
            continue
        try:
            records, runs = _checkpoint_runs(got.body)
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as e:
            entry["damage"] = f"it reads whole but this version cannot make sense of it ({e!r})"
            runs = None
        else:
            open_runs = sum(not c for c in runs.values())
            entry.update(records=records, runs=len(runs), runs_open=open_runs)
        if base is None:
            # Opening starts from the newest that reads whole, and refuses the home
            # if that one then makes no sense: it does not fall back past it.
            base = {"file": entry["file"], "lsn": lsn, "runs": runs}
            entry["used"] = True
    return base, out


def _checkpoint_runs(body: dict[str, Any]) -> tuple[int, dict[str, bool]]:
    """(records, {run id: closed}) of a checkpoint's body.

    A run made by `continue_as_new` names itself in how it was created; any
    other begins with its `RunStarted`. A record may be in two runs' lists
    (the one that continues a run), so records are counted by lsn.
    """
    from fusee_runtime.journal.records import CLOSES, R

    lsns: set[int] = set()
    runs: dict[str, bool] = {}
    for creation, recs in body["runs"]:
        if creation is not None and creation["kind"] == "continued":
            run_id = creation["run_id"]
        elif recs[0][1][0] == R.RunStarted:
            run_id = recs[0][1][1]
        else:
            raise ValueError(f"a run begins at lsn {recs[0][0]} with no RunStarted")
        runs[run_id] = any(rec[0] in CLOSES and rec[1] == run_id for _, rec in recs)
        lsns.update(int(lsn) for lsn, _ in recs)
    if not isinstance(body["schedules"], dict):
        raise TypeError("its schedules are not an object")
    return len(lsns), runs


def _checkpoint_damages(checkpoints: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each damaged checkpoint as damage, saying what opening does about it."""
    used = next((c for c in checkpoints if c["used"]), None)
    out = []
    for c in checkpoints:
        if c["damage"] is None:
            continue
        if c["used"]:
            then = "opening the home refuses it (it falls back only over a file that is not whole)"
        elif used is not None and c["lsn"] < used["lsn"]:
            then = f"opening does not need it (it starts from {Path(used['file']).name})"
            if not any(o["damage"] is None and o["lsn"] < used["lsn"] for o in checkpoints):
                then += ", but that one has no whole checkpoint left to fall back on"
        elif used is not None:
            then = (
                f"opening passes over it and starts from {Path(used['file']).name} "
                f"(lsn {used['lsn']}) and the journal after that"
            )
        else:
            then = (
                "opening passes over it, and no checkpoint is left: it reads the journal from lsn 1"
            )
        out.append(
            {
                "kind": "checkpoint",
                "file": c["file"],
                "offset": 0,
                "reason": f"{c['damage']}; {then}",
            }
        )
    return out


# -- the journal ---------------------------------------------------------------------------


def _journal(
    directory: Path, data: dict[Path, bytes], base: dict[str, Any] | None
) -> dict[str, Any]:
    """The journal's part of the report, plus `runs` (run id: closed, as opening would
    rebuild them; None when it would not open) and `journal_damages`.

    Raises:
        _Changed: a segment vanished while check read it.
        CliError: a segment cannot be read (exit 2).
    """
    from fusee_runtime import JournalCorrupt
    from fusee_runtime.journal.reader import first_lsns, recover

    storage = _read_only(data)
    heads: list[tuple[Path, int | None]] = []
    try:
        heads = first_lsns(directory, storage)
        # From the first segment on disk, not from the checkpoint: those before it
        # are what opening falls back on when the checkpoint is damaged.
        start = heads[0][1] if heads and heads[0][1] is not None else 1
        scan = recover(directory, storage, repair=False, after=start - 1)
    except JournalCorrupt as e:
        reason = e.reason + _unread_on_open(heads, Path(e.path), base)
        damage = {"kind": "journal", "file": e.path, "offset": e.offset, "reason": reason}
        return _report(directory, data, damage=damage)
    except FileNotFoundError as e:
        raise _Changed(e.filename) from None
    except OSError as e:
        raise CliError(Code.USAGE, f"cannot read the journal in {directory}: {e}") from None
    return _report(directory, data, scan=scan, base=base)


def _unread_on_open(
    heads: list[tuple[Path, int | None]], path: Path, base: dict[str, Any] | None
) -> str:
    """A note for damage in a segment opening does not read (it holds only records the
    checkpoint covers, kept to fall back on), else nothing."""
    if base is None:
        return ""
    paths = [p for p, _ in heads]
    reads = [
        i for i, (_, first) in enumerate(heads) if first is not None and first <= base["lsn"] + 1
    ]
    if not reads or path not in paths or paths.index(path) >= reads[-1]:
        return ""
    return (
        f"; opening does not read this segment (it starts after the checkpoint at lsn "
        f"{base['lsn']}), but falling back to an older checkpoint would"
    )


def _read_only(data: dict[Path, bytes]) -> Storage:
    """A `Storage` that keeps what it reads in `data` and refuses to change anything."""
    from fusee_runtime.journal.storage import Storage

    class ReadOnly(Storage):
        def read(self, path: Path) -> bytes:
            data[path] = got = super().read(path)
            return got

        def open(self, path: Path) -> int:
            # A bug, not an operating error: check must never write.
            raise RuntimeError(f"fusee check tried to open {path} for writing")

        def create(self, path: Path, size_bytes: int, header: bytes) -> int:
            raise RuntimeError(f"fusee check tried to create {path}")

        def write_file(self, path: Path, data: bytes) -> None:
            raise RuntimeError(f"fusee check tried to write {path}")

        def rename(self, src: Path, dst: Path) -> None:
            raise RuntimeError(f"fusee check tried to rename {src}")

        def remove(self, path: Path) -> None:
            raise RuntimeError(f"fusee check tried to remove {path}")

        def sync_dir(self, directory: Path) -> None:
            raise RuntimeError(f"fusee check tried to sync {directory}")

    return ReadOnly()


def _report(
    directory: Path,
    data: dict[Path, bytes],
    scan: Scan | None = None,
    damage: dict[str, Any] | None = None,
    base: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The facts of one scan: `scan` when the journal reads, `damage` when it does not."""
    from fusee_runtime.journal import format as fmt

    files = [
        {
            "file": str(p),
            "bytes": len(d),
            "first_lsn": fmt.decode_header(d),
            "records": None,
            "used_bytes": None,
        }
        for p, d in data.items()
    ]
    report: dict[str, Any] = {
        "journal": str(directory),
        "segments": len(files),
        "bytes": sum(f["bytes"] for f in files),
        "used_bytes": None,
        "records": None,
        "records_after_checkpoint": None,
        "last_lsn": None,
        "record_types": None,
        "runs_open": None,
        "runs_closed": None,
        "torn_tail": 0,
        "torn_tail_at": None,
        "files": files,
        "runs": None,
        "journal_damages": [damage] if damage else [],
    }
    if scan is None:
        return report
    removed = set(scan.removed)
    kept = [f for f in files if f["first_lsn"] is not None and Path(f["file"]) not in removed]
    for f in files:
        f.update(records=0, used_bytes=0)  # a segment the next open removes holds none
    after = base["lsn"] if base else 0
    # A journal that does not back its checkpoint is refused on open: nothing to rebuild.
    unbacked = _unbacked(scan, kept, directory, after)
    runs = None if unbacked else base["runs"] if base else {}
    tally = _tally(scan, kept, after, runs)
    damage = tally.pop("damage")
    report["journal_damages"] = [d for d in (unbacked, damage) if d is not None]
    if damage is not None:
        for f in files:
            f.update(records=None, used_bytes=None)  # counted only up to the damage
        return report
    report.update(tally)
    report["used_bytes"] = sum(f["used_bytes"] for f in files)
    if scan.cut is not None:
        path, offset = scan.cut
        torn = sum(fmt.data_end(data[p], 0) for p in removed)
        if path not in removed:
            torn += fmt.data_end(data[path], offset) - offset
        report["torn_tail"] = torn
        report["torn_tail_at"] = {
            "file": str(path),
            "offset": offset,
            "removes": [str(p) for p in scan.removed],
        }
    return report


def _unbacked(
    scan: Scan, kept: list[dict[str, Any]], directory: Path, after: int
) -> dict[str, Any] | None:
    """The damage, if any, of a journal that does not back the checkpoint at `after`
    (the rules `recover(after=...)` applies on open): it must begin by the record
    after it, and its whole records must reach it."""
    if kept and kept[0]["first_lsn"] > after + 1:
        first = kept[0]
        reason = (
            f"segment starts at lsn {first['first_lsn']}, expected {after + 1} "
            "(the records before it are in no readable checkpoint)"
        )
        return {"kind": "journal", "file": first["file"], "offset": 0, "reason": reason}
    last = scan.tail.next_lsn - 1
    if last < after:
        path = scan.tail.segment or (Path(kept[-1]["file"]) if kept else directory)
        reason = (
            f"the journal's whole records end at lsn {last}, before its checkpoint "
            f"({after}): acknowledged data is damaged"
        )
        return {"kind": "journal", "file": str(path), "offset": scan.tail.offset, "reason": reason}
    return None


def _tally(
    scan: Scan, kept: list[dict[str, Any]], after: int, runs: dict[str, bool] | None
) -> dict[str, Any]:
    """Counts records by type, and each segment's records and bytes; rebuilds `runs`.

    `kept` are the segments holding `scan.records`, in order; each gets
    `records` and `used_bytes`. `runs` (run id: closed) are the checkpoint's
    at lsn `after` (None: it cannot be read), updated as opening would with
    the records after it. Returns the counts and `damage`: None, or where a
    whole frame holds no record this version knows, or one about a run
    opening would not know.
    """
    from fusee_runtime.journal import format as fmt
    from fusee_runtime.journal import records
    from fusee_runtime.journal.records import SCHEDULES, R

    for f in kept:
        f.update(records=0, used_bytes=fmt.HEADER_BYTES)
    runs = dict(runs) if runs is not None else None
    types: Counter[R] = Counter()
    i = 0
    for lsn, payload in scan.records:
        while i + 1 < len(kept) and kept[i + 1]["first_lsn"] <= lsn:
            i += 1
        seg = kept[i]
        try:
            rec = records.decode(payload)
            kind = R(rec[0])
            unknown = None
            if runs is not None and lsn > after and kind not in SCHEDULES:
                unknown = _replayed(runs, kind, rec)
        except (ValueError, IndexError, TypeError) as e:
            reason = f"record {lsn} is not one this version of fusee reads: {e}"
            return {"damage": _journal_damage(seg, reason)}
        if unknown is not None:
            reason = (
                f"record {lsn} names run {unknown!r}, which neither the checkpoint nor the "
                "journal before it holds"
            )
            return {"damage": _journal_damage(seg, reason)}
        seg["records"] += 1
        seg["used_bytes"] += fmt.frame_size(len(payload))
        types[kind] += 1
    last = scan.tail.next_lsn - 1
    return {
        "records": len(scan.records),
        "records_after_checkpoint": sum(1 for lsn, _ in scan.records if lsn > after),
        "last_lsn": last if last > 0 else None,
        "record_types": {kind.name: types[kind] for kind in sorted(types)},
        "runs": runs,
        "damage": None,
    }


def _replayed(runs: dict[str, bool], kind: Any, rec: list[Any]) -> str | None:
    """Folds a run's record into `runs` (run id: closed), as opening does; returns the
    run it names when that run is not there (opening refuses such a record)."""
    from fusee_runtime.journal.records import CLOSES, R

    if kind == R.RunStarted:
        runs[rec[1]] = False
    elif rec[1] not in runs:
        return str(rec[1])
    elif kind in CLOSES:
        runs[rec[1]] = True
        if kind == R.RunContinuedAsNew:
            runs[rec[2]] = False  # the new run starts with this same record
    return None


def _journal_damage(seg: dict[str, Any], reason: str) -> dict[str, Any]:
    """Damage at the end of what `seg` has counted so far."""
    return {"kind": "journal", "file": seg["file"], "offset": seg["used_bytes"], "reason": reason}


# -- the history store ---------------------------------------------------------------------


def _history(path: Path, closed: set[str]) -> dict[str, Any] | None:
    """The history store's part of the report (None: the home has none yet).

    `closed` are the closed runs the checkpoint and the journal still hold;
    `also_in_journal` says how many of them the store holds too.
    """
    import sqlite3

    wal = path.with_name(path.name + "-wal")
    try:
        size = path.stat().st_size
        if wal.exists():
            size += wal.stat().st_size
    except FileNotFoundError:
        if not path.exists():
            return None
        raise _Changed(str(wal)) from None
    report: dict[str, Any] = {
        "file": str(path),
        "bytes": size,
        "runs": None,
        "statuses": None,
        "also_in_journal": 0,
        "quick_check": None,
        "unread": None,
        "damage": None,
    }
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
    report.update(rows)
    if rows["quick_check"] != ["ok"]:
        report["damage"] = _quick_check_damage(path, page_bytes, rows["quick_check"])
    return report


def _history_rows(db: sqlite3.Connection, closed: set[str]) -> tuple[dict[str, Any], int]:
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
    rows = {
        "quick_check": problems,
        "runs": sum(statuses.values()),
        "statuses": statuses,
        "also_in_journal": also,
    }
    return rows, page_bytes


def _history_failed(report: dict[str, Any], path: Path, e: sqlite3.Error) -> dict[str, Any]:
    """The report of a store SQLite refuses: damage when it says so, else unread."""
    import sqlite3

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


def _quick_check_damage(path: Path, page_bytes: int, problems: list[str]) -> dict[str, Any]:
    """The damage quick_check found: its first finding, at the page it names if it names one."""
    first = " ".join(problems[0].split())
    m = re.search(r"\bpage (\d+)", first, re.IGNORECASE)
    offset = (int(m.group(1)) - 1) * page_bytes if m else None
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    reason = f"quick_check: {first}{more}"
    return {"kind": "history", "file": str(path), "offset": offset, "reason": reason}


# -- for people ----------------------------------------------------------------------------


def _damage_line(damage: dict[str, Any]) -> str:
    where = damage["file"]
    if damage["offset"] is not None:
        where += f" at byte {damage['offset']}"
    return f"{WHAT[damage['kind']]} {where}: {damage['reason']}"


def _show(report: dict[str, Any]) -> None:
    """The report for people, one fact a line, on stdout."""
    n = report["segments"]
    segments = f"{n} file{'' if n == 1 else 's'}, {report['bytes']:,} bytes"
    if report["used_bytes"] is not None:
        segments += f" ({report['used_bytes']:,} holding records)"
    rows = [("journal", report["journal"]), ("segments", segments)]
    rows.extend(("checkpoint", _checkpoint_row(c)) for c in report["checkpoints"])
    if not report["checkpoints"]:
        rows.append(("checkpoint", "none"))
    rows.append(("history", _history_row(report["history"])))
    if report["records"] is None:
        # Damaged: the next open refuses the journal, so it would cut nothing either.
        rows.append(("records", "not counted: the journal is damaged"))
    else:
        rows.extend(_counts(report))
    rows.append(("bytes", f"{report['total_bytes']:,} (segments, checkpoints, history store)"))
    if not report["damages"]:
        rows.append(("damage", "none"))
    rows.extend(("damage", _damage_line(d)) for d in report["damages"])
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        typer.echo(f"{label:<{width}}  {value}")


def _checkpoint_row(c: dict[str, Any]) -> str:
    size = f"{c['bytes']:,} bytes" if c["bytes"] is not None else "unread"
    row = f"{Path(c['file']).name} (lsn {c['lsn']:,}, {size})"
    if c["runs"] is not None:
        row += f": {_count(c['records'], 'record')}, {_count(c['runs'], 'run')}"
        row += f" ({c['runs_open']:,} open)"
    if c["used"]:
        row += "; the next open starts from it"
    if c["damage"] is not None:
        row += f"; DAMAGED: {c['damage']}"
    return row


def _history_row(h: dict[str, Any] | None) -> str:
    if h is None:
        return "none yet (no run has closed here)"
    row = f"{h['file']}, {h['bytes']:,} bytes"
    if h["unread"] is not None:
        return f"{row}; not checked: {h['unread']}"
    if h["runs"] is not None:
        statuses = ", ".join(f"{k} {v:,}" for k, v in h["statuses"].items())
        row += f", {h['runs']:,} closed runs" + (f" ({statuses})" if statuses else "")
    if h["damage"] is None:
        row += ", quick_check ok"
    return row


def _counts(report: dict[str, Any]) -> list[tuple[str, str]]:
    """The rows of a journal that reads: records, runs, torn tail."""
    last = report["last_lsn"]
    types = ", ".join(f"{k} {v:,}" for k, v in report["record_types"].items())
    records = f"{report['records']:,}, last lsn {f'{last:,}' if last else '-'}"
    if report["checkpoint"] is not None:
        after = report["records_after_checkpoint"]
        records += f" ({after:,} after the checkpoint at lsn {report['checkpoint']['lsn']:,})"
    opened, closed = report["runs_open"], report["runs_closed"]
    rows = [
        ("records", records),
        ("runs", f"{_n(opened)} open, {_n(closed)} closed"),
        ("record types", types or "-"),
    ]
    at = report["torn_tail_at"]
    if at is None:
        rows.append(("torn tail", "none"))
    else:
        n = len(at["removes"])
        also = f" and removes {n} segment file{'' if n == 1 else 's'}" if n else ""
        rows.append(
            (
                "torn tail",
                f"{report['torn_tail']:,} bytes at {at['file']} byte {at['offset']}: the next "
                f"open of the home cuts them{also} (left by a crash mid-append, or by a batch "
                "the owner is writing right now)",
            )
        )
    return rows


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _n(count: int | None) -> str:
    return "?" if count is None else f"{count:,}"
