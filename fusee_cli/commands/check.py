"""`fusee check`: verify a home's journal, checkpoints and history store without touching them.

What check reads and how, and why it is safe beside a running owner, is
`fusee_runtime.inspect`'s to say; this module prints its report and turns
what it found into an exit code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from fusee_cli import session
from fusee_cli.options import DEFAULT_HOME, App, Home, Json
from fusee_cli.session import CliError, Code

WHAT = {
    "journal": "journal corrupt in",
    "checkpoint": "checkpoint damaged:",
    "history": "history store damaged:",
    "home": "home damaged:",
}


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
        if session.store() is not None:
            # Not the home's files: they hold no journal with a store (a silent "no
            # damage" about them would mislead).
            raise CliError(
                Code.USAGE,
                "fusee check reads a home's own journal files; with --store (or "
                "FUSEE_STORE) the journal is in PostgreSQL, which fusee checks each time "
                "it opens it (a missing record is JournalCorrupt, a damaged checkpoint is "
                "passed over): run `fusee --store URL list` to open it",
            )
        from fusee_runtime.inspect import HomeUnreadable, inspect_home

        try:
            report = inspect_home(home)
        except HomeUnreadable as e:  # no journal, or one it cannot read: not damage
            raise CliError(Code.USAGE, str(e)) from None
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
