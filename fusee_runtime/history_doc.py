"""The history document: one run's journal as a portable JSON file, checked whole
before the replay checker trusts any of it.

`fusee history ID --export FILE` (`replayer.history_document`, the test kit's
`env.export`) writes one; `fusee replay --history FILE` and `replay(path, app)`
read it back with `read_history`. Grammar (JSON)::

    document := {"format": "fusee.history", "version": 1, "id": str, "run_id": str,
                 "workflow": str, "status": status, "creation": null | creation,
                 "records": [record, ...]}
    record   := [lsn, [type, run_id, field, ...]]
    creation := {"kind": "reset", ...} | {"kind": "continued", ...}

`type` is a record type code (`journal.records.R`); the fields follow in the
order `journal.records.FIELDS` names them, each of the type
`history_fields.FIELD_TYPES` gives.
`creation` is how the run was made when not by its `RunStarted` alone
(`engine.creation`: what a reset run inherited, how a continued run began).
Worked example, a run that completed after one step::

    {"format": "fusee.history", "version": 1, "id": "p-1", "run_id": "f639",
     "workflow": "payment", "status": "completed", "creation": null,
     "records": [[2, [1, "f639", "p-1", "payment", 1, 1796591777.56, null, null]],
                 [6, [2, "f639", "1", "charge", 100, 1796591777.56, 1796591777.57]],
                 [7, [6, "f639", 100, 1796591777.57]]]}

A document comes from outside, so nothing in it is trusted: `check_history`
reads all of it before any of it is replayed, and refuses (`HistoryInvalid`,
one line naming the first fault and the record it is in, counted from 1) one
that no engine writes:

- every field has its type (a workflow name is a string, an operation number
  a string such as "3" or "4.0.1", an attempt a whole number, an instant a
  number of Unix seconds, a failure an object), and no record is of a type
  that belongs to no run (a cron schedule's, a limit's);
- lsns strictly increase, and every record is of the document's run;
- the first record is the run's `RunStarted`, and no other is (a run made by
  `continue_as_new` has none: its `creation` names it); both name the
  document's id and workflow;
- at most one record closes the run, and it is the last;
- an operation starts at most once (`TimerStarted`, `WaitStarted`,
  `ChildStarted`), ends at most once (`ENDS`), and a race is won once; an
  update is accepted and applied at most once each, a signal (its id)
  received once, a cancel asked for once, and before the run is cancelled.
  What repeats is what the engine repeats: attempts (`AttemptFailed`,
  `StepPaused`, `StepResumed`, `CompletionIssued`, `CompletionSent`), a
  step's heartbeats and stream items, stuck and unstuck;
- `status` agrees with the records: a closed run's is how its close record
  closed it, an open run's is an open one (a `completed` run has its
  `RunCompleted`).

A file is read up to `HISTORY_BYTES_MAX` bytes, no further: a device or a
pipe that never ends is refused there, as a file that is larger is.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TypeGuard, cast

import orjson

from fusee_runtime.errors import HistoryInvalid
from fusee_runtime.history_fields import (
    CREATIONS,
    FIELD_TYPES,
    OP_FIELDS,
    Count,
    RunId,
    StatusName,
    conforms,
    is_int,
    mismatch,
    quoted,
    what_is,
)
from fusee_runtime.journal.records import CLOSES, FIELDS, NOT_OF_A_RUN, R
from fusee_runtime.model import codec
from fusee_runtime.model.codec import RECORDS
from fusee_runtime.model.json import Json, JsonObject
from fusee_runtime.model.op_records import OfOp, RaceWon
from fusee_runtime.model.records import (
    CLOSED_AS,
    CancelRequested,
    OfRun,
    RunCancelled,
    RunStarted,
    SignalReceived,
    UpdateAccepted,
    UpdateApplied,
)
from fusee_runtime.model.sealing import looking
from fusee_runtime.model.status import Status

FORMAT = "fusee.history"
VERSION = 1
"""The history document's format and version."""

HISTORY_BYTES_MAX = 256 << 20
"""The largest history file read (256 MiB). A run's journal larger than that
replays from its home instead (`fusee replay ID`), where no file is read."""
READ_CHUNK_BYTES = 1 << 20

