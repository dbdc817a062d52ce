"""How each record of a run folds into its state (`Run.apply`).

`OP_RECORDS` holds the records that begin, advance or end one of the run's
operations (by its `seq`): each returns the op it ended, if any. `RUN_RECORDS`
holds the records of the run as a whole (signals, a cancel, updates, streams,
children and messages it sent), each called with the record's lsn.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fusee_runtime.attributes import merge_attributes
from fusee_runtime.errors import Failure
from fusee_runtime.journal.records import R
from fusee_runtime.model.run import Status

if TYPE_CHECKING:
    from fusee_runtime.engine.state import Op, Run


def _step_completed(run: Run, rec: list[Any]) -> Op:
    op = run.op_at(rec[2], "step", rec[3])
    op.done, op.ok, op.value = True, True, rec[4]
    return op


def _step_failed(run: Run, rec: list[Any]) -> Op:
    op = run.op_at(rec[2], "step", rec[3])
    op.done, op.ok, op.failure = True, False, rec[4]
    run.pending.pop(rec[2], None)
    return op


def _attempt_failed(run: Run, rec: list[Any]) -> None:
    op = run.op_at(rec[2], "step", rec[3])
    op.attempts_failed, op.failure = rec[4], rec[5]
    if op.first_failed_at is None:
        op.first_failed_at = rec[6]
    op.retry_at = rec[7]


def _step_paused(run: Run, rec: list[Any]) -> None:
    op = run.op_at(rec[2], "step", rec[3])
    op.attempts_failed, op.failure, op.paused = rec[4], rec[5], True
    run.pending[rec[2]] = op
    # What `describe()` and the CLI show as the reason the run stopped.
    run.error = f"paused in step {rec[3]!r} after attempt {rec[4]}: {Failure.from_json(rec[5])}"


def _step_resumed(run: Run, rec: list[Any]) -> Op | None:
    op = run.pending.pop(rec[2], None)
    if op is not None:
        op.paused = False
        op.attempts_failed, op.first_failed_at, op.retry_at = 0, None, None
        op.attempt = 0  # an `await_completion` issues a new token for the fresh attempt
        if not run.paused_ops():
            run.error = None
    return op


def _value_recorded(run: Run, rec: list[Any]) -> None:
    op = run.op_at(rec[2], "value", rec[3])
    op.done, op.value = True, rec[4]


def _timer_started(run: Run, rec: list[Any]) -> None:
    op = run.op_at(rec[2], "timer", rec[3])
    op.fire_at = rec[4]
    run.pending[rec[2]] = op


def _wait_started(run: Run, rec: list[Any]) -> None:
    op = run.op_at(rec[2], "wait", rec[3])
    op.fire_at = rec[4]
    run.pending[rec[2]] = op


def _resolved(run: Run, rec: list[Any]) -> Op | None:
    """TimerFired and WaitCompleted: a pending timer or wait is done."""
    op = run.pending.pop(rec[2], None) or run.ops.get(rec[2])
    if op is None:
        return None
    op.done = True
    if rec[0] == R.WaitCompleted:
        signal_id = rec[3]
        op.signal_id, op.value = signal_id, rec[4]
        if signal_id is not None:
            run.signals = [s for s in run.signals if s[0] != signal_id]
    return op


def _completion_issued(run: Run, rec: list[Any]) -> None:
    op = run.op_at(rec[2], "completion", rec[3])
    if op.done:
        return  # finished while the token was on its way to the disk: nothing waits
    op.attempt, op.sent = rec[4], False
    op.issued += 1
    run.pending[rec[2]] = op


def _completion_sent(run: Run, rec: list[Any]) -> None:
    op = run.ops.get(rec[2])
    if op is not None:
        op.sent = True


def _completion_done(run: Run, rec: list[Any]) -> Op | None:
    op = run.pending.pop(rec[2], None) or run.ops.get(rec[2])
    if op is None:
        return None
    op.done, op.ok, op.value, op.failure = True, rec[4] is None, rec[3], rec[4]
    return op


def _op_cancelled(run: Run, rec: list[Any]) -> Op:
    _, _, seq, kind, name = rec
    op = run.op_at(seq, kind, name)
    op.done, op.ok, op.cancelled, op.paused = True, False, True, False
    run.pending.pop(seq, None)
    if run.cancel_reason is None or ".u" in seq:  # (an update's op: not the run's cancel)
        op.retired = True  # a losing or abandoned branch: the run's cancel is still to come
    else:
        run.cancel_delivered = True
    return op


def _child_started(run: Run, rec: list[Any], lsn: int) -> None:
    _, _, seq, child_id, child_run_id, workflow, input, deadline, policy, error, _ = rec
    op = run.op_at(seq, "child", child_id)
    op.peer, op.peer_run, op.workflow, op.policy = child_id, child_run_id, workflow, policy
    op.deadline, op.lsn = deadline, lsn
    if error is not None:
        op.done, op.ok, op.failure = True, False, error
    else:
        op.value = input
        run.pending[seq] = op


def _child_closed(run: Run, rec: list[Any]) -> Op | None:
    # `child_run_id` is the run that closed: the one started, or the last of the runs
    # it continued as new in.
    _, _, seq, _, status, result, failure, _ = rec
    op = run.pending.pop(seq, None) or run.ops.get(seq)
    if op is None or op.kind != "child":
        return None
    op.done, op.ok, op.status = True, status == Status.COMPLETED, status
    op.value, op.failure = result, failure
    return op


def _sent(run: Run, rec: list[Any], lsn: int) -> Op:
    """SignalSent and CancelSent: one operation, done when recorded."""
    if rec[0] == R.SignalSent:
        _, _, seq, target, target_run, signal_id, name, value, error, _ = rec
        op = run.op_at(seq, "signal_workflow", name)
        op.signal_id, op.value = signal_id, value
    else:
        _, _, seq, target, target_run, reason, error, _ = rec
        op = run.op_at(seq, "cancel_workflow", target)
        op.value = reason
    op.peer, op.peer_run, op.lsn = target, target_run, lsn
    op.done, op.ok, op.failure = True, error is None, error
    return op


def _step_heartbeat(run: Run, rec: list[Any]) -> None:
    # The op of a first attempt is made here: nothing else is recorded of it until it ends.
    op = run.op_at(rec[2], "step", rec[3])
    op.progress, op.beat_at, op.beats = rec[5], rec[6], rec[7]


def _attributes_set(run: Run, rec: list[Any]) -> None:
    op = run.op_at(rec[2], "attributes", "set")
    op.done, op.value = True, rec[3]
    merge_attributes(run.attributes, rec[3])


def _patch_marked(run: Run, rec: list[Any]) -> None:
    op = run.op_at(rec[2], "patch", rec[3])
    op.done = True


def _stream_appended(run: Run, rec: list[Any], lsn: int) -> None:
    _, _, seq, name, item = rec
    op = run.op_at(seq, "stream.append", name)
    op.done, op.value, op.lsn = True, item, lsn
    run.stream(name).items.append((lsn, item))


def _step_stream_appended(run: Run, rec: list[Any], lsn: int) -> None:
    _, _, seq, step, name, _, item, own = rec
    op = run.op_at(seq, "step", step)
    op.streamed = op.streamed or {}
    op.streamed.setdefault(name, []).append((lsn, item))
    if own and name not in (op.owns or ()):
        op.owns = [*(op.owns or ()), name]
    run.stream(name).items.append((lsn, item))


def _stream_closed(run: Run, rec: list[Any], lsn: int) -> None:
    _, _, seq, name = rec
    op = run.op_at(seq, "stream.close", name)
    op.done, op.lsn = True, lsn
    run.stream(name).closed_lsn = lsn


def _signal_received(run: Run, rec: list[Any], lsn: int) -> None:
    _, _, signal_id, name, value, _ = rec
    run.signals.append((signal_id, name, value))
    run.next_signal_id = signal_id + 1


def _cancel_requested(run: Run, rec: list[Any], lsn: int) -> None:
    run.cancel_reason = rec[2]


def _run_stuck(run: Run, rec: list[Any], lsn: int) -> None:
    run.stuck = rec[2]
    if run.is_open:
        run.status, run.error, run.current = Status.STUCK, rec[2], None


def _run_unstuck(run: Run, rec: list[Any], lsn: int) -> None:
    run.stuck = None
    if run.status == Status.STUCK:
        run.status, run.error = Status.RUNNING, None


def _race_won(run: Run, rec: list[Any], lsn: int) -> None:
    run.races[rec[2]] = rec[3]


def _update_applied(run: Run, rec: list[Any], lsn: int) -> None:
    _, _, update_id, name, arg, position, result, failure, _ = rec
    if update_id not in run.updates_accepted:  # a plain handler's: applied at once
        run.update_log.setdefault(position, []).append((update_id, name, arg))
    run.updates_done[update_id] = (lsn, result, failure)
    run.update_lsn = lsn
    waiter = run.update_waiters.pop(update_id, None)
    if waiter is not None and not waiter.done():
        waiter.set_result(lsn)


def _update_accepted(run: Run, rec: list[Any], lsn: int) -> None:
    _, _, update_id, name, arg, position, _ = rec
    run.update_log.setdefault(position, []).append((update_id, name, arg))
    run.updates_accepted[update_id] = lsn
    run.update_lsn = lsn


OP_RECORDS: dict[int, Callable[[Run, list[Any]], Op | None]] = {
    R.StepCompleted: _step_completed,
    R.StepFailed: _step_failed,
    R.AttemptFailed: _attempt_failed,
    R.StepPaused: _step_paused,
    R.StepResumed: _step_resumed,
    R.ValueRecorded: _value_recorded,
    R.TimerStarted: _timer_started,
    R.TimerFired: _resolved,
    R.WaitStarted: _wait_started,
    R.WaitCompleted: _resolved,
    R.OpCancelled: _op_cancelled,
    R.CompletionIssued: _completion_issued,
    R.CompletionSent: _completion_sent,
    R.CompletionDone: _completion_done,
    R.ChildClosed: _child_closed,
    R.PatchMarked: _patch_marked,
    R.AttributesSet: _attributes_set,
    R.StepHeartbeat: _step_heartbeat,
}

# The records of a run that resolve none of its operations' waits by themselves.
RUN_RECORDS: dict[int, Callable[[Run, list[Any], int], Op | None]] = {
    R.SignalReceived: _signal_received,
    R.CancelRequested: _cancel_requested,
    R.RunStuck: _run_stuck,
    R.RunUnstuck: _run_unstuck,
    R.RaceWon: _race_won,
    R.UpdateApplied: _update_applied,
    R.UpdateAccepted: _update_accepted,
    R.SignalSent: _sent,
    R.CancelSent: _sent,
    R.ChildStarted: _child_started,
    R.StreamAppended: _stream_appended,
    R.StepStreamAppended: _step_stream_appended,
    R.StreamClosed: _stream_closed,
}
