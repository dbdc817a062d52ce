"""`fusee check`: verify a home's journal, and report what it holds, without touching it.

Check reads the segments the way opening the home does (the recovery rule
of `fusee_runtime.journal.format`), but with `repair=False` and through a
storage that refuses every write, sync and removal: it takes no lock and
changes no file, so it is safe while another process owns the home and
appends to it. A torn tail is reported as what the next open would cut, not
as damage: it is what a crash mid-append leaves, and also what a batch the
owner is writing at this instant looks like.

An owner appending while check reads can also make a batch look half
written with whole frames after it, which the recovery rule calls damage.
So damage is reported only when two scans in a row find it at the same
place; real damage does not move, a write in flight finishes.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from fusee_cli import session
from fusee_cli.options import DEFAULT_HOME, App, Home, Json
from fusee_cli.session import CliError, Code

if TYPE_CHECKING:
    from fusee_runtime.journal.reader import Scan
    from fusee_runtime.journal.storage import Storage

SCANS_MAX = 3
"""Scans of a journal that shows damage, looking for two in a row that agree."""

RESCAN_DELAY_MS = 50
"""Pause before scanning again, long enough for a batch in flight to land."""


def check(
    as_json: Json = False,
    home: Home = DEFAULT_HOME,
    app: App = None,
) -> None:
    """Verify the home's journal and report what it holds; exit 1 if it is damaged.

    Takes no lock and changes no file, so it is safe while another process
    owns the home. A torn tail (a crash mid-append, or a batch being written
    right now) is reported with the bytes the next open would cut; damage
    before the tail is reported with its file and byte offset. The app
    module is not imported.

    Example: fusee check --home .fusee --json
    """
    with session.reporting():
        directory = home / "journal"
        if not directory.is_dir():
            raise CliError(Code.USAGE, f"no journal in {home}")
        report = inspect(directory)
        if as_json:
            session.print_json(report)
        else:
            _show(report)
        damage = report["damage"]
        if damage is not None:
            raise CliError(
                Code.FAILED,
                f"journal corrupt in {damage['file']} at byte {damage['offset']}: "
                f"{damage['reason']}",
            )


def inspect(directory: Path) -> dict[str, Any]:
    """What the journal in `directory` holds, as `fusee check --json` prints it.

    Raises:
        CliError: a segment cannot be read (exit 2).
    """
    import time

    from fusee_runtime import JournalCorrupt
    from fusee_runtime.journal.reader import recover

    seen: dict[str, Any] | None = None
    for scans in range(1, SCANS_MAX + 1):
        data: dict[Path, bytes] = {}
        try:
            scan = recover(directory, _read_only(data), repair=False)
        except JournalCorrupt as e:
            damage = {"file": e.path, "offset": e.offset, "reason": e.reason}
            if damage == seen or scans == SCANS_MAX:
                return _report(directory, data, damage=damage)
            seen = damage
            time.sleep(RESCAN_DELAY_MS / 1000)
            continue
        except OSError as e:
            raise CliError(Code.USAGE, f"cannot read the journal in {directory}: {e}") from None
        return _report(directory, data, scan=scan)
    raise AssertionError("unreachable: the last scan always returns")


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
) -> dict[str, Any]:
    """The facts of one scan: `scan` when the journal opens, `damage` when it does not."""
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
        "healthy": damage is None,
        "segments": len(files),
        "bytes": sum(f["bytes"] for f in files),
        "used_bytes": None,
        "records": None,
        "last_lsn": None,
        "record_types": None,
        "runs_open": None,
        "runs_closed": None,
        "torn_tail": 0,
        "torn_tail_at": None,
        "damage": damage,
        "files": files,
    }
    if scan is None:
        return report
    removed = set(scan.removed)
    kept = [f for f in files if f["first_lsn"] is not None and Path(f["file"]) not in removed]
    for f in files:
        f.update(records=0, used_bytes=0)  # a segment the next open removes holds none
    tally = _tally(scan, kept)
    if tally["damage"] is not None:
        for f in files:
            f.update(records=None, used_bytes=None)  # counted only up to the damage
        report.update(healthy=False, damage=tally["damage"])
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


def _tally(scan: Scan, kept: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts records by type, runs open and closed, and each segment's records and bytes.

    `kept` are the segments holding `scan.records`, in order; each gets
    `records` and `used_bytes`. Returns the counts and `damage`: None, or
    where a whole frame holds no record this version knows.
    """
    from fusee_runtime.journal import format as fmt
    from fusee_runtime.journal import records
    from fusee_runtime.journal.records import CLOSES, R

    for f in kept:
        f.update(records=0, used_bytes=fmt.HEADER_BYTES)
    types: Counter[R] = Counter()
    open_runs: set[str] = set()
    closed = 0
    i = 0
    for lsn, payload in scan.records:
        while i + 1 < len(kept) and kept[i + 1]["first_lsn"] <= lsn:
            i += 1
        seg = kept[i]
        try:
            rec = records.decode(payload)
        except ValueError as e:
            reason = f"record {lsn} is not one this version of fusee reads: {e}"
            return {"damage": {"file": seg["file"], "offset": seg["used_bytes"], "reason": reason}}
        seg["records"] += 1
        seg["used_bytes"] += fmt.frame_size(len(payload))
        kind = R(rec[0])
        types[kind] += 1
        if kind == R.RunStarted:
            open_runs.add(rec[1])
        elif kind in CLOSES:
            open_runs.discard(rec[1])
            closed += 1
            if kind == R.RunContinuedAsNew:
                open_runs.add(rec[2])  # the new run starts with this same record
    return {
        "records": len(scan.records),
        "last_lsn": scan.tail.next_lsn - 1 if scan.records else None,
        "record_types": {kind.name: types[kind] for kind in sorted(types)},
        "runs_open": len(open_runs),
        "runs_closed": closed,
        "damage": None,
    }


def _show(report: dict[str, Any]) -> None:
    """The report for people, one fact a line, on stdout."""
    n = report["segments"]
    segments = f"{n} file{'' if n == 1 else 's'}, {report['bytes']:,} bytes"
    if report["used_bytes"] is not None:
        segments += f" ({report['used_bytes']:,} holding records)"
    rows = [("journal", report["journal"]), ("segments", segments)]
    damage = report["damage"]
    if report["records"] is None:
        # Damaged: the next open refuses the journal, so it would cut nothing either.
        rows.append(("records", "not counted: the journal is damaged"))
    else:
        rows.extend(_counts(report))
    if damage is None:
        rows.append(("damage", "none"))
    else:
        rows.append(("damage", f"{damage['file']} at byte {damage['offset']}: {damage['reason']}"))
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        typer.echo(f"{label:<{width}}  {value}")


def _counts(report: dict[str, Any]) -> list[tuple[str, str]]:
    """The rows of a journal that opens: records, runs, torn tail."""
    last = report["last_lsn"]
    types = ", ".join(f"{k} {v:,}" for k, v in report["record_types"].items())
    rows = [
        ("records", f"{report['records']:,}, last lsn {last if last else '-'}"),
        ("runs", f"{report['runs_open']:,} open, {report['runs_closed']:,} closed"),
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
