"""The segments' part of an inspection: what opening would read, cut or refuse.

All segments are read, from the first on disk (compaction keeps the ones
the older checkpoint needs, to fall back on), by the recovery rule of
`fusee_runtime.journal.format` with `repair=False`; then the records are
counted and the runs rebuilt as opening would.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from fusee_runtime.errors import JournalCorrupt
from fusee_runtime.inspect.checkpoints import Base
from fusee_runtime.inspect.reading import Changed, Damage, HomeUnreadable, ReadOnly
from fusee_runtime.journal import format as fmt
from fusee_runtime.journal.reader import Scan, ends_before, first_lsns, recover, starts_past
from fusee_runtime.model import codec
from fusee_runtime.model.records import CLOSES, OfRun, R, RunContinuedAsNew, RunStarted
from fusee_runtime.model.sealing import looking


def inspect_journal(directory: Path, data: dict[Path, bytes], base: Base | None) -> dict[str, Any]:
    """The journal's part of the report, plus `runs` (run id: closed, as opening would
    rebuild them; None when it would not open) and `journal_damages`.

    Raises:
        Changed: a segment vanished while it was read.
        HomeUnreadable: a segment cannot be read.
    """
    storage = ReadOnly(data)
    heads: list[tuple[Path, int | None]] = []
    try:
        heads = first_lsns(directory, storage)
        # From the first segment on disk, not from the checkpoint: those before it
        # are what opening falls back on when the checkpoint is damaged.
        start = heads[0][1] if heads and heads[0][1] is not None else 1
        scan = recover(directory, storage, repair=False, after=start - 1)
    except JournalCorrupt as e:
        reason = e.reason + _unread_on_open(heads, Path(e.path), e.offset or 0, base)
        damage: Damage = {"kind": "journal", "file": e.path, "offset": e.offset, "reason": reason}
        return _report(directory, data, damage=damage)
    except FileNotFoundError as e:
        raise Changed(e.filename) from None
    except OSError as e:
        raise HomeUnreadable(f"cannot read the journal in {directory}: {e}") from None
    return _report(directory, data, scan=scan, base=base)


def _unread_on_open(
    heads: list[tuple[Path, int | None]], path: Path, offset: int, base: Base | None
) -> str:
    """A note for damage opening does not read (in a segment holding only records the
    checkpoint covers, kept to fall back on, or before where it says the journal
    continues), else nothing."""
    if base is None:
        return ""
    at = base.get("at")
    if at and path.name == at[0] and offset < at[1]:
        return (
            f"; opening does not read it (the checkpoint at lsn {base['lsn']} covers it and "
            "says where the journal continues), but falling back to an older checkpoint would"
        )
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


def _report(
    directory: Path,
    data: dict[Path, bytes],
    scan: Scan | None = None,
    damage: Damage | None = None,
    base: Base | None = None,
) -> dict[str, Any]:
    """The facts of one scan: `scan` when the journal reads, `damage` when it does not."""
    files: list[dict[str, Any]] = [
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
    unbacked = _unbacked(scan, kept, directory, base)
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
    scan: Scan, kept: list[dict[str, Any]], directory: Path, base: Base | None
) -> Damage | None:
    """The damage, if any, of a journal that does not back the checkpoint `base`
    (the rules `recover(after=...)` applies on open): it must begin by the record
    after it, and its whole records must reach it."""
    after = base["lsn"] if base else 0
    if kept and (gap := starts_past(kept[0]["first_lsn"], after)) is not None:
        return {"kind": "journal", "file": kept[0]["file"], "offset": 0, "reason": gap}
    short = ends_before(scan.tail.next_lsn, after)
    if short is not None:
        path = scan.tail.segment or (Path(kept[-1]["file"]) if kept else directory)
        reason = short + _unread_on_open([], Path(path), scan.tail.offset, base)
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
    for f in kept:
        f.update(records=0, used_bytes=fmt.HEADER_BYTES)
    runs = dict(runs) if runs is not None else None
    types: Counter[R] = Counter()
    i = 0
    look = looking()  # (values are not needed: encrypted ones stay as they are)
    for lsn, payload in scan.records:
        while i + 1 < len(kept) and kept[i + 1]["first_lsn"] <= lsn:
            i += 1
        seg = kept[i]
        try:
            rec = codec.decode(payload, look)
            kind = rec.code
            unknown = None
            if runs is not None and lsn > after and isinstance(rec, OfRun):
                unknown = _replayed(runs, rec)
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


def _replayed(runs: dict[str, bool], rec: OfRun) -> str | None:
    """Folds a run's record into `runs` (run id: closed), as opening does; returns the
    run it names when that run is not there (opening refuses such a record)."""
    if isinstance(rec, RunStarted):
        runs[rec.run_id] = False
    elif rec.run_id not in runs:
        return str(rec.run_id)
    elif type(rec) in CLOSES:
        runs[rec.run_id] = True
        if isinstance(rec, RunContinuedAsNew):
            runs[rec.new_run_id] = False  # the new run starts with this same record
    return None


def _journal_damage(seg: dict[str, Any], reason: str) -> Damage:
    """Damage at the end of what `seg` has counted so far."""
    return {"kind": "journal", "file": seg["file"], "offset": seg["used_bytes"], "reason": reason}
