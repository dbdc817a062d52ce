"""Stopping a run's code from outside it: cancels, and the journal lost.

A cancel requested of an open run is recorded once (`CancelRequested`) and
then delivered wherever the run's code waits (`interrupt`): each pending
operation it could wait on is resolved as cancelled (`OpCancelled`) and the
step tasks still running are cancelled, so the code sees `Cancelled` where
it stands and decides how to close. A stuck run, whose code cannot take it,
closes as cancelled at once.

When the journal fails (fail-stop), `journal_lost` stops every run's code
at once and fails the result waiters: nothing more is recorded.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from fusee_runtime.engine.state import Run, Status
from fusee_runtime.errors import JournalFailed
from fusee_runtime.model.op_records import OpCancelled
from fusee_runtime.model.ops import ChildOp, CompletionOp
from fusee_runtime.model.records import CancelRequested, RunCancelled

if TYPE_CHECKING:
    from fusee_runtime.engine.driver import Driver

log = logging.getLogger("fusee")


def interrupt(driver: Driver, run: Run) -> None:
    """Delivers a requested cancel wherever the run's code is waiting."""
    execution = run.live.execution
    running = execution.step_tasks if execution is not None else {}
    resolved = set()
    woken = False
    for seq, op in list(run.pending.items()):
        if ".u" in seq:
            continue  # an update's: the cancel lands in the code, not in its handler
        if isinstance(op, CompletionOp) and not op.sent and seq in running:
            continue  # its `send` runs: the task's cancel delivers it, as for a step
        if isinstance(op, ChildOp):
            # The child runs on (its parent's close applies `parent_close`): code
            # waiting for its result is woken, and the cancel lands there.
            fut = run.live.waiters.pop(seq, None)
            if fut is not None and not fut.done():
                fut.set_result(None)
            woken = True
            continue
        driver.append(run, OpCancelled(run.run_id, seq, op.kind, op.name))
        resolved.add(seq)
    if woken and not resolved and run.live.parked:
        driver.resolved(run, "")  # a parked parent replays up to its wait, and takes it there
    # A paused step just resolved above raises Cancelled by itself; a task
    # cancel on top would arrive as a bare CancelledError.
    for seq, task in list(running.items()):
        if seq not in resolved and ".u" not in seq:
            task.cancel()


def request_cancel(driver: Driver, run: Run, reason: str) -> None:
    """Records a cancel of open `run` (once: a second request changes nothing) and
    delivers it where its code waits; a stuck run, whose code cannot take it, and a
    run whose delayed start has not come or that waits in its queue, whose code never
    ran, close as cancelled at once (a reset run waiting in its queue, whose journal
    holds work, is let in to take the cancel and run its compensations)."""
    if run.cancel_reason is not None or not run.is_open:
        return
    driver.append(run, CancelRequested(run.run_id, reason, driver.clock.now()))
    if run.status == Status.QUEUED and run.ops:
        # A reset run waiting in its queue: its journal holds work whose compensations
        # its code must run. It goes in now, whatever its queue's size, to take the cancel.
        driver.limits.queues.let_in_now(run)
    elif run.status in (Status.STUCK, Status.SCHEDULED, Status.QUEUED):
        driver.close_run(run, RunCancelled(run.run_id, reason, driver.clock.now()))
    else:
        interrupt(driver, run)


def journal_lost(driver: Driver, failed: JournalFailed) -> None:
    """The journal failed (fail-stop): nothing more is recorded, and on PostgreSQL
    another process may drive it now. Result waiters get `failed`, and the runs'
    code stops at once, cancelling the async step attempts in flight; one in a
    thread cannot be stopped, and its result is dropped (`Ctx.fence` fences it)."""
    driver.runs.fail_result_waiters(lambda run: failed)
    in_flight = driver.workers.attempts
    for run in driver.runs.by_run_id.values():
        if run.live.task is not None and not run.live.task.done():
            run.live.task.cancel()
    if in_flight:
        in_threads = driver.workers.in_threads
        log.error(
            "fusee: the journal failed: cancelled %d async step attempt(s) in flight; "
            "%d in threads run on and their results are dropped",
            in_flight - in_threads,
            in_threads,
        )
