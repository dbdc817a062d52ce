"""Records as people and programs read them, back to typed records (`read`).

`Engine.history()` gives each record of a run as a mapping
(`journal.records.as_dict`): its position in the journal (`lsn`), its type's name
(`type`), then its fields by name, a `Payload` as the value it holds. The control
API, the socket and HTTP give the JSON shape of it (`as_json`): the same, with each
instant in ISO 8601 and the operation number `seq` split in two, `seq` (the
top-level operation, an int) and `op` (the whole number, "3.1"). `read` takes
either and gives the record's class back, so what renders a history dispatches on
record classes and reads typed fields.

Example, a timer that fired, as `as_json` gives it:

    {"lsn": 9, "type": "TimerFired", "run_id": "r-1", "seq": 3, "op": "3",
     "fired_at": "2026-12-05T12:00:00.051000+00:00"}
    -> (9, TimerFired(run_id="r-1", seq="3", fired_at=1796472000.051))

An ISO instant reads back as the Unix seconds it was written from, to the
microsecond (as much as ISO 8601 says).

The unions below group the record classes by what they have, so that a reader of
any record can narrow it (`isinstance(rec, OpRecord)`) and read the field typed.

Part of `fusee_runtime.model`: it imports nothing of the engine, the journal or the
control surface.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import fields
from datetime import datetime
from typing import Any

from fusee_runtime.model.codec import RECORDS
from fusee_runtime.model.op_records import (
    AttemptFailed,
    AttributesSet,
    CancelSent,
    ChildClosed,
    ChildStarted,
    CompletionDone,
    CompletionIssued,
    CompletionSent,
    OpCancelled,
    PatchMarked,
    RaceWon,
    SignalSent,
    StepCompleted,
    StepFailed,
    StepHeartbeat,
    StepPaused,
    StepResumed,
    StepStreamAppended,
    StreamAppended,
    StreamClosed,
    TimerFired,
    TimerStarted,
    ValueRecorded,
    WaitCompleted,
    WaitStarted,
)
from fusee_runtime.model.payload import Payload
from fusee_runtime.model.records import (
    CancelRequested,
    Instant,
    LimitSet,
    OfRun,
    QueueSet,
    RateSet,
    RateTaken,
    Record,
    RunAdmitted,
    RunCancelled,
    RunCompleted,
    RunContinuedAsNew,
    RunFailed,
    RunReset,
    RunStarted,
    RunStuck,
    RunTerminated,
    RunTimedOut,
    RunUnstuck,
    ScheduleArmed,
    ScheduleDeleted,
    ScheduleFired,
    SchedulePaused,
    ScheduleSet,
    SignalReceived,
    StartDebounced,
    UpdateAccepted,
    UpdateApplied,
)

OpRecord = (
    StepCompleted
    | StepFailed
    | AttemptFailed
    | ValueRecorded
    | TimerStarted
    | TimerFired
    | WaitStarted
    | WaitCompleted
    | StepPaused
    | StepResumed
    | OpCancelled
    | RaceWon
    | StreamAppended
    | StreamClosed
    | CompletionIssued
    | CompletionSent
    | CompletionDone
    | ChildStarted
    | ChildClosed
    | SignalSent
    | CancelSent
    | PatchMarked
    | AttributesSet
    | StepHeartbeat
    | StepStreamAppended
)
"""A record of one operation of a run (an `OfOp`, closed as a union so that a `match`
over it is checked whole)."""

RunEvent = (
    RunStarted
    | RunCompleted
    | RunFailed
    | RunTerminated
    | SignalReceived
    | CancelRequested
    | RunCancelled
    | RunTimedOut
    | RunReset
    | RunContinuedAsNew
    | UpdateApplied
    | RunStuck
    | RunUnstuck
    | UpdateAccepted
    | RunAdmitted
    | StartDebounced
)
"""A record of a run as a whole: its start, its close, what came to it from outside."""

NotOfARun = (
    ScheduleArmed
    | ScheduleFired
    | SchedulePaused
    | ScheduleSet
    | ScheduleDeleted
    | LimitSet
    | RateTaken
    | RateSet
    | QueueSet
)
"""The records of a cron schedule (by its name), of a limit's size, of a rate's slot and
size, of a queue's size."""

