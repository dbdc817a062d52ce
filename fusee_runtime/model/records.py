"""The journal's records, typed: one frozen, slotted dataclass per record type.

A record says what happened, in the past tense. On disk it is a JSON array:
its type code (`R`, never renumbered), then its fields in the order its class
declares them; the codec is the only place that knows it, and it changes no
byte of what the journal holds. A value of the user's (an
input, a step's result, a signal's value) is a `Payload`: the JSON it encodes
to, encoded once when it is recorded, and decoded only when read
(`model/payload.py`). `model/codec.py` turns records into bytes and back.

The second field is the `run_id` of the run the record belongs to (an `OfRun`); the
records of cron schedules have the workflow's name there, and `LimitSet` a limit's.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar, dataclass_transform

from fusee_runtime.model.payload import Payload
from fusee_runtime.model.status import Status

Instant = float
"""Unix seconds."""
Seq = str
"""An operation's number: "3", "4.0.1" (a branch of a group), "3.u1.2" (an update's)."""
FailureJson = dict[str, Any]
"""A recorded failure, as `Failure.to_json` writes it."""


class R(enum.IntEnum):
    """Record type codes. Never renumber: they are on disk."""

    RunStarted = 1
    StepCompleted = 2
    StepFailed = 3
    AttemptFailed = 4
    ValueRecorded = 5
    RunCompleted = 6
    RunFailed = 7
    RunTerminated = 8
    TimerStarted = 9
    TimerFired = 10
    SignalReceived = 11
    WaitStarted = 12
    WaitCompleted = 13
    StepPaused = 14
    StepResumed = 15
    CancelRequested = 16
    OpCancelled = 17
    RunCancelled = 18
    RunTimedOut = 19
    RunReset = 20
    RunContinuedAsNew = 21
    RaceWon = 22
    StreamAppended = 23
    StreamClosed = 24
    CompletionIssued = 25
    CompletionSent = 26
    CompletionDone = 27
    ScheduleArmed = 28
    ScheduleFired = 29
    SchedulePaused = 30
    UpdateApplied = 31
    RunStuck = 32
    RunUnstuck = 33
    ChildStarted = 34
    ChildClosed = 35
    SignalSent = 36
    CancelSent = 37
    PatchMarked = 38
    AttributesSet = 39
    StepHeartbeat = 40
    LimitSet = 41
    StepStreamAppended = 42
    UpdateAccepted = 43
    ScheduleSet = 44
    ScheduleDeleted = 45
    RateTaken = 46
    RateSet = 47
    RunAdmitted = 48
    QueueSet = 49
    StartDebounced = 50


_R = TypeVar("_R")


@dataclass_transform(frozen_default=True)
def record(cls: type[_R]) -> type[_R]:
    """Makes `cls` a record class: a slotted dataclass, frozen to the type checker.

    Not frozen at run time: a frozen dataclass's `__init__` sets each field through
    `object.__setattr__`, four times the cost of a plain slotted one (0.73 against
    0.18 us for a `StepCompleted`), and a record is made for every step. mypy refuses
    any assignment to a field (`dataclass_transform(frozen_default=True)`).
    """
    return dataclass(slots=True)(cls)


@record
class Record:
    """What every record is: of one type (`code`), its fields in order."""

    code: ClassVar[R]


@record
class OfRun(Record):
    """A record of one run: its `run_id` is its first field."""

    run_id: str


@record
class RunStarted(OfRun):
    code: ClassVar[R] = R.RunStarted

    workflow_id: str
    workflow: str
    input: Payload
    started_at: Instant
    deadline: Instant | None
    origin: dict[str, Any] | None


@record
class RunCompleted(OfRun):
    code: ClassVar[R] = R.RunCompleted

    result: Payload
    closed_at: Instant


@record
class RunFailed(OfRun):
    code: ClassVar[R] = R.RunFailed

    failure: FailureJson
    closed_at: Instant


@record
class RunTerminated(OfRun):
    code: ClassVar[R] = R.RunTerminated

    reason: str
    closed_at: Instant


@record
class SignalReceived(OfRun):
    code: ClassVar[R] = R.SignalReceived

    signal_id: int
    name: str
    value: Payload
    received_at: Instant


@record
class CancelRequested(OfRun):
    code: ClassVar[R] = R.CancelRequested

    reason: str
    requested_at: Instant


@record
class RunCancelled(OfRun):
    code: ClassVar[R] = R.RunCancelled

    reason: str
    closed_at: Instant


@record
class RunTimedOut(OfRun):
    code: ClassVar[R] = R.RunTimedOut

    reason: str
    closed_at: Instant


@record
class RunReset(OfRun):
    code: ClassVar[R] = R.RunReset

    reason: str
    closed_at: Instant


@record
class RunContinuedAsNew(OfRun):
    code: ClassVar[R] = R.RunContinuedAsNew

    new_run_id: str
    input: Payload
    closed_at: Instant


@record
class ScheduleArmed(Record):
    """Cron schedules belong to no run: the second field of a schedule's records is its
    name (a schedule declared by `@workflow(cron=...)` is named after its workflow)."""

    code: ClassVar[R] = R.ScheduleArmed

    workflow: str
    cron: str
    timezone: str
    armed_at: Instant


@record
class ScheduleFired(Record):
    code: ClassVar[R] = R.ScheduleFired

    workflow: str
    instant: Instant
    outcome: str
    workflow_id: str | None
    at: Instant


@record
class SchedulePaused(Record):
    code: ClassVar[R] = R.SchedulePaused

    workflow: str
    paused: bool
    at: Instant


@record
class ScheduleSet(Record):
    """A schedule made, or changed, at run time (`fusee schedules create`): its runs are of
    `workflow`, with `input` (the instant when it is null, as a declared schedule's)."""

    code: ClassVar[R] = R.ScheduleSet

    schedule: str
    workflow: str
    cron: str
    timezone: str
    overlap: str
    catchup: str
    input: Payload
    set_at: Instant


@record
class ScheduleDeleted(Record):
    """A schedule made at run time, deleted: it fires no more (its runs go on)."""

    code: ClassVar[R] = R.ScheduleDeleted

    schedule: str
    deleted_at: Instant


@record
class UpdateApplied(OfRun):
    """`handle.update`: applied after the code asked for `position` operations (top level),
    so a replay applies it again at the same point."""

    code: ClassVar[R] = R.UpdateApplied

    update_id: str
    name: str
    arg: Payload
    position: int
    result: Payload
    failure: FailureJson | None
    applied_at: Instant


@record
class RunStuck(OfRun):
    """Why a run's code stopped (its code does not match its journal), so every process
    sees it `stuck`; and that it went on (`resume`, or code that matches)."""

    code: ClassVar[R] = R.RunStuck

    message: str
    stuck_at: Instant


@record
class RunUnstuck(OfRun):
    code: ClassVar[R] = R.RunUnstuck

    at: Instant


@record
class LimitSet(Record):
    """`engine.limit(name, permits)`: the size of a named limit, from here on."""

    code: ClassVar[R] = R.LimitSet

    name: str
    permits: int
    set_at: Instant


@record
class RateTaken(Record):
    """A slot of rate `name` (`"<rate>"` or `"<rate>/<key>"`) was taken at `taken_at` by a
    step's attempt, which runs once this is durable; `permits` slots in any window of
    `per_s` seconds (the `Rate` of the step that took it)."""

    code: ClassVar[R] = R.RateTaken

    name: str
    permits: int
    per_s: float
    taken_at: Instant


@record
class RateSet(Record):
    """`engine.rate(name, permits, per)`: rate `name` (and each of its keys) lets
    `permits` attempts start in any window of `per_s` seconds from here on, whatever its
    steps' `Rate` says."""

    code: ClassVar[R] = R.RateSet

    name: str
    permits: int
    per_s: float
    set_at: Instant


@record
class RunAdmitted(OfRun):
    """A run started in a queue (`start(queue=...)`) was let in by its queue at `at`: its
    code runs from here on, and it holds one of the queue's places until it closes."""

    code: ClassVar[R] = R.RunAdmitted

    at: Instant


@record
class StartDebounced(OfRun):
    """A start with `debounce` came while this run of its burst waited to begin: the run
    now begins at `begin_at` with `input`, the newest start's (and its deadline, if it
    has one, moved with its begin)."""

    code: ClassVar[R] = R.StartDebounced

    input: Payload
    begin_at: Instant
    deadline: Instant | None
    at: Instant


@record
class QueueSet(Record):
    """`engine.queue(name, concurrency, per_key)`: how many runs of queue `name` run at
    once (None: any number), and of each of its keys, from here on."""

    code: ClassVar[R] = R.QueueSet

    name: str
    concurrency: int | None
    per_key: int | None
    set_at: Instant


@record
class UpdateAccepted(OfRun):
    """An update whose handler is `async def` was accepted at `position` (the code was
    waiting in that top-level operation): its handler runs from there, its own
    operations numbered "<position>.u<n>.<k>", and its `UpdateApplied` follows."""

    code: ClassVar[R] = R.UpdateAccepted

    update_id: str
    name: str
    arg: Payload
    position: int
    accepted_at: Instant


CLOSED_AS: dict[type[Record], Status] = {
    RunCompleted: Status.COMPLETED,
    RunFailed: Status.FAILED,
    RunTerminated: Status.TERMINATED,
    RunCancelled: Status.CANCELLED,
    RunTimedOut: Status.TIMED_OUT,
    RunReset: Status.RESET,
    RunContinuedAsNew: Status.CONTINUED_AS_NEW,
}
"""The records that close a run, and the status each closes it with."""
CLOSES: frozenset[type[Record]] = frozenset(CLOSED_AS)
"""The records that close a run."""
SCHEDULES: frozenset[type[Record]] = frozenset(
    {ScheduleArmed, ScheduleFired, SchedulePaused, ScheduleSet, ScheduleDeleted}
)
"""The records of cron schedules (by the schedule's name, not of a run)."""
