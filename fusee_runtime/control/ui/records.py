"""A run's event history as the web UI shows it: every record, as `fusee history` does.

Each record (read back from `Control.history`'s JSON by `model.readable`)
becomes an `Entry`: its position in the journal (`lsn`), the instant it
tells of, how long a step's attempt took, its type, its operation number,
the name it holds, and a detail that says what it means, in the CLI's
words (`fusee_cli/history_table.py`, which the UI cannot import: it draws
with rich), a value cut to `DETAIL_CHARS_MAX` characters (the download,
`fusee history --export`'s document, has them whole).

Pure: no I/O. `at_of` is also what the timeline reads a record's instant with.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import orjson

from fusee_runtime.model.json import JsonObject
from fusee_runtime.model.op_records import (
    AttemptFailed,
    AttributesSet,
    CancelSent,
    ChildClosed,
    ChildStarted,
    CompletionDone,
    CompletionIssued,
    CompletionSent,
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
from fusee_runtime.model.readable import Named, OpRecord, read, run_of
from fusee_runtime.model.records import (
    CancelRequested,
    FailureJson,
    Instant,
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
    ScheduleFired,
    SchedulePaused,
    SignalReceived,
    StartDebounced,
    UpdateAccepted,
    UpdateApplied,
)
from fusee_runtime.model.sealing import label

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
    for lsn, rec in map(read, records):
        at = at_of(rec)
        out.append(
            Entry(
                lsn=lsn,
                at=None if at is None else datetime.fromtimestamp(at, UTC),
                took=_took(rec),
                type=rec.code.name,
                op=rec.seq if isinstance(rec, OpRecord) else "",
                name=_name(rec),
                detail=detail(rec, DETAIL_CHARS_MAX),
                run_id=run_of(rec) or "",
                failure=_failure_of(rec),
            )
        )
    return out


def clip(value: object, limit: int | None) -> str:
    """A JSON value on one line, cut to `limit` characters (None: whole); one encrypted
    with a key the server has not, as `encrypted (key k1)`."""
    said = label(value)
    if said is None and isinstance(value, str):
        said = value
    if said is None:
        try:
            said = orjson.dumps(value).decode()
        except TypeError:
            said = repr(value)
    text = " ".join(said.splitlines())
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "…"


def _name(rec: Record) -> str:
    """The name a record holds: its step's, timer's, signal's, ..., else its workflow's."""
    if isinstance(rec, Named):
        return rec.name
    match rec:
        case RunStarted() | ChildStarted() | ScheduleArmed() | ScheduleFired() | SchedulePaused():
            return rec.workflow
        case PatchMarked():
            return rec.patch_id
    return ""


def _failure_of(rec: Record) -> FailureJson | None:
    match rec:
        case StepFailed(failure=f) | AttemptFailed(failure=f) | StepPaused(failure=f):
            return f
        case RunFailed(failure=f) | UpdateApplied(failure=f) | CompletionDone(failure=f):
            return f
        case ChildClosed(failure=f):
            return f
    return None


def at_of(rec: Record) -> Instant | None:
    """The instant a record tells of (None: it tells of none)."""
    match rec:
        case StepCompleted(ended_at=at) | StepFailed(ended_at=at) | StepHeartbeat(beat_at=at):
            return at
        case StepPaused(paused_at=at) | AttemptFailed(failed_at=at) | StepResumed(resumed_at=at):
            return at
        case TimerFired(fired_at=at) | SignalReceived(received_at=at) | WaitCompleted(at=at):
            return at
        case CancelRequested(requested_at=at) | CompletionIssued(issued_at=at):
            return at
        case CompletionSent(sent_at=at) | SignalSent(sent_at=at) | CancelSent(sent_at=at):
            return at
        case CompletionDone(done_at=at) | UpdateAccepted(accepted_at=at):
            return at
        case UpdateApplied(applied_at=at) | RunUnstuck(at=at) | RunAdmitted(at=at):
            return at
        case StartDebounced(at=at) | ScheduleFired(at=at) | SchedulePaused(at=at):
            return at
        case RunCompleted(closed_at=at) | RunFailed(closed_at=at) | RunTerminated(closed_at=at):
            return at
        case RunCancelled(closed_at=at) | RunTimedOut(closed_at=at) | RunReset(closed_at=at):
            return at
        case RunContinuedAsNew(closed_at=at) | ChildClosed(closed_at=at):
            return at
        case RunStarted(started_at=at) | ChildStarted(started_at=at) | AttributesSet(set_at=at):
            return at
        case RunStuck(stuck_at=at):
            return at
    return None


def _took(rec: Record) -> str:
    """How long a step's attempt ran, for the records that say."""
    match rec:
        case (
            StepCompleted(started_at=start, ended_at=end)
            | StepFailed(started_at=start, ended_at=end)
            | AttemptFailed(started_at=start, failed_at=end)
            | StepPaused(started_at=start, paused_at=end)
        ):
            seconds = max(end - start, 0.0)
            return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"
    return ""


def _when(at: Instant | None) -> str:
    if at is None:
        return "-"
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def detail(rec: Record, limit: int | None) -> str:
    """What a record says, as `fusee history`'s detail column says it."""
    match rec:
        case RunStarted():
            return _started(rec, limit)
        case ChildStarted() | ChildClosed() | SignalSent() | CancelSent():
            return clip(_composing(rec), limit)
        case AttemptFailed() | StepFailed() | RunFailed() | StepPaused():
            return clip(_failing(rec), limit)
        case TimerStarted() | WaitStarted() | WaitCompleted() | SignalReceived():
            return _waiting(rec, limit)
        case UpdateApplied() | UpdateAccepted():
            return _updating(rec, limit)
        case CompletionIssued() | CompletionSent() | CompletionDone():
            return _completing(rec, limit)
    return _said(rec, limit)


