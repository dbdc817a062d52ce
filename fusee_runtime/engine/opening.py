"""Opening a home after a crash: the closed runs the history store holds stay there.

After a crash, the newest checkpoint and the journal after it (up to about
`Config.checkpoint_bytes` of it) hold the records of runs that closed and
that the history store took before the process died: on a home of many
short runs, most of what opening replays. Folded into memory, each was only
queued for the store again (which replaced its row with the same one) and
then let go, as it had been before the crash: the decode, the fold, the
queueing and the garbage collector's passes over them were most of the
open's time (issue 41).

`leave_stored` finds them before `RunTable.rebuild` and takes their records
out of what it replays, and `forget_newest` leaves `RunTable.newest` as the
store's evictions left it; memory after the open is then what it was just
before the crash, once the store had taken them, and every one of them is
answered from the store (`list`, `describe`, `result`, `history`) from the
moment `open` returns. A run stays out of memory only when all of these hold:

- its first record (in the checkpoint, or in the journal after it) is its
  `RunStarted`: no other record's fold makes it (a continue-as-new makes the
  next run with no `RunStarted` of its own);
- its last record (in the checkpoint, or in the journal after it, as for a
  run the checkpoint holds open) closes it, other than as a continue-as-new
  (whose fold makes the next run);
- the store holds it with the same first and closing lsn: the same run,
  closed by the same record, so with the same records.

Everything else is folded as before: the open runs, a closed run the store
did not take (queued again by `Checkpoints.requeue_closed`), a run the store
pruned. A later record that needs such a run (a reset of it) reads it from
the store, as it would have after its eviction. A store that cannot be read
leaves everything to the fold, and a record that cannot be read leaves it
to `rebuild`, which says where it is.

`Engine.open` holds the garbage collector off meanwhile (`collector.held_off`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import orjson

from fusee_runtime.engine.limits import Limits
from fusee_runtime.engine.runs import RunTable
from fusee_runtime.engine.schedules import Schedules
from fusee_runtime.errors import HistoryDamaged, StoreUnavailable
from fusee_runtime.journal.reader import JournalRead
from fusee_runtime.model.codec import RECORDS
from fusee_runtime.model.payload import MARK
from fusee_runtime.model.records import CLOSES, OfRun, RunContinuedAsNew, RunStarted
from fusee_runtime.model.sealing import is_envelope
from fusee_runtime.store.seam import HistoryStore

_OF_RUN = frozenset(int(code) for code, cls in RECORDS.items() if issubclass(cls, OfRun))
"""The type codes of the records of one run (their `run_id` is the array's second item)."""
_CLOSING = frozenset(int(cls.code) for cls in CLOSES if cls is not RunContinuedAsNew)
_STARTED = int(RunStarted.code)
_SEALED = orjson.dumps(MARK)[1:-1]
"""How an envelope's mark reads inside a record's JSON (a record holding none has no
payload to open)."""

_WIDTHS = {int(code): 1 + len(fields(cls)) for code, cls in RECORDS.items()}
"""The length of each record type's array: its code, then its fields."""

Wanted = tuple[int, int, str]
"""A closed run the store may hold: its first and closing lsn, its workflow id."""


@dataclass
class Left:
    """The closed runs `leave_stored` kept out of the replay."""

    runs: dict[str, tuple[str, int]] = field(default_factory=dict)
    """(workflow_id, start_lsn) by run id."""
    records: int = 0
    """Their records taken out of the journal's replay (those of the checkpoint not counted)."""
    envelopes: dict[tuple[str, ...], Any] = field(default_factory=dict)
    """One encoded payload of theirs (`model/sealing.py`) for each list of codec labels
    their records hold: opened after the fold, as the fold would have opened them, so
    that a key missing or wrong is still found at open (and kept for the checkpoint's
    checks) when no payload it encrypted is left to replay."""


def rebuild(
    runs: RunTable,
    read: JournalRead,
    locate: Callable[[int], tuple[str, int | None]],
    schedules: Schedules,
    limits: Limits,
) -> Left:
    """Step 2 of recovery (`RunTable.rebuild`), with the closed runs the history store
    holds left there (`leave_stored`, `forget_newest`); returns them.

    Raises:
        JournalCorrupt: as `RunTable.rebuild`.
    """
    left = leave_stored(read, runs.store)
    runs.rebuild(read, locate, schedules, limits)
    for envelope in left.envelopes.values():
        runs.chain.opened(envelope)  # (CodecError: a key missing or wrong, as in the fold)
    forget_newest(runs, left)
    return left


def leave_stored(read: JournalRead, store: HistoryStore | None) -> Left:
    """Takes out of `read` (its checkpoint's runs, the records after it) the closed runs
    `store` holds (see the module); returns which."""
    left = Left()
    if store is None or store.damage is not None:
        return left
    records = read.scan.records
    read_whole = _spans(records)
    if read_whole is None:
        return left
    owners, spans = read_whole
    begun = any(s[0] == _STARTED and s[3] in _CLOSING for s in spans.values())
    entries = read.base.body["runs"] if read.base is not None else []
    before = _closed_in_checkpoint(entries, spans)
    if not begun and not before:
        return left
    try:
        rows = store.closes(read.checkpoint_lsn if begun else None, before)
    except (HistoryDamaged, StoreUnavailable):
        return left
    for run_id, start, close in rows:
        got = before.get(run_id)
        if got is not None:
            if got[0] == start and got[1] == close:
                left.runs[run_id] = (got[2], start)
            continue
        seen = spans.get(run_id)  # [first code, first lsn, last lsn, last code, workflow id]
        if seen is None or seen[1] != start or seen[2] != close:
            continue
        if seen[0] == _STARTED and seen[3] in _CLOSING:
            left.runs[run_id] = (seen[4], start)
    if left.runs:
        _take_out(read, owners, left)
    return left


def _take_out(read: JournalRead, owners: list[str | None], left: Left) -> None:
    """Takes the records of `left.runs` out of `read` (`owners`: the run of each record
    after the checkpoint), and their envelopes into `left.envelopes`."""
    gone = left.runs
    records = read.scan.records
    kept: list[tuple[int, bytes]] = []
    for rec, run_id in zip(records, owners, strict=True):
        if run_id not in gone:
            kept.append(rec)
        elif _SEALED in rec[1]:
            _envelopes(orjson.loads(rec[1]), left.envelopes)
    left.records = len(records) - len(kept)
    read.scan.records = kept
    if read.base is not None:
        staying = []
        for entry in read.base.body["runs"]:
            if _run_of(entry) not in gone:
                staying.append(entry)
            else:
                _envelopes([entry[0], *(array for _, array in entry[1])], left.envelopes)
        read.base.body["runs"] = staying


def forget_newest(runs: RunTable, left: Left) -> None:
    """After the fold: the newest run of an id is none in memory where a run left in the
    store began after it, as when the store took that run before the crash (`evict`)."""
    for workflow_id, start_lsn in left.runs.values():
        newest = runs.newest.get(workflow_id)
        if newest is not None and newest.start_lsn < start_lsn:
            del runs.newest[workflow_id]


def _envelopes(values: list[Any], found: dict[tuple[str, ...], Any]) -> None:
    """Adds to `found` each envelope among `values` and the values of those that are
    arrays or objects (a record's fields, a run's creation), one per list of labels."""
    for value in values:
        for v in value if isinstance(value, list) else [value]:
            inner = v.values() if isinstance(v, dict) and not is_envelope(v) else [v]
            for w in inner:
                if is_envelope(w):
                    labels = w.get(MARK)
                    key = tuple(str(x) for x in labels) if isinstance(labels, list) else ()
                    found.setdefault(key, w)


def _spans(
    records: list[tuple[int, bytes]],
) -> tuple[list[str | None], dict[str, list[Any]]] | None:
    """The run id of each record (None: a record of no run), and of each run in
    `records`: [first record's type code, its lsn, last record's lsn, its type code,
    the workflow id a `RunStarted` names]. None if a record is not one this version
    reads (`rebuild` then says where)."""
    loads, of_run, widths = orjson.loads, _OF_RUN, _WIDTHS
    owners: list[str | None] = []
    own = owners.append
    spans: dict[str, list[Any]] = {}
    get = spans.get
    try:
        for lsn, payload in records:
            array = loads(payload)
            code = array[0]
            if len(array) != widths[code]:
                return None
            if code in of_run:
                run_id = array[1]
                seen = get(run_id)
                if seen is None:
                    spans[run_id] = [code, lsn, lsn, code, array[2] if code == _STARTED else None]
                else:
                    seen[2] = lsn
                    seen[3] = code
                own(run_id)
            else:
                own(None)
    except (orjson.JSONDecodeError, TypeError, KeyError, IndexError):
        return None
    return owners, spans


def _closed_in_checkpoint(entries: list[Any], spans: dict[str, list[Any]]) -> dict[str, Wanted]:
    """What `Wanted` says, by run id, of the checkpoint's runs that begin with their
    `RunStarted` and end closed (not continued as new), in the checkpoint or in the
    journal after it; none if an entry is not as a checkpoint writes it (then
    `rebuild` says so)."""
    out: dict[str, Wanted] = {}
    try:
        for _, arrays in entries:
            if not arrays:
                continue
            (first, head), (last, tail) = arrays[0], arrays[-1]
            if head[0] != _STARTED:
                continue
            run_id = head[1]
            seen = spans.get(run_id)
            if seen is not None:  # closed after the checkpoint
                last, tail = seen[2], [seen[3]]
            if tail[0] in _CLOSING:
                out[run_id] = (int(first), int(last), str(head[2]))
    except (TypeError, ValueError, KeyError, IndexError):
        return {}
    return out


def _run_of(entry: Any) -> object:
    """The run id of a checkpoint's run (None for one with no records)."""
    arrays = entry[1]
    return arrays[0][1][1] if arrays else None
