"""A run's journal for people: `fusee history`, a row per record (a table where it fits,
else a block of lines each), from the records as `history()` gives them, read back
into their classes (`model.readable`).

Each record shows its position, the instant it tells of, how long a step's attempt
took, its type, its operation number, the name it holds, and a detail: what it says,
its values cut to `DETAIL_LINES_MAX` terminal lines (`--verbose`: whole), then the
frame that raised its failure (`tables.failure_lines`).
"""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from fusee_cli.render import instant, stdout, when
from fusee_cli.tables import GAP, clip, failure_lines, fits, indented
from fusee_runtime.model import readable
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
from fusee_runtime.model.readable import Named, OpRecord
from fusee_runtime.model.records import (
    CancelRequested,
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

DETAIL_LINES_MAX = 4
"""How many terminal lines a value in `history` may fill before it is cut (`--verbose`
and `--json` show all of it)."""


def history_table(records: list[dict[str, Any]], verbose: bool = False) -> None:
    """A run's journal as a timeline, as `fusee history` shows it (the records as
    `history()` gives them): a table where it fits, else a block of lines per record."""
    console = stdout()
    limit = None if verbose else max(console.width * DETAIL_LINES_MAX, 72)
    read = [readable.read(r) for r in records]
    runs = {readable.run_of(rec) for _, rec in read}
    rows: list[dict[str, Any]] = []
    for lsn, rec in read:
        at = _at(rec)
        rows.append(
            {
                "lsn": str(lsn),
                "time": when(at) if at is not None else "",
                "took": _took(rec),
                "record": rec.code.name,
                "seq": rec.seq if isinstance(rec, OpRecord) else "",
                "name": _name(rec),
                "detail": _detail(rec, limit),
                "traceback": failure_lines(_failure_of(rec), verbose),
                "run": readable.run_of(rec) or "",
            }
        )
    fixed = ["lsn", "time", "took", "record", "seq", "name"] + (["run"] if len(runs) > 1 else [])
    widths = [max(len(c), *(len(r[c]) for r in rows)) for c in fixed]
    if fits(console, [*widths, 30]):
        table = Table(box=None, header_style="bold", pad_edge=False, padding=(0, GAP // 2))
        for column in fixed:
            table.add_column(column, no_wrap=True, justify="right" if column == "took" else "left")
        table.add_column("detail", overflow="fold")
        for r in rows:
            detail = "\n".join([r["detail"], *r["traceback"]]) if r["traceback"] else r["detail"]
            table.add_row(*(Text(r[c]) for c in fixed), Text(detail))
        console.print(table)
        return
    for r in rows:
        head = "  ".join(
            x for x in (r["lsn"], r["time"], r["record"], r["seq"], r["name"], r["took"]) if x
        )
        lines: list[RenderableType] = [Text(head, style="bold")]
        if len(runs) > 1:
            lines.append(indented(f"run {r['run']}", 4))
        lines += [indented(line, 4) for line in [r["detail"], *r["traceback"]] if line]
        console.print(Group(*lines), overflow="fold")


def _name(rec: Record) -> str:
    """The name a record holds: its step's, timer's, signal's, ..., else its workflow's."""
    if isinstance(rec, Named):
        return rec.name
    match rec:
        case RunStarted() | ChildStarted() | ScheduleArmed() | ScheduleFired() | SchedulePaused():
            return rec.workflow
    return ""


def _failure_of(rec: Record) -> dict[str, Any] | None:
    match rec:
        case StepFailed(failure=f) | AttemptFailed(failure=f) | StepPaused(failure=f):
            return f
        case RunFailed(failure=f) | UpdateApplied(failure=f) | CompletionDone(failure=f):
            return f
        case ChildClosed(failure=f):
            return f
    return None


def _at(rec: Record) -> Instant | None:
    """The instant a record tells of, in the time column (None: it shows none)."""
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
        case StartDebounced(at=at):
            return at
        case ScheduleFired(at=at) | SchedulePaused(at=at):
            return at
        case RunCompleted(closed_at=at) | RunFailed(closed_at=at) | RunTerminated(closed_at=at):
            return at
        case RunCancelled(closed_at=at) | RunTimedOut(closed_at=at) | RunReset(closed_at=at):
            return at
        case RunContinuedAsNew(closed_at=at) | ChildClosed(closed_at=at):
            return at
        case RunStarted(started_at=at) | ChildStarted(started_at=at):
            return at
    return None


def _took(rec: Record) -> str:
    """How long a step's attempt ran, for the records that say."""
    match rec:
        case (
            StepCompleted(started_at=start, ended_at=end)
            | StepFailed(started_at=start, ended_at=end)
        ):
            pass
        case (
            AttemptFailed(started_at=start, failed_at=end)
            | StepPaused(started_at=start, paused_at=end)
        ):
            pass
        case _:
            return ""
    seconds = max((instant(end) - instant(start)).total_seconds(), 0.0)
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _detail(rec: Record, limit: int | None) -> str:
    """What a record says, in `history`'s detail column: the values it holds cut to
    `limit` characters (None: whole)."""
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
        case StepHeartbeat() | StepStreamAppended():
            return _from_attempt(rec, limit)
        case RunTerminated(reason=said) | RunStuck(message=said) | AttributesSet(attributes=said):
            return clip(said, limit)
        case StreamAppended():
            return clip(rec.item.value, limit)
        case StreamClosed():
            return "stream closed"
        case PatchMarked():
            return f"patch {rec.patch_id}: this run takes the patched branch"
        case RunUnstuck():
            return "goes on: resumed, or its code now matches its journal"
        case RunAdmitted():
            return "let in by its queue: its code runs from here"
        case StartDebounced():
            shown = clip(rec.input.value, limit)
            return f"a later start of its burst: begins at {when(rec.begin_at)}, input {shown}"
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


def _from_attempt(rec: StepHeartbeat | StepStreamAppended, limit: int | None) -> str:
    """What a step function sent while its attempt ran: a heartbeat's progress, or an
    item of a stream."""
    if isinstance(rec, StepHeartbeat):
        return clip(f"attempt {rec.attempt}: progress {clip(rec.details.value, None)}", limit)
    return clip(f"attempt {rec.attempt}: {clip(rec.item.value, limit)}", limit)


def _any_value(rec: Record, limit: int | None) -> str:
    """Any other record: its value, result or reason ("" when none)."""
    match rec:
        case StepCompleted(value=v) | ValueRecorded(value=v) | WaitCompleted(value=v):
            return clip(v.value, limit)
        case RunCompleted(result=v):
            return clip(v.value, limit)
        case CancelRequested(reason=r) | RunCancelled(reason=r) | RunTimedOut(reason=r):
            return clip(r, limit)
        case RunReset(reason=r):
            return clip(r, limit)
    return ""


def _composing(rec: ChildStarted | ChildClosed | SignalSent | CancelSent) -> str:
    """What a record of `ctx.child`, `signal_workflow` or `cancel_workflow` says."""
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