def _said(rec: Record, limit: int | None) -> str:
    """What a record says that `detail` did not: a step's heartbeat or stream item, a
    reason, a marker, or a value."""
    match rec:
        case StepHeartbeat():
            return clip(f"attempt {rec.attempt}: progress {clip(rec.details.value, None)}", limit)
        case StepStreamAppended():
            return clip(f"attempt {rec.attempt}: {clip(rec.item.value, limit)}", limit)
        case RunTerminated(reason=said) | RunStuck(message=said) | AttributesSet(attributes=said):
            return clip(said, limit)
        case StreamAppended():
            return clip(rec.item.value, limit)
        case StreamClosed():
            return "stream closed"
        case PatchMarked():
            return patch_said(rec.patch_id)
        case RunUnstuck():
            return "goes on: resumed, or its code now matches its journal"
        case RunAdmitted():
            return "let in by its queue: its code runs from here"
        case StartDebounced():
            shown = clip(rec.input.value, limit)
            return f"a later start of its burst: begins at {_when(rec.begin_at)}, input {shown}"
        case RaceWon():
            return f"branch {rec.index} won"
    return _any_value(rec, limit)


def patch_said(patch_id: str) -> str:
    """What a patch marker means, as the CLI says it."""
    return f"patch {patch_id}: this run takes the patched branch"


def _started(rec: RunStarted, limit: int | None) -> str:
    origin = rec.origin or {}
    hows = []
    if "reset" in origin:
        hows.append(f"reset of run {origin['reset']}, from operation #{origin['before']}")
    if "schedule" in origin:
        hows.append("triggered by hand" if origin.get("manual") else "fired by its cron schedule")
    if "parent" in origin:
        hows.append(f"child of {origin['parent']['id']}, operation #{origin['parent']['seq']}")
    if "queue" in origin:
        queue = origin["queue"]
        key = f", key {queue['key']!r}" if queue.get("key") is not None else ""
        hows.append(f"in queue {queue['name']!r}{key}")
    how = f" ({'; '.join(hows)})" if hows else ""
    return f"id {rec.workflow_id}, input {clip(rec.input.value, limit)}{how}"


def _failing(rec: AttemptFailed | StepFailed | RunFailed | StepPaused) -> str:
    f = rec.failure
    if isinstance(rec, AttemptFailed):
        return f"attempt {rec.attempt}: {f['kind']}: {f['message']}; retry in {rec.delay:.3g} s"
    if isinstance(rec, StepPaused):
        return f"attempt {rec.attempt}: {f['kind']}: {f['message']}; waits for resume"
    return f"{f['kind']}: {f['message']}"


def _waiting(
    rec: TimerStarted | WaitStarted | WaitCompleted | SignalReceived, limit: int | None
) -> str:
    match rec:
        case TimerStarted(fire_at=at):
            return f"fires at {_when(at)}" if at is not None else "never fires (a sleep forever)"
        case WaitStarted(deadline=deadline):
            return f"until {_when(deadline)}" if deadline is not None else "no timeout"
        case SignalReceived():
            return f"#{rec.signal_id}: {clip(rec.value.value, limit)}"
        case WaitCompleted(signal_id=None):
            return "timed out"
    return _any_value(rec, limit)


def _updating(rec: UpdateApplied | UpdateAccepted, limit: int | None) -> str:
    if isinstance(rec, UpdateApplied):
        f = rec.failure
        outcome = f"failed: {f['message']}" if f else f"-> {clip(rec.result.value, limit)}"
        arg = "" if rec.arg.value is None else f": {clip(rec.arg.value, limit)}"
        return clip(f"update {rec.update_id}{arg} {outcome} (after #{rec.position})", limit)
    return clip(
        f"update {rec.update_id}: {clip(rec.arg.value, limit)}, its handler runs from #"
        f"{rec.position}",
        limit,
    )


def _completing(rec: CompletionIssued | CompletionSent | CompletionDone, limit: int | None) -> str:
    if isinstance(rec, CompletionIssued):
        return f"attempt {rec.attempt}: token issued"
    if isinstance(rec, CompletionSent):
        return "token sent; waits for its completion"
    f = rec.failure
    return clip(f"failed: {f['message']}", limit) if f else clip(rec.value.value, limit)


def _any_value(rec: Record, limit: int | None) -> str:
    match rec:
        case StepCompleted(value=v) | ValueRecorded(value=v) | WaitCompleted(value=v):
            return clip(v.value, limit)
        case RunCompleted(result=v):
            return clip(v.value, limit)
        case CancelRequested(reason=r) | RunCancelled(reason=r) | RunTimedOut(reason=r):
            return clip(r, limit)
        case RunReset(reason=r):
            return clip(r, limit)
        case RunContinuedAsNew(new_run_id=new):
            return clip(f"continued as run {new}, input {clip(rec.input.value, None)}", limit)
    return ""


def _composing(rec: ChildStarted | ChildClosed | SignalSent | CancelSent) -> str:
    if isinstance(rec, ChildClosed):
        f = rec.failure
        said = f"{f['kind']}: {f['message']}" if f else clip(rec.result.value, None)
        return f"child {rec.status}: {said}"
    refused = f"refused: {rec.error['message']}" if rec.error else ""
    if isinstance(rec, ChildStarted):
        close = f"parent_close {rec.parent_close}"
        return refused or f"child {rec.workflow_id} (run {rec.child_run_id}), {close}"
    if isinstance(rec, SignalSent):
        return refused or f"to {rec.workflow_id}: {clip(rec.value.value, None)}"
    return refused or f"cancel of {rec.workflow_id}: {rec.reason}"
