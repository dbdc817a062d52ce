"""The words of a run's history: what `fusee history` and the web UI's history view say
of each record, written once so that the two say the same.

Each record (a mapping as `Engine.history()` or the control API gives it, read back
into its class by `model.readable`) becomes a `Said`: its position in the journal
(`lsn`), the instant it tells of, how long a step's attempt took, its type, its
operation number, the name it holds, a detail that says what it means, its run, and
the failure it holds. Example, an attempt that failed and retries, as the control API
gives it:

    {"lsn": 12, "type": "AttemptFailed", "run_id": "f639", "seq": 1, "op": "1",
     "name": "charge", "attempt": 1, "delay": 1.0, "retry_at": "2026-12-05T12:00:01.051+00:00",
     "failure": {"kind": "OSError", "message": "disk full", ...},
     "started_at": "2026-12-05T12:00:00+00:00", "failed_at": "2026-12-05T12:00:00.051+00:00"}
    -> Said(lsn=12, at=1796472000.051, took="51.0 ms", type="AttemptFailed", op="1",
            name="charge", detail="attempt 1: OSError: disk full; retry in 1 s",
            run_id="f639", failure={"kind": "OSError", ...})

A detail's values are cut to the caller's limit of characters (None: whole): the CLI
gives one from its terminal's width, the UI a fixed one. How the words are laid out
(a rich table, an HTML row, the instant's format) is the caller's; what they say is
this module's. Pure: no I/O, no rich.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

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


@dataclass(frozen=True)
class Said:
    """What a history says of one record."""

    lsn: int
    at: Instant | None
    """The instant the record tells of (None: it tells of none)."""
    took: str
    type: str
    op: str
    name: str
    detail: str
    run_id: str
    failure: FailureJson | None


def said(mapping: Mapping[str, Any], limit: int | None) -> Said:
    """What a history says of the record `mapping` shows, its values cut to `limit`
    characters (None: whole).

    Raises:
        ValueError: `mapping` is no record this version knows (`readable.read`).
    """
    lsn, rec = read(mapping)
    return Said(
        lsn=lsn,
        at=at_of(rec),
        took=took(rec),
        type=rec.code.name,
        op=rec.seq if isinstance(rec, OpRecord) else "",
        name=name_of(rec),
        detail=detail(rec, limit),
        run_id=run_of(rec) or "",
        failure=failure_of(rec),
    )


def clip(value: object, limit: int | None) -> str:
    """A JSON value on one line, cut to `limit` characters (None: whole); one encrypted
    with a key this process has not, as `encrypted (key k1)`."""
    text = label(value)
    if text is None and isinstance(value, str):
        text = value
    if text is None:
        try:
            text = orjson.dumps(value).decode()
        except TypeError:
            text = repr(value)
    text = " ".join(text.splitlines())
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "…"


def when(at: Instant | None) -> str:
    """An instant in a detail, in UTC to the millisecond: `2026-12-05 12:00:00.051Z`."""
    if at is None:
        return "-"
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def name_of(rec: Record) -> str:
    """The name a record holds: its step's, timer's, signal's, patch's, ..., else its
    workflow's."""
    if isinstance(rec, Named):
        return rec.name
    match rec:
        case RunStarted() | ChildStarted() | ScheduleArmed() | ScheduleFired() | SchedulePaused():
            return rec.workflow
        case PatchMarked():
            return rec.patch_id
    return ""


def failure_of(rec: Record) -> FailureJson | None:
    """The failure a record holds (None: it holds none)."""
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


def took(rec: Record) -> str:
    """How long a step's attempt ran, for the records that say ("" for the others)."""
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


def patch_said(patch_id: str) -> str:
    """What a patch marker means."""
    return f"patch {patch_id}: this run takes the patched branch"


def detail(rec: Record, limit: int | None) -> str:
    """What a record says: the values it holds cut to `limit` characters (None: whole)."""
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
    return _marked(rec, limit)


