"""A run's event history as the web UI shows it: every record, as `fusee history` does.

The words are `fusee_runtime.history_words`', the ones `fusee history` says
(`fusee_cli/history_table.py` lays them out with rich; this module for HTML): each
record becomes an `Entry`, its instant a `datetime` and its values cut to
`DETAIL_CHARS_MAX` characters (the download, `fusee history --export`'s document, has
them whole).

Pure: no I/O. `at_of` is also what the timeline reads a record's instant with, and
`patch_said` how it says a patch marker (both re-exported from `history_words`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from fusee_runtime.history_words import at_of, clip, detail, patch_said, said
from fusee_runtime.model.json import JsonObject
from fusee_runtime.model.records import FailureJson

__all__ = ["DETAIL_CHARS_MAX", "Entry", "at_of", "clip", "detail", "entries", "patch_said"]

DETAIL_CHARS_MAX = 400
"""A record's detail is cut past this many characters (the download has it whole)."""


@dataclass(frozen=True)
class Entry:
    """One record of a run's history, as the history view shows it."""

    lsn: int
    at: datetime | None
    took: str
    type: str
    op: str
    name: str
    detail: str
    run_id: str
    failure: FailureJson | None


def entries(records: list[JsonObject]) -> list[Entry]:
    """Every record of `records` (`Control.history`'s JSON), in its order."""
    out = []
    for record in records:
        s = said(record, DETAIL_CHARS_MAX)
        at = None if s.at is None else datetime.fromtimestamp(s.at, UTC)
        out.append(Entry(s.lsn, at, s.took, s.type, s.op, s.name, s.detail, s.run_id, s.failure))
    return out
