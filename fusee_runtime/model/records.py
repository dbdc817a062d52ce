"""The journal's records, typed: one frozen dataclass per record type.

A record says what happened, in the past tense. On disk it is a JSON array:
its type code (`R`, never renumbered), then its fields in the order its class
declares them; the codec is the only place that knows it, and it changes no
byte of what the journal holds. A value of the user's (an
input, a step's result, a signal's value) is a `Payload`: the JSON it encodes
to, encoded once when it is recorded, and decoded only when read
(`model/payload.py`). `model/codec.py` turns records into bytes and back.

The second field is the `run_id` of the run the record belongs to; the records
of cron schedules have the workflow's name there, and `LimitSet` a limit's.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, ClassVar

from fusee_runtime.model.payload import Payload

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


@dataclass(frozen=True, slots=True)
class Record:
    """What every record is: of one type (`code`), its fields in order."""

    code: ClassVar[R]


@dataclass(frozen=True, slots=True)
class RunStarted(Record):
    code: ClassVar[R] = R.RunStarted

    run_id: str
    workflow_id: str
    workflow: str
    input: Payload
    started_at: Instant
    deadline: Instant | None
    origin: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class RunCompleted(Record):
    code: ClassVar[R] = R.RunCompleted

    run_id: str
    result: Payload
    closed_at: Instant


@dataclass(frozen=True, slots=True)
class RunFailed(Record):
    code: ClassVar[R] = R.RunFailed

    run_id: str
    failure: FailureJson
    closed_at: Instant


@dataclass(frozen=True, slots=True)
class RunTerminated(Record):
    code: ClassVar[R] = R.RunTerminated

    run_id: str
    reason: str
    closed_at: Instant


@dataclass(frozen=True, slots=True)
class SignalReceived(Record):
    code: ClassVar[R] = R.SignalReceived

    run_id: str
    signal_id: int
    name: str
    value: Payload
    received_at: Instant


@dataclass(frozen=True, slots=True)
class CancelRequested(Record):
    code: ClassVar[R] = R.CancelRequested

    run_id: str
    reason: str
    requested_at: Instant


@dataclass(frozen=True, slots=True)
class RunCancelled(Record):
    code: ClassVar[R] = R.RunCancelled

    run_id: str
    reason: str
    closed_at: Instant


@dataclass(frozen=True, slots=True)
class RunTimedOut(Record):
    code: ClassVar[R] = R.RunTimedOut

    run_id: str
    reason: str
    closed_at: Instant


@dataclass(frozen=True, slots=True)
class RunReset(Record):
    code: ClassVar[R] = R.RunReset

    run_id: str
    reason: str
    closed_at: Instant


@dataclass(frozen=True, slots=True)
class RunContinuedAsNew(Record):
    code: ClassVar[R] = R.RunContinuedAsNew

    run_id: str
    new_run_id: str
    input: Payload
    closed_at: Instant


@dataclass(frozen=True, slots=True)
class ScheduleArmed(Record):
    """Cron schedules belong to a workflow, not to a run: the second field is the
    workflow's name."""

    code: ClassVar[R] = R.ScheduleArmed

    workflow: str
    cron: str
    timezone: str
    armed_at: Instant


@dataclass(frozen=True, slots=True)
class ScheduleFired(Record):
    code: ClassVar[R] = R.ScheduleFired

    workflow: str
    instant: Instant
    outcome: str
    workflow_id: str | None
    at: Instant


@dataclass(frozen=True, slots=True)
class SchedulePaused(Record):
    code: ClassVar[R] = R.SchedulePaused

    workflow: str
    paused: bool
    at: Instant


@dataclass(frozen=True, slots=True)
class UpdateApplied(Record):
    """`handle.update`: applied after the code asked for `position` operations (top level),
    so a replay applies it again at the same point."""

    code: ClassVar[R] = R.UpdateApplied

    run_id: str
    update_id: str
    name: str
    arg: Payload
    position: int
    result: Payload
    failure: FailureJson | None
    applied_at: Instant


@dataclass(frozen=True, slots=True)
class RunStuck(Record):
    """Why a run's code stopped (its code does not match its journal), so every process
    sees it `stuck`; and that it went on (`resume`, or code that matches)."""

    code: ClassVar[R] = R.RunStuck

    run_id: str
    message: str
    stuck_at: Instant


@dataclass(frozen=True, slots=True)
class RunUnstuck(Record):
    code: ClassVar[R] = R.RunUnstuck

    run_id: str
    at: Instant


@dataclass(frozen=True, slots=True)
class LimitSet(Record):
    """`engine.limit(name, permits)`: the size of a named limit, from here on."""

    code: ClassVar[R] = R.LimitSet

    name: str
    permits: int
    set_at: Instant


@dataclass(frozen=True, slots=True)
class UpdateAccepted(Record):
    """An update whose handler is `async def` was accepted at `position` (the code was
    waiting in that top-level operation): its handler runs from there, its own
    operations numbered "<position>.u<n>.<k>", and its `UpdateApplied` follows."""

    code: ClassVar[R] = R.UpdateAccepted

    run_id: str
    update_id: str
    name: str
    arg: Payload
    position: int
    accepted_at: Instant