def _marked(rec: Record, limit: int | None) -> str:
    """What a record says that `detail` did not: what a step's attempt sent, a reason,
    a marker, or a value."""
    match rec:
        case StepHeartbeat():
            return clip(f"attempt {rec.attempt}: progress {clip(rec.details.value, None)}", limit)
        case StepStreamAppended():
            return clip(f"attempt {rec.attempt}: {clip(rec.item.value, limit)}", limit)
        case RunTerminated(reason=text) | RunStuck(message=text) | AttributesSet(attributes=text):
            return clip(text, limit)
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
            return f"a later start of its burst: begins at {when(rec.begin_at)}, input {shown}"
        case RaceWon():
            return f"branch {rec.index} won"
    return _any_value(rec, limit)


def _started(rec: RunStarted, limit: int | None) -> str:
    """What a `RunStarted` says: the run's id, its input, and how it came to start."""
    origin = rec.origin or {}
    hows = []
    if "reset" in origin:
        hows.append(f"reset of run {origin['reset']}, from operation #{origin['before']}")
    if "schedule" in origin:
        hows.append("triggered by hand" if origin.get("manual") else "fired by its cron schedule")
    if "parent" in origin:  # a reset child's too: it stays its parent's child
        hows.append(f"child of {origin['parent']['id']}, operation #{origin['parent']['seq']}")
    if "queue" in origin:
        queue = origin["queue"]
        key = f", key {queue['key']!r}" if queue.get("key") is not None else ""
        hows.append(f"in queue {queue['name']!r}{key}")
    how = f" ({'; '.join(hows)})" if hows else ""
    return f"id {rec.workflow_id}, input {clip(rec.input.value, limit)}{how}"


def _failing(rec: AttemptFailed | StepFailed | RunFailed | StepPaused) -> str:
    """What a record of a failure says: the failure, and for a step's attempt what
    comes next (a retry, or a resume)."""
    f = rec.failure
    if isinstance(rec, AttemptFailed):
        return f"attempt {rec.attempt}: {f['kind']}: {f['message']}; retry in {rec.delay:.3g} s"
    if isinstance(rec, StepPaused):
        return f"attempt {rec.attempt}: {f['kind']}: {f['message']}; waits for resume"
    return f"{f['kind']}: {f['message']}"


def _waiting(
    rec: TimerStarted | WaitStarted | WaitCompleted | SignalReceived, limit: int | None
) -> str:
    """What a record of a timer, a wait for a signal, or a signal says."""
    match rec:
        case TimerStarted(fire_at=at):
            return f"fires at {when(at)}" if at is not None else "never fires (a sleep forever)"
        case WaitStarted(deadline=deadline):
            return f"until {when(deadline)}" if deadline is not None else "no timeout"
        case SignalReceived():
            return f"#{rec.signal_id}: {clip(rec.value.value, limit)}"
        case WaitCompleted(signal_id=None):
            return "timed out"
    return _any_value(rec, limit)


def _updating(rec: UpdateApplied | UpdateAccepted, limit: int | None) -> str:
    """What a record of an update says: its argument, then where its handler runs from
    (accepted) or what it returned (applied)."""
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
    """What a record of `ctx.await_completion` says: a token issued, sent, then the
    value (or failure) it was completed with."""
    if isinstance(rec, CompletionIssued):
        return f"attempt {rec.attempt}: token issued"
    if isinstance(rec, CompletionSent):
        return "token sent; waits for its completion"
    f = rec.failure
    return clip(f"failed: {f['message']}", limit) if f else clip(rec.value.value, limit)


def _any_value(rec: Record, limit: int | None) -> str:
    """Any other record: its value, result or reason ("" when none)."""
    match rec:
        case ValueRecorded(name="now", value=v) if isinstance(v.value, int | float):
            return when(v.value)  # `ctx.now()`: the instant, not the Unix number it keeps
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
    """What a record of `ctx.child`, `signal_workflow` or `cancel_workflow` says."""
    if isinstance(rec, ChildClosed):
        f = rec.failure
        text = f"{f['kind']}: {f['message']}" if f else clip(rec.result.value, None)
        return f"child {rec.status}: {text}"
    refused = f"refused: {rec.error['message']}" if rec.error else ""
    if isinstance(rec, ChildStarted):
        close = f"parent_close {rec.parent_close}"
        return refused or f"child {rec.workflow_id} (run {rec.child_run_id}), {close}"
    if isinstance(rec, SignalSent):
        return refused or f"to {rec.workflow_id}: {clip(rec.value.value, None)}"
    return refused or f"cancel of {rec.workflow_id}: {rec.reason}"