STARTS = frozenset({R.TimerStarted, R.WaitStarted, R.ChildStarted})
"""Records that start an operation: once each."""
ENDS = frozenset(
    {
        R.StepCompleted,
        R.StepFailed,
        R.ValueRecorded,
        R.TimerFired,
        R.WaitCompleted,
        R.CompletionDone,
        R.ChildClosed,
        R.OpCancelled,
        R.StreamAppended,
        R.StreamClosed,
        R.PatchMarked,
        R.AttributesSet,
        R.SignalSent,
        R.CancelSent,
    }
)
"""Records that end an operation (done, failed, or given up): one per operation."""
ONCE = {
    R.UpdateAccepted: "update {} was accepted",
    R.UpdateApplied: "update {} was applied",
    R.SignalReceived: "signal #{} was received",
    R.CancelRequested: "the cancel was asked for",
}
"""Records the engine writes once per update, signal (its id) and run."""

_CODES = frozenset(int(r) for r in R)
_OPEN = frozenset(str(s) for s in Status if s.is_open)


_OnceOf = str | int | None
"""What a record is once for: an operation (its seq), an update, a signal (its id), the
run's cancel (None)."""


class _Fault(Exception):
    """What is wrong with a document, without where the document came from."""


# -- reading ------------------------------------------------------------------------


def read_history(source: str | Path | Mapping[str, object]) -> JsonObject:
    """A history document from a file (or as read already), checked whole by
    `check_history`.

    Raises:
        HistoryInvalid: in one line, why it is not a history this fusee replays:
            the file cannot be read or is over `HISTORY_BYTES_MAX`, is not JSON, is
            not a fusee history or of another version, or breaks a rule of the
            format (which, at which record).
    """
    if isinstance(source, Mapping):
        return check_history(source)
    path = str(source)
    try:
        data = _read_bounded(Path(source))
    except OSError as e:
        raise HistoryInvalid(f"cannot read {path}: {e.strerror or e}", path) from None
    if data is None:
        raise HistoryInvalid(
            f"bad history file {path}: larger than {_size(HISTORY_BYTES_MAX)}, the most read "
            "(replay the run in its home instead: fusee replay ID)",
            path,
        )
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise HistoryInvalid(f"{path} is not JSON: {e}", path) from None
    return check_history(doc, path)


def _read_bounded(path: Path) -> bytearray | None:
    """The file's bytes, or None past `HISTORY_BYTES_MAX` (read no further)."""
    data = bytearray()
    with path.open("rb") as f:
        while len(data) <= HISTORY_BYTES_MAX:
            chunk = f.read(min(READ_CHUNK_BYTES, HISTORY_BYTES_MAX + 1 - len(data)))
            if not chunk:
                return data
            data += chunk
    return None


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n % (1 << 20) == 0 else f"{n} bytes"


def check_history(doc: object, path: str | None = None) -> JsonObject:
    """`doc` as a dict if it is a history document this fusee replays (the rules are
    the module's), else `HistoryInvalid` naming `path` (the file it came from).

    Raises:
        HistoryInvalid: the first rule `doc` breaks, in one line.
    """
    where = path or "the history"
    if not isinstance(doc, Mapping) or doc.get("format") != FORMAT:
        raise HistoryInvalid(
            f"{where} is not a fusee history (fusee history ID --export FILE writes one)", path
        )
    version = doc.get("version")
    if is_int(version) and version != VERSION:
        raise HistoryInvalid(
            f"{where} is a fusee history of version {version}; this fusee reads version {VERSION}",
            path,
        )
    try:
        if not is_int(version):
            raise _Fault(f"its version is {what_is(version)}, not {VERSION}")
        _check(doc)
    except _Fault as e:
        head = f"bad history file {path}" if path is not None else "bad history document"
        raise HistoryInvalid(f"{head}: {e}", path) from None
    return dict(doc)


# -- the rules ----------------------------------------------------------------------


