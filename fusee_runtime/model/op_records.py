"""The records of one operation of a run, by its number (`seq`): a step's end, its
attempts and pauses, a recorded value, a timer, a wait, a completion, a race, a
stream's items, a child, a signal or a cancel sent, a patch, attributes set.
The record types of the run as a whole are in `model/records.py`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from fusee_runtime.model.payload import Payload
from fusee_runtime.model.records import FailureJson, Instant, R, Record, Seq


@dataclass(frozen=True, slots=True)
class StepCompleted(Record):
    code: ClassVar[R] = R.StepCompleted

    run_id: str
    seq: Seq
    name: str
    value: Payload
    started_at: Instant
    ended_at: Instant


@dataclass(frozen=True, slots=True)
class StepFailed(Record):
    code: ClassVar[R] = R.StepFailed

    run_id: str
    seq: Seq
    name: str
    failure: FailureJson
    started_at: Instant
    ended_at: Instant


@dataclass(frozen=True, slots=True)
class AttemptFailed(Record):
    code: ClassVar[R] = R.AttemptFailed

    run_id: str
    seq: Seq
    name: str
    attempt: int
    failure: FailureJson
    failed_at: Instant
    retry_at: Instant | None
    delay: float
    started_at: Instant


@dataclass(frozen=True, slots=True)
class ValueRecorded(Record):
    code: ClassVar[R] = R.ValueRecorded

    run_id: str
    seq: Seq
    name: str
    value: Payload


@dataclass(frozen=True, slots=True)
class TimerStarted(Record):
    code: ClassVar[R] = R.TimerStarted

    run_id: str
    seq: Seq
    name: str
    fire_at: Instant | None


@dataclass(frozen=True, slots=True)
class TimerFired(Record):
    code: ClassVar[R] = R.TimerFired

    run_id: str
    seq: Seq
    fired_at: Instant


@dataclass(frozen=True, slots=True)
class WaitStarted(Record):
    code: ClassVar[R] = R.WaitStarted

    run_id: str
    seq: Seq
    name: str
    deadline: Instant | None


@dataclass(frozen=True, slots=True)
class WaitCompleted(Record):
    code: ClassVar[R] = R.WaitCompleted

    run_id: str
    seq: Seq
    signal_id: int | None
    value: Payload
    at: Instant


@dataclass(frozen=True, slots=True)
class StepPaused(Record):
    code: ClassVar[R] = R.StepPaused

    run_id: str
    seq: Seq
    name: str
    attempt: int
    failure: FailureJson
    started_at: Instant
    paused_at: Instant


@dataclass(frozen=True, slots=True)
class StepResumed(Record):
    code: ClassVar[R] = R.StepResumed

    run_id: str
    seq: Seq
    resumed_at: Instant


@dataclass(frozen=True, slots=True)
class OpCancelled(Record):
    code: ClassVar[R] = R.OpCancelled

    run_id: str
    seq: Seq
    kind: str
    name: str


@dataclass(frozen=True, slots=True)
class RaceWon(Record):
    code: ClassVar[R] = R.RaceWon

    run_id: str
    seq: Seq
    index: int


@dataclass(frozen=True, slots=True)
class StreamAppended(Record):
    code: ClassVar[R] = R.StreamAppended

    run_id: str
    seq: Seq
    name: str
    item: Payload


@dataclass(frozen=True, slots=True)
class StreamClosed(Record):
    code: ClassVar[R] = R.StreamClosed

    run_id: str
    seq: Seq
    name: str


@dataclass(frozen=True, slots=True)
class CompletionIssued(Record):
    """`ctx.await_completion`: a token issued for an attempt (durable before `send` sees
    it), `send` returned, and the value or failure from outside."""

    code: ClassVar[R] = R.CompletionIssued

    run_id: str
    seq: Seq
    name: str
    attempt: int
    issued_at: Instant


@dataclass(frozen=True, slots=True)
class CompletionSent(Record):
    code: ClassVar[R] = R.CompletionSent

    run_id: str
    seq: Seq
    sent_at: Instant


@dataclass(frozen=True, slots=True)
class CompletionDone(Record):
    code: ClassVar[R] = R.CompletionDone

    run_id: str
    seq: Seq
    value: Payload
    failure: FailureJson | None
    done_at: Instant


@dataclass(frozen=True, slots=True)
class ChildStarted(Record):
    """Composition (`ctx.child`, `ctx.start_child`, `ctx.signal_workflow`,
    `ctx.cancel_workflow`), in the parent's (sender's) journal. A child's start
    comes first, then the child's own `RunStarted` (origin {"parent": ...}); its
    input is in both, so that recovery can start a child whose `RunStarted` a crash
    cut off. `error` is the refusal the code got (an id in use, an unknown or closed
    target), recorded so that replay gets the same."""

    code: ClassVar[R] = R.ChildStarted

    run_id: str
    seq: Seq
    workflow_id: str
    child_run_id: str | None
    workflow: str
    input: Payload
    deadline: Instant | None
    parent_close: str
    error: FailureJson | None
    started_at: Instant


@dataclass(frozen=True, slots=True)
class ChildClosed(Record):
    code: ClassVar[R] = R.ChildClosed

    run_id: str
    seq: Seq
    child_run_id: str
    status: str
    result: Payload
    failure: FailureJson | None
    closed_at: Instant


@dataclass(frozen=True, slots=True)
class SignalSent(Record):
    """A signal sent comes first, then the target's `SignalReceived` with `signal_id`."""

    code: ClassVar[R] = R.SignalSent

    run_id: str
    seq: Seq
    workflow_id: str
    target_run_id: str | None
    signal_id: int | None
    name: str
    value: Payload
    error: FailureJson | None
    sent_at: Instant


