"""How each record of a run folds into what the journal says of it (`apply`).

`apply` folds one record into a `RunRecord`: the engine calls it (through
`Run.apply`) both for records read on open and for records it appends.
`OP_RECORDS` holds the records that begin, advance or end one of the run's
operations (by its `seq`): each returns the op it ended, if any. `RUN_RECORDS`
holds the records of the run as a whole (signals, a cancel, updates, streams,
children and messages it sent). Both are keyed by record class, and each fold
function takes the record class it folds, so the type checker knows every field
it reads. (A table rather than one `match`: 30 cases in one function is the
branchiness the complexity gate refuses, and a `match` tries its cases in turn.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from fusee_runtime.attributes import merge_attributes
from fusee_runtime.errors import Failure
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
from fusee_runtime.model.ops import (
    OPS,
    AttributesOp,
    CancelSentOp,
    ChildOp,
    CompletionOp,
    Op,
    PatchOp,
    Peer,
    SignalSentOp,
    StepOp,
    StreamAppendOp,
    StreamCloseOp,
    TimerOp,
    ValueOp,
    WaitOp,
)
from fusee_runtime.model.records import (
    CLOSED_AS,
    CancelRequested,
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
    SignalReceived,
    StartDebounced,
    UpdateAccepted,
    UpdateApplied,
)
from fusee_runtime.model.run import RunRecord
from fusee_runtime.model.status import Status


def apply(run: RunRecord, lsn: int, rec: Record) -> Op | None:
    """Folds one record of `run` into it; returns the op it resolved, if any."""
    cls = type(rec)
    if cls is StepHeartbeat:
        _replace_beat(run, cast(StepHeartbeat, rec))
    run.records.append((lsn, rec))
    run.last_lsn = lsn
    fold = OP_RECORDS.get(cls)
    if fold is not None:
        return _ended(run, lsn, fold(run, rec, lsn))
    fold = RUN_RECORDS.get(cls)
    if fold is not None:
        return fold(run, rec, lsn)
    if cls is RunStarted and run.ops:
        _inherit_streams(run)
    elif cls in CLOSED_AS:
        _close(run, lsn, rec)
    return None


def _ended(run: RunRecord, lsn: int, op: Op | None) -> Op | None:
    """An op a record at `lsn` ended is done there, and so are the streams its step
    owned (a step's end closes them)."""
    if op is not None and op.done:
        op.done_lsn = lsn
        for name in (op.owns if isinstance(op, StepOp) else None) or ():
            run.stream(name).closed_lsn = lsn
    return op


def _replace_beat(run: RunRecord, rec: StepHeartbeat) -> None:
    """Drops the step's previous heartbeat record: the run keeps only the latest of
    each step, so a step beating for hours does not grow its checkpoints."""
    old = run.beat_records.get(rec.seq)
    run.beat_records[rec.seq] = rec
    if old is None:
        return
    records = run.records
    for i in range(len(records) - 1, -1, -1):  # usually near the end
        if records[i][1] is old:
            # A new list: a checkpoint's thread may be cutting the old one at a
            # length it counted, so a list once handed out only ever grows.
            run.records = records[:i] + records[i + 1 :]
            return


def _inherit_streams(run: RunRecord) -> None:
    """A reset run starts with the operations it kept: their stream items are its own,
    since its code replays those appends without writing them again."""
    kept: list[tuple[int, StreamAppendOp | StreamCloseOp]] = [
        (op.lsn, op)
        for op in run.ops.values()
        if isinstance(op, StreamAppendOp | StreamCloseOp)
        and op.lsn is not None
        and not op.cancelled
    ]
    for op in run.ops.values():  # and what its steps appended, in their streams
        if not isinstance(op, StepOp):
            continue
        for name, items in (op.streamed or {}).items():
            kept += [(lsn, StreamAppendOp(name, value=item)) for lsn, item in items]
            if op.done and name in (op.owns or ()):
                kept.append((items[-1][0], StreamCloseOp(name)))
    for lsn, op in sorted(kept, key=lambda k: k[0]):
        if isinstance(op, StreamAppendOp):
            run.stream(op.name).items.append((lsn, op.value))
        else:
            run.stream(op.name).closed_lsn = lsn


def _close(run: RunRecord, lsn: int, rec: Record) -> None:
    run.closing = CLOSED_AS[type(rec)]
    run.close_lsn = lsn
    if isinstance(rec, RunCompleted):
        run.result, run.closed_at = rec.result.value, rec.closed_at
    elif isinstance(rec, RunFailed):
        run.failure, run.closed_at = Failure.from_json(rec.failure), rec.closed_at
        run.error = str(run.failure)
    elif isinstance(rec, RunContinuedAsNew):
        run.successor, run.closed_at = rec.new_run_id, rec.closed_at
    elif isinstance(rec, RunTerminated | RunCancelled | RunTimedOut | RunReset):
        run.reason, run.closed_at = rec.reason, rec.closed_at
        run.error = f"{run.closing}: {rec.reason}"
    run.pending.clear()


def _step_completed(run: RunRecord, rec: StepCompleted, lsn: int) -> Op:
    op = run.op_at(rec.seq, StepOp, rec.name)
    op.done, op.ok, op.value = True, True, rec.value.value
    return op


def _step_failed(run: RunRecord, rec: StepFailed, lsn: int) -> Op:
    op = run.op_at(rec.seq, StepOp, rec.name)
    op.done, op.ok, op.failure = True, False, rec.failure
    run.pending.pop(rec.seq, None)
    return op


def _attempt_failed(run: RunRecord, rec: AttemptFailed, lsn: int) -> None:
    op = run.op_at(rec.seq, StepOp, rec.name)
    op.attempts_failed, op.failure = rec.attempt, rec.failure
    if op.first_failed_at is None:
        op.first_failed_at = rec.failed_at
    op.retry_at = rec.retry_at


def _step_paused(run: RunRecord, rec: StepPaused, lsn: int) -> None:
    op = run.op_at(rec.seq, StepOp, rec.name)
    op.attempts_failed, op.failure, op.paused = rec.attempt, rec.failure, True
    run.pending[rec.seq] = op
    # What `describe()` and the CLI show as the reason the run stopped.
    failure = Failure.from_json(rec.failure)
    run.error = f"paused in step {rec.name!r} after attempt {rec.attempt}: {failure}"


def _step_resumed(run: RunRecord, rec: StepResumed, lsn: int) -> Op | None:
    op = run.pending.pop(rec.seq, None)
    if isinstance(op, StepOp):
        op.paused = False
        op.attempts_failed, op.first_failed_at, op.retry_at = 0, None, None
        if isinstance(op, CompletionOp):
            op.attempt = 0  # it issues a new token for the fresh attempt
        if not run.paused_ops():
            run.error = None
    return op


def _value_recorded(run: RunRecord, rec: ValueRecorded, lsn: int) -> None:
    op = run.op_at(rec.seq, ValueOp, rec.name)
    op.done, op.value = True, rec.value.value


def _timer_started(run: RunRecord, rec: TimerStarted, lsn: int) -> None:
    op = run.op_at(rec.seq, TimerOp, rec.name)
    op.fire_at = rec.fire_at
    run.pending[rec.seq] = op


def _wait_started(run: RunRecord, rec: WaitStarted, lsn: int) -> None:
    op = run.op_at(rec.seq, WaitOp, rec.name)
    op.fire_at = rec.deadline
    run.pending[rec.seq] = op


def _resolved(run: RunRecord, rec: TimerFired | WaitCompleted, lsn: int) -> Op | None:
    """TimerFired and WaitCompleted: a pending timer or wait is done."""
    op = run.pending.pop(rec.seq, None) or run.ops.get(rec.seq)
    if op is None:
        return None
    op.done = True
    if isinstance(rec, WaitCompleted) and isinstance(op, WaitOp):
        signal_id = rec.signal_id
        op.signal_id, op.value = signal_id, rec.value.value
        if signal_id is not None:
            run.signals = [s for s in run.signals if s[0] != signal_id]
    return op


def _completion_issued(run: RunRecord, rec: CompletionIssued, lsn: int) -> None:
    op = run.op_at(rec.seq, CompletionOp, rec.name)
    if op.done:
        return  # finished while the token was on its way to the disk: nothing waits
    op.attempt, op.sent = rec.attempt, False
    op.issued += 1
    run.pending[rec.seq] = op


def _completion_sent(run: RunRecord, rec: CompletionSent, lsn: int) -> None:
    op = run.ops.get(rec.seq)
    if isinstance(op, CompletionOp):
        op.sent = True


def _completion_done(run: RunRecord, rec: CompletionDone, lsn: int) -> Op | None:
    op = run.pending.pop(rec.seq, None) or run.ops.get(rec.seq)
    if op is None:
        return None
    op.done, op.ok, op.value, op.failure = True, rec.failure is None, rec.value.value, rec.failure
    return op


def _op_cancelled(run: RunRecord, rec: OpCancelled, lsn: int) -> Op:
    seq = rec.seq
    op = run.op_at(seq, OPS[rec.kind], rec.name)
    op.done, op.ok, op.cancelled = True, False, True
    if isinstance(op, StepOp):
        op.paused = False
    run.pending.pop(seq, None)
    if run.cancel_reason is None or ".u" in seq:  # (an update's op: not the run's cancel)
        op.retired = True  # a losing or abandoned branch: the run's cancel is still to come
    else:
        run.cancel_delivered = True
    return op


def _child_started(run: RunRecord, rec: ChildStarted, lsn: int) -> None:
    op = run.op_at(rec.seq, ChildOp, rec.workflow_id)
    op.peer, op.peer_run, op.workflow = rec.workflow_id, rec.child_run_id, rec.workflow
    op.policy, op.deadline, op.lsn = rec.parent_close, rec.deadline, lsn
    if rec.error is not None:
        op.done, op.ok, op.failure = True, False, rec.error
    else:
        op.value = rec.input.value
        run.pending[rec.seq] = op


def _child_closed(run: RunRecord, rec: ChildClosed, lsn: int) -> Op | None:
    # `child_run_id` is the run that closed: the one started, or the last of the runs
    # it continued as new in.
    op = run.pending.pop(rec.seq, None) or run.ops.get(rec.seq)
    if not isinstance(op, ChildOp):
        return None
    op.done, op.ok, op.status = True, rec.status == Status.COMPLETED, rec.status
    op.value, op.failure = rec.result.value, rec.failure
    return op


def _signal_sent(run: RunRecord, rec: SignalSent, lsn: int) -> Op:
    """One operation, done when recorded."""
    op = run.op_at(rec.seq, SignalSentOp, rec.name)
    op.signal_id, op.value = rec.signal_id, rec.value.value
    return _sent(op, rec.workflow_id, rec.target_run_id, rec.error, lsn)


def _cancel_sent(run: RunRecord, rec: CancelSent, lsn: int) -> Op:
    """One operation, done when recorded."""
    op = run.op_at(rec.seq, CancelSentOp, rec.workflow_id)
    op.value = rec.reason
    return _sent(op, rec.workflow_id, rec.target_run_id, rec.error, lsn)


def _sent(
    op: Peer, target: str, target_run: str | None, error: dict[str, Any] | None, lsn: int
) -> Op:
    op.peer, op.peer_run, op.lsn = target, target_run, lsn
    op.done, op.ok, op.failure = True, error is None, error
    return op


def _step_heartbeat(run: RunRecord, rec: StepHeartbeat, lsn: int) -> None:
    # The op of a first attempt is made here: nothing else is recorded of it until it ends.
    op = run.op_at(rec.seq, StepOp, rec.name)
    op.progress, op.beat_at, op.beats = rec.details.value, rec.beat_at, rec.number


def _attributes_set(run: RunRecord, rec: AttributesSet, lsn: int) -> None:
    op = run.op_at(rec.seq, AttributesOp, "set")
    op.done, op.value = True, rec.attributes
    merge_attributes(run.attributes, rec.attributes)


def _patch_marked(run: RunRecord, rec: PatchMarked, lsn: int) -> None:
    op = run.op_at(rec.seq, PatchOp, rec.patch_id)
    op.done = True


def _stream_appended(run: RunRecord, rec: StreamAppended, lsn: int) -> None:
    item = rec.item.value
    op = run.op_at(rec.seq, StreamAppendOp, rec.name)
    op.done, op.value, op.lsn = True, item, lsn
    run.stream(rec.name).items.append((lsn, item))


def _step_stream_appended(run: RunRecord, rec: StepStreamAppended, lsn: int) -> None:
    name, item = rec.name, rec.item.value
    op = run.op_at(rec.seq, StepOp, rec.step)
    op.streamed = op.streamed or {}
    op.streamed.setdefault(name, []).append((lsn, item))
    if rec.own and name not in (op.owns or ()):
        op.owns = [*(op.owns or ()), name]
    run.stream(name).items.append((lsn, item))


def _stream_closed(run: RunRecord, rec: StreamClosed, lsn: int) -> None:
    op = run.op_at(rec.seq, StreamCloseOp, rec.name)
    op.done, op.lsn = True, lsn
    run.stream(rec.name).closed_lsn = lsn


def _signal_received(run: RunRecord, rec: SignalReceived, lsn: int) -> None:
    run.signals.append((rec.signal_id, rec.name, rec.value.value))
    run.next_signal_id = rec.signal_id + 1


def _cancel_requested(run: RunRecord, rec: CancelRequested, lsn: int) -> None:
    run.cancel_reason = rec.reason


def _run_stuck(run: RunRecord, rec: RunStuck, lsn: int) -> None:
    run.stuck = rec.message
    if run.is_open:
        run.error = rec.message


def _run_unstuck(run: RunRecord, rec: RunUnstuck, lsn: int) -> None:
    if run.stuck is not None and run.is_open:
        run.error = None
    run.stuck = None


def _run_admitted(run: RunRecord, rec: RunAdmitted, lsn: int) -> None:
    run.admitted = True


def _start_debounced(run: RunRecord, rec: StartDebounced, lsn: int) -> None:
    run.input = rec.input.value
    run.origin = {**(run.origin or {}), "begin_at": rec.begin_at}
    run.deadline = rec.deadline


def _race_won(run: RunRecord, rec: RaceWon, lsn: int) -> None:
    run.races[rec.seq] = rec.index


def _update_applied(run: RunRecord, rec: UpdateApplied, lsn: int) -> None:
    update_id = rec.update_id
    if update_id not in run.updates_accepted:  # a plain handler's: applied at once
        log = run.update_log.setdefault(rec.position, [])
        log.append((update_id, rec.name, rec.arg.value))
    run.updates_done[update_id] = (lsn, rec.result.value, rec.failure)
    run.update_lsn = lsn


def _update_accepted(run: RunRecord, rec: UpdateAccepted, lsn: int) -> None:
    run.update_log.setdefault(rec.position, []).append((rec.update_id, rec.name, rec.arg.value))
    run.updates_accepted[rec.update_id] = lsn
    run.update_lsn = lsn


Fold = Callable[[RunRecord, Any, int], "Op | None"]
"""A fold function: the run, a record of the class it is filed under, its lsn."""

OP_RECORDS: dict[type[Record], Fold] = {
    StepCompleted: _step_completed,
    StepFailed: _step_failed,
    AttemptFailed: _attempt_failed,
    StepPaused: _step_paused,
    StepResumed: _step_resumed,
    ValueRecorded: _value_recorded,
    TimerStarted: _timer_started,
    TimerFired: _resolved,
    WaitStarted: _wait_started,
    WaitCompleted: _resolved,
    OpCancelled: _op_cancelled,
    CompletionIssued: _completion_issued,
    CompletionSent: _completion_sent,
    CompletionDone: _completion_done,
    ChildClosed: _child_closed,
    PatchMarked: _patch_marked,
    AttributesSet: _attributes_set,
    StepHeartbeat: _step_heartbeat,
}

# The records of a run that resolve none of its operations' waits by themselves.
RUN_RECORDS: dict[type[Record], Fold] = {
    SignalReceived: _signal_received,
    CancelRequested: _cancel_requested,
    RunStuck: _run_stuck,
    RunUnstuck: _run_unstuck,
    RunAdmitted: _run_admitted,
    StartDebounced: _start_debounced,
    RaceWon: _race_won,
    UpdateApplied: _update_applied,
    UpdateAccepted: _update_accepted,
    SignalSent: _signal_sent,
    CancelSent: _cancel_sent,
    ChildStarted: _child_started,
    StreamAppended: _stream_appended,
    StepStreamAppended: _step_stream_appended,
    StreamClosed: _stream_closed,
}
