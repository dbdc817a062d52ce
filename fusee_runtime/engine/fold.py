"""How each record of a run folds into its state (`Run.apply`).

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
from typing import TYPE_CHECKING, Any

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
    CancelRequested,
    Record,
    RunStuck,
    RunUnstuck,
    SignalReceived,
    UpdateAccepted,
    UpdateApplied,
)
from fusee_runtime.model.run import Status

if TYPE_CHECKING:
    from fusee_runtime.engine.state import Run


def _step_completed(run: Run, rec: StepCompleted, lsn: int) -> Op:
    op = run.op_at(rec.seq, StepOp, rec.name)
    op.done, op.ok, op.value = True, True, rec.value.value
    return op


def _step_failed(run: Run, rec: StepFailed, lsn: int) -> Op:
    op = run.op_at(rec.seq, StepOp, rec.name)
    op.done, op.ok, op.failure = True, False, rec.failure
    run.pending.pop(rec.seq, None)
    return op


def _attempt_failed(run: Run, rec: AttemptFailed, lsn: int) -> None:
    op = run.op_at(rec.seq, StepOp, rec.name)
    op.attempts_failed, op.failure = rec.attempt, rec.failure
    if op.first_failed_at is None:
        op.first_failed_at = rec.failed_at
    op.retry_at = rec.retry_at


def _step_paused(run: Run, rec: StepPaused, lsn: int) -> None:
    op = run.op_at(rec.seq, StepOp, rec.name)
    op.attempts_failed, op.failure, op.paused = rec.attempt, rec.failure, True
    run.pending[rec.seq] = op
    # What `describe()` and the CLI show as the reason the run stopped.
    failure = Failure.from_json(rec.failure)
    run.error = f"paused in step {rec.name!r} after attempt {rec.attempt}: {failure}"


def _step_resumed(run: Run, rec: StepResumed, lsn: int) -> Op | None:
    op = run.pending.pop(rec.seq, None)
    if isinstance(op, StepOp):
        op.paused = False
        op.attempts_failed, op.first_failed_at, op.retry_at = 0, None, None
        if isinstance(op, CompletionOp):
            op.attempt = 0  # it issues a new token for the fresh attempt
        if not run.paused_ops():
            run.error = None
    return op


def _value_recorded(run: Run, rec: ValueRecorded, lsn: int) -> None:
    op = run.op_at(rec.seq, ValueOp, rec.name)
    op.done, op.value = True, rec.value.value


def _timer_started(run: Run, rec: TimerStarted, lsn: int) -> None:
    op = run.op_at(rec.seq, TimerOp, rec.name)
    op.fire_at = rec.fire_at
    run.pending[rec.seq] = op


def _wait_started(run: Run, rec: WaitStarted, lsn: int) -> None:
    op = run.op_at(rec.seq, WaitOp, rec.name)
    op.fire_at = rec.deadline
    run.pending[rec.seq] = op


def _resolved(run: Run, rec: TimerFired | WaitCompleted, lsn: int) -> Op | None:
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


def _completion_issued(run: Run, rec: CompletionIssued, lsn: int) -> None:
    op = run.op_at(rec.seq, CompletionOp, rec.name)
    if op.done:
        return  # finished while the token was on its way to the disk: nothing waits
    op.attempt, op.sent = rec.attempt, False
    op.issued += 1
    run.pending[rec.seq] = op


def _completion_sent(run: Run, rec: CompletionSent, lsn: int) -> None:
    op = run.ops.get(rec.seq)
    if isinstance(op, CompletionOp):
        op.sent = True


def _completion_done(run: Run, rec: CompletionDone, lsn: int) -> Op | None:
    op = run.pending.pop(rec.seq, None) or run.ops.get(rec.seq)
    if op is None:
        return None
    op.done, op.ok, op.value, op.failure = True, rec.failure is None, rec.value.value, rec.failure
    return op


def _op_cancelled(run: Run, rec: OpCancelled, lsn: int) -> Op:
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


def _child_started(run: Run, rec: ChildStarted, lsn: int) -> None:
    op = run.op_at(rec.seq, ChildOp, rec.workflow_id)
    op.peer, op.peer_run, op.workflow = rec.workflow_id, rec.child_run_id, rec.workflow
    op.policy, op.deadline, op.lsn = rec.parent_close, rec.deadline, lsn
    if rec.error is not None:
        op.done, op.ok, op.failure = True, False, rec.error
    else:
        op.value = rec.input.value
        run.pending[rec.seq] = op


def _child_closed(run: Run, rec: ChildClosed, lsn: int) -> Op | None:
    # `child_run_id` is the run that closed: the one started, or the last of the runs
    # it continued as new in.
    op = run.pending.pop(rec.seq, None) or run.ops.get(rec.seq)
    if not isinstance(op, ChildOp):
        return None
    op.done, op.ok, op.status = True, rec.status == Status.COMPLETED, rec.status
    op.value, op.failure = rec.result.value, rec.failure
    return op


def _signal_sent(run: Run, rec: SignalSent, lsn: int) -> Op:
    """One operation, done when recorded."""
    op = run.op_at(rec.seq, SignalSentOp, rec.name)
    op.signal_id, op.value = rec.signal_id, rec.value.value
    return _sent(op, rec.workflow_id, rec.target_run_id, rec.error, lsn)


def _cancel_sent(run: Run, rec: CancelSent, lsn: int) -> Op:
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


def _step_heartbeat(run: Run, rec: StepHeartbeat, lsn: int) -> None:
    # The op of a first attempt is made here: nothing else is recorded of it until it ends.
    op = run.op_at(rec.seq, StepOp, rec.name)
    op.progress, op.beat_at, op.beats = rec.details.value, rec.beat_at, rec.number


def _attributes_set(run: Run, rec: AttributesSet, lsn: int) -> None:
    op = run.op_at(rec.seq, AttributesOp, "set")
    op.done, op.value = True, rec.attributes
    merge_attributes(run.attributes, rec.attributes)


def _patch_marked(run: Run, rec: PatchMarked, lsn: int) -> None:
    op = run.op_at(rec.seq, PatchOp, rec.patch_id)
    op.done = True


def _stream_appended(run: Run, rec: StreamAppended, lsn: int) -> None:
    item = rec.item.value
    op = run.op_at(rec.seq, StreamAppendOp, rec.name)
    op.done, op.value, op.lsn = True, item, lsn
    run.stream(rec.name).items.append((lsn, item))


def _step_stream_appended(run: Run, rec: StepStreamAppended, lsn: int) -> None:
    name, item = rec.name, rec.item.value
    op = run.op_at(rec.seq, StepOp, rec.step)
    op.streamed = op.streamed or {}
    op.streamed.setdefault(name, []).append((lsn, item))
    if rec.own and name not in (op.owns or ()):
        op.owns = [*(op.owns or ()), name]
    run.stream(name).items.append((lsn, item))


def _stream_closed(run: Run, rec: StreamClosed, lsn: int) -> None:
    op = run.op_at(rec.seq, StreamCloseOp, rec.name)
    op.done, op.lsn = True, lsn
    run.stream(rec.name).closed_lsn = lsn


def _signal_received(run: Run, rec: SignalReceived, lsn: int) -> None:
    run.signals.append((rec.signal_id, rec.name, rec.value.value))
    run.next_signal_id = rec.signal_id + 1


def _cancel_requested(run: Run, rec: CancelRequested, lsn: int) -> None:
    run.cancel_reason = rec.reason


def _run_stuck(run: Run, rec: RunStuck, lsn: int) -> None:
    run.stuck = rec.message
    if run.is_open:
        run.status, run.error, run.current = Status.STUCK, rec.message, None


def _run_unstuck(run: Run, rec: RunUnstuck, lsn: int) -> None:
    run.stuck = None
    if run.status == Status.STUCK:
        run.status, run.error = Status.RUNNING, None


def _race_won(run: Run, rec: RaceWon, lsn: int) -> None:
    run.races[rec.seq] = rec.index


def _update_applied(run: Run, rec: UpdateApplied, lsn: int) -> None:
    update_id = rec.update_id
    if update_id not in run.updates_accepted:  # a plain handler's: applied at once
        log = run.update_log.setdefault(rec.position, [])
        log.append((update_id, rec.name, rec.arg.value))
    run.updates_done[update_id] = (lsn, rec.result.value, rec.failure)
    run.update_lsn = lsn
    waiter = run.update_waiters.pop(update_id, None)
    if waiter is not None and not waiter.done():
        waiter.set_result(lsn)


def _update_accepted(run: Run, rec: UpdateAccepted, lsn: int) -> None:
    run.update_log.setdefault(rec.position, []).append((rec.update_id, rec.name, rec.arg.value))
    run.updates_accepted[rec.update_id] = lsn
    run.update_lsn = lsn


Fold = Callable[["Run", Any, int], "Op | None"]
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
