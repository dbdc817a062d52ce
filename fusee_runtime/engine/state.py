"""The engine's runs: what the journal says of each (`RunRecord`), and what the
engine does with it now (`run.live`).

`Run.apply` folds one record into the run (`fusee_runtime.model.fold`), then
tells the live callers what it means to them (an update applied, a close).
`Run.status` is read from facts, never assigned: the close once durable, a stop
(stuck), a paused step, a park.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fusee_runtime.engine.live import Live
from fusee_runtime.engine.waits import utc, waiting
from fusee_runtime.model.fold import apply
from fusee_runtime.model.ops import Op, StepOp
from fusee_runtime.model.records import CLOSED_AS, Record, RunStuck, UpdateApplied
from fusee_runtime.model.run import RunInfo, RunRecord, Stream, top
from fusee_runtime.model.status import Status

__all__ = ["Op", "Run", "RunInfo", "Status", "Stream", "top"]

# The records that mean something to what the engine does with a run now.
_LIVE_MEANING = frozenset({UpdateApplied, RunStuck, *CLOSED_AS})


@dataclass
class Run(RunRecord):
    """One run of a workflow id: its record, and `live`, what this engine does with it."""

    live: Live = field(default_factory=Live)

    def apply(self, lsn: int, rec: Record) -> Op | None:
        """Folds one record of this run into it; returns the op it resolved, if any."""
        op = apply(self, lsn, rec)
        if type(rec) in _LIVE_MEANING:
            self._meant(lsn, rec)
        return op

    def _meant(self, lsn: int, rec: Record) -> None:
        live = self.live
        if isinstance(rec, UpdateApplied):
            waiter = live.update_waiters.pop(rec.update_id, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(lsn)
        elif isinstance(rec, RunStuck):
            if self.is_open:
                live.current = None
        else:  # a close: their handlers stop here (0, not applied)
            live.stop_update_waiters()

    @property
    def status(self) -> Status:
        """Where the run is, from the facts in this order: its close once durable, a
        delayed start not begun, a queue not letting it in, a stop (recorded, or not
        recordable), a paused step, a park (or every step in flight waiting out a
        retry's backoff: it waits on the clock alone), else running."""
        live = self.live
        closing = self.closing
        if closing is not None and live.close_durable:
            return closing
        if live.scheduled:
            return Status.SCHEDULED
        if live.queued is not None:
            return Status.QUEUED
        if self.stuck is not None or live.stuck is not None:
            return Status.STUCK
        for op in self.pending.values():
            if isinstance(op, StepOp) and op.paused:
                return Status.PAUSED
        if live.shown_parked:
            return Status.PARKED
        execution = live.execution
        if execution is not None and 0 < execution.busy == execution.backing_off:
            return Status.PARKED  # every step in flight waits out a retry's backoff
        return Status.RUNNING

    def info(self) -> RunInfo:
        status = self.status
        closed = not status.is_open
        return RunInfo(
            id=self.workflow_id,
            run_id=self.run_id,
            workflow=self.workflow,
            status=status,
            started_at=utc(self.started_at),
            closed_at=utc(self.closed_at) if self.closed_at and closed else None,
            # Why it closed shows once the close is durable, with the closed status.
            error=self.error if self.closing is None or closed else None,
            attributes=dict(self.attributes),
            failure=self.failure.to_json() if self.failure and closed else None,
            waiting=() if closed else waiting(self),
            parent=(self.parent["id"], self.parent["run_id"]) if self.parent else None,
        )
