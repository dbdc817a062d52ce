"""A run's event history as the web UI shows it: every record, as `fusee history` does.

The words are `fusee_runtime.history_words`', the ones `fusee history` says
(`fusee_cli/history_table.py` lays them out with rich; this module for HTML): each
record is what `history_words.said` says of it, its values cut to `DETAIL_CHARS_MAX`
characters (the download, `fusee history --export`'s document, has them whole).

Pure: no I/O. `at_of` is also what the timeline reads a record's instant with, and
`patch_said` how it says a patch marker (both re-exported from `history_words`).
"""

from __future__ import annotations

from fusee_runtime.history_words import Said, at_of, clip, detail, patch_said, said, when
from fusee_runtime.model.json import JsonObject

__all__ = [
    "DETAIL_CHARS_MAX",
    "Said",
    "at_of",
    "clip",
    "detail",
    "entries",
    "patch_said",
    "shown_at",
]

DETAIL_CHARS_MAX = 400
"""A record's detail is cut past this many characters (the download has it whole)."""


def entries(records: list[JsonObject]) -> list[Said]:
    """Every record of `records` (`Control.history`'s JSON), in its order, as
    `fusee history` says it."""
    return [said(record, DETAIL_CHARS_MAX) for record in records]


def shown_at(entry: Said) -> str:
    """An entry's instant as the history view shows it: `fusee history`'s, without its
    `Z` (the column says UTC); "" when the record tells of none."""
    return "" if entry.at is None else when(entry.at).removesuffix("Z")