def _check(doc: Mapping[str, object]) -> None:
    fields = (("id", str), ("run_id", RunId), ("workflow", str), ("status", StatusName))
    for name, tp in (*fields, ("creation", dict[str, Json] | None), ("records", list[Json])):
        _field(doc, name, tp, "its")
    # (Of the types `_field` checked.)
    status = doc["status"]
    creation = cast("JsonObject | None", doc["creation"])
    records = cast("list[Json]", doc["records"])
    if creation is not None:
        _check_creation(doc, creation)
    continued = creation is not None and creation["kind"] == "continued"
    if not records and not continued:
        raise _Fault("it has no record: a run's journal begins with its RunStarted")
    closed = _check_records(doc, records, continued)
    if closed is None and status not in _OPEN:
        raise _Fault(f"its status is {status!r}, but no record closes the run")
    if closed is not None and status != str(CLOSED_AS[RECORDS[closed]]):
        raise _Fault(f"its status is {status!r}, but its {closed.name} closes the run")


def _check_creation(doc: Mapping[str, object], creation: JsonObject) -> None:
    kind = creation.get("kind")
    fields = CREATIONS.get(kind) if isinstance(kind, str) else None
    if fields is None:
        raise _Fault(f"its creation's kind is {what_is(kind)}, not 'reset' or 'continued'")
    for name, tp in fields.items():
        _field(creation, name, tp, "its creation's")
    match kind:
        case "continued":
            named = (("run_id", "run_id"), ("workflow_id", "id"), ("workflow", "workflow"))
            for name, own in named:
                if creation[name] != doc[own]:
                    raise _Fault(f"its creation's {name} is not the document's {own}")
        case "reset":
            # (Of the types `_field` checked: `CREATIONS["reset"]`.)
            ops = cast("JsonObject", creation["ops"])
            for seq, op in ops.items():
                _check_op(seq, op)
            for seq in cast("list[str]", creation["pending"]):
                if seq not in ops:
                    raise _Fault(f"its creation's pending operation #{seq} is not one of its ops")


def _check_op(seq: str, op: Json) -> None:
    where = f"its creation's operation #{seq}"
    if not isinstance(op, dict):
        raise _Fault(f"{where} is {what_is(op)}, not an object")
    unknown = sorted(set(op) - set(OP_FIELDS), key=str)
    if unknown:
        raise _Fault(f"{where} has a field {str(unknown[0])[:40]!r} no operation has")
    for name in ("kind", "name"):
        if name not in op:
            raise _Fault(f"{where} has no {name}")
    for name, value in op.items():
        if not conforms(value, OP_FIELDS[name]):
            raise _Fault(mismatch(f"{where}'s {name}", value, OP_FIELDS[name]))


def _check_records(doc: Mapping[str, object], records: list[Json], continued: bool) -> R | None:
    """Checks every record in order; returns the type of the record that closes the run."""
    run_id = doc["run_id"]
    last_lsn = -1
    closed: tuple[int, R] | None = None
    once: dict[tuple[str, _OnceOf], int] = {}
    cancel = False
    for n, record in enumerate(records, 1):
        if not (isinstance(record, list | tuple) and len(record) == 2):
            raise _Fault(f"record {n} is {what_is(record)}, not [lsn, [type, run_id, ...]]")
        lsn, array = record
        if not _is_count(lsn):
            raise _Fault(mismatch(f"record {n}'s lsn", lsn, Count))
        if lsn <= last_lsn:
            raise _Fault(f"record {n}'s lsn {lsn} does not follow the lsn before it ({last_lsn})")
        last_lsn = lsn
        kind, array = _kind(n, lsn, array)
        at = f"record {n} (lsn {lsn}, {kind.name})"
        for name, tp, value in zip(FIELDS[kind], FIELD_TYPES[kind], array[1:], strict=True):
            if not conforms(value, tp):
                raise _Fault(mismatch(f"{at}: its {name}", value, tp))
        typed = codec.from_array(array, looking())
        assert isinstance(typed, OfRun)  # (`_kind` refuses the records of no run)
        if typed.run_id != run_id:
            theirs = quoted(typed.run_id)
            raise _Fault(f"{at} is of run {theirs}, not of the document's {quoted(run_id)}")
        if closed is not None:
            raise _Fault(
                f"{at} follows record {closed[0]} ({closed[1].name}), which closed the run"
            )
        if kind in CLOSES:
            closed = (n, kind)
        _check_start(at, n, typed, doc, continued)
        _check_once(once, n, at, typed)
        cancel = cancel or isinstance(typed, CancelRequested)
        if isinstance(typed, RunCancelled) and not cancel:
            raise _Fault(f"{at}: no CancelRequested before it: the run was not asked to cancel")
    return closed[1] if closed is not None else None