Named = (
    StepCompleted
    | StepFailed
    | AttemptFailed
    | ValueRecorded
    | TimerStarted
    | WaitStarted
    | StepPaused
    | OpCancelled
    | StreamAppended
    | StreamClosed
    | CompletionIssued
    | SignalSent
    | StepHeartbeat
    | StepStreamAppended
    | SignalReceived
    | UpdateApplied
    | UpdateAccepted
    | LimitSet
    | RateTaken
    | RateSet
    | QueueSet
)
"""A record with a `name`: its step's, timer's, signal's, stream's, update's, limit's,
rate's or queue's."""


def run_of(record: Record) -> str | None:
    """The `run_id` of the run `record` belongs to (None: it belongs to none)."""
    return record.run_id if isinstance(record, OfRun) else None


class _Field(enum.Enum):
    """How a field is read from a mapping."""

    PLAIN = enum.auto()
    PAYLOAD = enum.auto()
    INSTANT = enum.auto()
    SEQ = enum.auto()


_HOW = {
    "Payload": _Field.PAYLOAD,
    "Instant": _Field.INSTANT,
    "Instant | None": _Field.INSTANT,
    "Seq": _Field.SEQ,
}
_BY_TYPE: dict[str, type[Record]] = {cls.code.name: cls for cls in RECORDS.values()}
_FIELDS: dict[type[Record], tuple[tuple[str, _Field], ...]] = {
    cls: tuple((f.name, _HOW.get(str(f.type), _Field.PLAIN)) for f in fields(cls))
    for cls in RECORDS.values()
}
_KEYS: dict[type[Record], frozenset[str]] = {
    cls: frozenset({"lsn", "type", *(name for name, _ in named)}) for cls, named in _FIELDS.items()
}


def read(mapping: Mapping[str, Any]) -> tuple[int, Record]:
    """The position in the journal and the record that `mapping` shows (as `as_dict`
    or `as_json` gives it).

    Raises:
        ValueError: `mapping` is no record this version knows: no type or an unknown
            one, no `lsn`, a field missing or one its type has not, an instant or an
            operation number that does not read.
    """
    name = mapping.get("type")
    cls = _BY_TYPE.get(name) if isinstance(name, str) else None
    if cls is None:
        raise ValueError(f"not a record: its type {name!r} is none this version knows")
    lsn = mapping.get("lsn")
    if not isinstance(lsn, int) or isinstance(lsn, bool):
        raise ValueError(f"not a record: a {cls.__name__} with no lsn (its position)")
    keys = _KEYS[cls] | ({"op"} if "op" in mapping and "seq" in _KEYS[cls] else set())
    if mapping.keys() != keys:
        missing = ", ".join(sorted(keys - mapping.keys())) or "none"
        unknown = ", ".join(sorted(mapping.keys() - keys)) or "none"
        raise ValueError(
            f"not a record: a {cls.__name__} at lsn {lsn} lacks fields ({missing}) "
            f"or has fields it has not ({unknown})"
        )
    values = [_value(mapping, name, how) for name, how in _FIELDS[cls]]
    return lsn, cls(*values)


def _value(mapping: Mapping[str, Any], name: str, how: _Field) -> Any:
    value = mapping[name]
    if how is _Field.PAYLOAD:
        return Payload.kept(value)  # (an envelope not opened is shown as it is)
    if how is _Field.INSTANT:
        return _instant(name, value)
    if how is _Field.SEQ:
        return _seq(mapping, value)
    return value


def _instant(name: str, value: Any) -> Instant | None:
    """Unix seconds (`as_dict`), or ISO 8601 with its offset (`as_json`), or None."""
    if value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
        return value
    if isinstance(value, str):
        try:
            at = datetime.fromisoformat(value)
        except ValueError:
            at = None
        if at is not None and at.tzinfo is not None:
            return at.timestamp()
    raise ValueError(f"not a record: {name} {value!r} is not an instant")


def _seq(mapping: Mapping[str, Any], seq: Any) -> str:
    """The operation number: `seq` itself (`as_dict`), or `op` beside its top (`as_json`)."""
    op = mapping.get("op", seq)
    if not isinstance(op, str) or ("op" in mapping and str(seq) != op.split(".", 1)[0]):
        raise ValueError(f"not a record: operation number {seq!r} (op {op!r}) does not read")
    return op
