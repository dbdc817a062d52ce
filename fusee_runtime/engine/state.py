"""The in-memory state of runs, rebuilt from the journal on open.

`Run` holds what the journal says of one run: its identity, each operation
recorded so far by `seq`, and how it closed. `apply` folds one record into
it; the engine calls it both for records read on open and for records it
appends, so memory and journal cannot tell different stories.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fusee_runtime.errors import Failure
from fusee_runtime.journal.records import R


class Status(enum.StrEnum):
    """A run's status; the values are the lowercase names."""

    RUNNING = "running"
    PARKED = "parked"
    PAUSED = "paused"
    STUCK = "stuck"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    TERMINATED = "terminated"
    CONTINUED_AS_NEW = "continued_as_new"
    RESET = "reset"

    @property
    def is_open(self) -> bool:
        return self in (Status.RUNNING, Status.PARKED, Status.PAUSED, Status.STUCK)


@dataclass(frozen=True)
class RunInfo:
    """One run, as `describe()` and `list()` show it."""

    id: str
    run_id: str
    workflow: str
    status: Status
    started_at: datetime
    closed_at: datetime | None
    error: str | None
    attributes: dict[str, Any]


@dataclass
class Op:
    """What the journal holds of one operation (a step or a recorded value)."""

    kind: str  # "step" or "value"
    name: str
    attempts_failed: int = 0
    first_failed_at: float | None = None
    retry_at: float | None = None
    done: bool = False
    ok: bool = True
    value: Any = None
    failure: dict[str, Any] | None = None


def utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


@dataclass
class Run:
    """One run of a workflow id."""

    run_id: str
    workflow_id: str
    workflow: str
    input: Any
    started_at: float
    start_lsn: int
    ops: dict[int, Op] = field(default_factory=dict)
    records: list[tuple[int, list[Any]]] = field(default_factory=list)
    last_lsn: int = 0
    # How it closed, as recorded; `status` turns closed once that is durable.
    closing: Status | None = None
    close_lsn: int | None = None
    status: Status = Status.RUNNING
    result: Any = None
    failure: Failure | None = None
    reason: str | None = None
    closed_at: float | None = None
    error: str | None = None
    task: asyncio.Task[None] | None = None
    closed: asyncio.Future[None] | None = None
    # What the run is doing now, for people (`fusee start` shows it).
    current: str | None = None

    def apply(self, lsn: int, rec: list[Any]) -> None:
        """Folds one record of this run into its state."""
        kind = rec[0]
        self.records.append((lsn, rec))
        self.last_lsn = lsn
        if kind in (R.StepCompleted, R.StepFailed, R.AttemptFailed):
            _, _, seq, name = rec[:4]
            op = self.ops.get(seq)
            if op is None:
                op = self.ops[seq] = Op("step", name)
            if kind == R.StepCompleted:
                op.done, op.ok, op.value = True, True, rec[4]
            elif kind == R.StepFailed:
                op.done, op.ok, op.failure = True, False, rec[4]
            else:
                op.attempts_failed = rec[4]
                op.failure = rec[5]
                if op.first_failed_at is None:
                    op.first_failed_at = rec[6]
                op.retry_at = rec[7]
        elif kind == R.ValueRecorded:
            _, _, seq, name, value = rec
            self.ops[seq] = Op("value", name, done=True, value=value)
        elif kind == R.RunCompleted:
            self._close(lsn, Status.COMPLETED, rec[3])
            self.result = rec[2]
        elif kind == R.RunFailed:
            self._close(lsn, Status.FAILED, rec[3])
            self.failure = Failure.from_json(rec[2])
            self.error = str(self.failure)
        elif kind == R.RunTerminated:
            self._close(lsn, Status.TERMINATED, rec[3])
            self.reason = rec[2]
            self.error = f"terminated: {rec[2]}"

    def _close(self, lsn: int, status: Status, closed_at: float) -> None:
        self.closing = status
        self.close_lsn = lsn
        self.closed_at = closed_at

    @property
    def is_open(self) -> bool:
        return self.closing is None

    def info(self) -> RunInfo:
        return RunInfo(
            id=self.workflow_id,
            run_id=self.run_id,
            workflow=self.workflow,
            status=self.status,
            started_at=utc(self.started_at),
            closed_at=utc(self.closed_at) if self.closed_at and not self.status.is_open else None,
            error=self.error,
            attributes={},
        )
