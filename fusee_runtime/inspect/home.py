"""Inspecting a home: its journal, checkpoints and history store, without touching them.

Inspection reads what opening the home reads, the way it reads it, and
reports what opening would make of it (`fusee check` prints the report):

- **Checkpoints** (`<home>/journal/<lsn>.ckpt`, `fusee_runtime.journal.checkpoint`):
  each must read whole. Opening starts from the newest one that does and
  passes over a damaged newer one; inspection reports such a file as damage
  all the same, since the fallback it leaves is the last one.
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
  Something else than a file there (a directory) is damage too: opening
  goes on without the store, but closed runs cannot be read.
- **The home's other files** (`LOCK`, `secret`, `control.sock`): each must
  be what fusee makes there, or absent (`entries` says what each breaks).

A home that opening refuses as unsafe (`engine/home.py`: another account's,
writable by others, or a symbolic link or another account's file where
fusee keeps a file) is not read at all: `HomeUnreadable` says why, as
opening would, so that no file is read through a link another account left.

Read only and lock-free, so safe while another process owns the home:
segments and checkpoints are read through a storage that refuses every
write, sync, rename and removal (`reading.ReadOnly`), and SQLite is opened
so that it writes nothing either, not even its shared-memory index (the
`history` module says how).

An owner at work can make a read look damaged: a batch half written with
whole frames after it, a segment or checkpoint that compaction deletes
between listing and reading, a store that starts its `-wal` meanwhile. So
inspection looks again until two looks in a row find the same problems;
real damage does not move, a write in flight finishes.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from fusee_runtime.engine.home import refuse_planted
from fusee_runtime.errors import HomeUnsafe
from fusee_runtime.inspect.checkpoints import checkpoint_damages, inspect_checkpoints
from fusee_runtime.inspect.entries import entry_damages
from fusee_runtime.inspect.history import inspect_history
from fusee_runtime.inspect.journal import inspect_journal
from fusee_runtime.inspect.reading import Changed, HomeUnreadable
from fusee_runtime.journal.safefiles import check_dir
from fusee_runtime.store.history_db import NAME

SCANS_MAX = 3
"""Looks at a home that shows a problem, looking for two in a row that agree."""

RESCAN_DELAY_MS = 50
"""Pause before looking again, long enough for a batch in flight to land."""


def inspect_home(home: Path) -> dict[str, Any]:
    """What the home holds, and its damage, as `fusee check --json` prints it.

    Changes no file and takes no lock: safe while another process owns the
    home. Damage is reported (`damages`, `healthy`), not raised.

    Raises:
        HomeUnreadable: the home has no journal, opening would refuse it as
            unsafe, a segment cannot be read, or files keep vanishing under the
            inspection.
    """
    if not (home / "journal").is_dir():
        raise HomeUnreadable(f"no journal in {home}")
    try:
        check_dir(home)
        refuse_planted(home)
    except HomeUnsafe as e:
        raise HomeUnreadable(f"cannot inspect {e}") from None
    seen: tuple[object, object] | None = None
    for looks in range(1, SCANS_MAX + 1):
        try:
            report = _look(home)
        except Changed as e:
            if looks == SCANS_MAX:
                raise HomeUnreadable(f"{e} vanished while check read it, {looks} times") from None
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
    directory = home / "journal"
    base, checkpoints = inspect_checkpoints(directory)
    data: dict[Path, bytes] = {}
    report = inspect_journal(directory, data, base)
    closed: set[str] = set()
    if report["runs"] is not None:
        closed = {run_id for run_id, is_closed in report["runs"].items() if is_closed}
    history = inspect_history(home / NAME, closed)
    runs = report.pop("runs")
    if runs is not None:
        report["runs_open"] = sum(not c for c in runs.values())
        report["runs_closed"] = None
        if history is None:
            report["runs_closed"] = len(closed)
        elif history["runs"] is not None:
            report["runs_closed"] = history["runs"] + len(closed) - history["also_in_journal"]
    damages = [*report.pop("journal_damages"), *checkpoint_damages(checkpoints)]
    if history is not None and history["damage"] is not None:
        damages.append(history["damage"])
    damages.extend(entry_damages(home))
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