def _kind(n: int, lsn: int, array: Json) -> tuple[R, list[Json]]:
    if not (isinstance(array, list | tuple) and array):
        raise _Fault(f"record {n} (lsn {lsn}) is {what_is(array)}, not [type, run_id, ...]")
    code = array[0]
    if not is_int(code) or code not in _CODES:
        raise _Fault(f"record {n} (lsn {lsn}): {what_is(code)} is not a record type")
    kind = R(code)
    if kind in NOT_OF_A_RUN:
        raise _Fault(f"record {n} (lsn {lsn}): a {kind.name} record is of no run")
    if len(array) != 1 + len(FIELDS[kind]):
        raise _Fault(
            f"record {n} (lsn {lsn}, {kind.name}) has {len(array) - 1} fields, "
            f"not {len(FIELDS[kind])}"
        )
    return kind, array


def _check_start(at: str, n: int, rec: OfRun, doc: Mapping[str, object], continued: bool) -> None:
    """The run's first record is its `RunStarted` (a continued run has none), and it
    names the document's id and workflow."""
    if not isinstance(rec, RunStarted):
        if n == 1 and not continued:
            raise _Fault(f"{at} comes first: a run's journal begins with its RunStarted")
        return
    if continued:
        raise _Fault(f"{at}: a run made by continue_as_new has no RunStarted")
    if n != 1:
        raise _Fault(f"{at}: the run started at record 1 already")
    if rec.workflow_id != doc["id"]:
        theirs = quoted(rec.workflow_id)
        raise _Fault(f"{at} starts {theirs}, not the document's id {quoted(doc['id'])}")
    if rec.workflow != doc["workflow"]:
        raise _Fault(f"{at} is of workflow {quoted(rec.workflow)}, not {quoted(doc['workflow'])}")


def _check_once(seen: dict[tuple[str, _OnceOf], int], n: int, at: str, rec: OfRun) -> None:
    """What the engine records once (`STARTS`, `ENDS`, a race's winner, `ONCE`) is
    there once; `seen`: where each was, by what it is of."""
    kind = rec.code
    key: tuple[str, _OnceOf]
    if isinstance(rec, OfOp) and kind in STARTS:
        key, what = ("started", rec.seq), f"operation #{rec.seq} started"
    elif isinstance(rec, OfOp) and kind in ENDS:
        key, what = ("ended", rec.seq), f"operation #{rec.seq} ended"
    elif isinstance(rec, RaceWon):
        key, what = ("won", rec.seq), f"the race at operation #{rec.seq} was won"
    elif isinstance(rec, UpdateAccepted | UpdateApplied | SignalReceived | CancelRequested):
        of = _once_of(rec)
        key, what = (kind.name, of), ONCE[kind].format(quoted(of))
    else:
        return
    first = seen.setdefault(key, n)
    if first != n:
        raise _Fault(f"{at}: {what} at record {first} already")


def _once_of(rec: UpdateAccepted | UpdateApplied | SignalReceived | CancelRequested) -> _OnceOf:
    """What a record of `ONCE` is once for: its update, its signal (none: the run's cancel)."""
    if isinstance(rec, SignalReceived):
        return rec.signal_id
    return None if isinstance(rec, CancelRequested) else rec.update_id


def _is_count(value: object) -> TypeGuard[int]:
    return conforms(value, Count)


def _field(doc: Mapping[str, object], name: str, tp: object, whose: str) -> None:
    if name not in doc:
        raise _Fault(f"{whose} {name} is missing")
    if not conforms(doc[name], tp):
        raise _Fault(mismatch(f"{whose} {name}", doc[name], tp))