@dataclass(frozen=True, slots=True)
class CancelSent(Record):
    code: ClassVar[R] = R.CancelSent

    run_id: str
    seq: Seq
    workflow_id: str
    target_run_id: str | None
    reason: str
    error: FailureJson | None
    sent_at: Instant


@dataclass(frozen=True, slots=True)
class PatchMarked(Record):
    """`ctx.patched(patch_id)` (and `deprecate_patch`) reached live: from here on this run
    takes the patched branch, on every replay too."""

    code: ClassVar[R] = R.PatchMarked

    run_id: str
    seq: Seq
    patch_id: str


@dataclass(frozen=True, slots=True)
class AttributesSet(Record):
    """`ctx.set_attributes`: merged into the run's search attributes (null removes a key)."""

    code: ClassVar[R] = R.AttributesSet

    run_id: str
    seq: Seq
    attributes: dict[str, Any]
    set_at: Instant


@dataclass(frozen=True, slots=True)
class StepHeartbeat(Record):
    """`current_ctx().heartbeat(details)` from a running step's function: the latest of an
    attempt's heartbeats, coalesced (at most one record every `beats.EVERY_S`).
    `details` is what `progress()` gives the next attempt, after a crash too.
    `number` counts the step's heartbeat records (1, 2, ...): a run keeps only the
    latest, so the numbers before it account for the records its checkpoints no
    longer hold."""

    code: ClassVar[R] = R.StepHeartbeat

    run_id: str
    seq: Seq
    name: str
    attempt: int
    details: Payload
    beat_at: Instant
    number: int


@dataclass(frozen=True, slots=True)
class StepStreamAppended(Record):
    """An item a step function appended to stream `name` of its run (`current_ctx().
    stream(name)` in a step), in the attempt it came from; `own`: the stream is the
    step's (`scope="step"`), closed when the step ends."""

    code: ClassVar[R] = R.StepStreamAppended

    run_id: str
    seq: Seq
    step: str
    name: str
    attempt: int
    item: Payload
    own: bool
