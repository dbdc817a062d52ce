"""The records of one operation of a run, by its number (`seq`): a step's end, its
attempts and pauses, a recorded value, a timer, a wait, a completion, a race, a
stream's items, a child, a signal or a cancel sent, a patch, attributes set.
The record types of the run as a whole are in `model/records.py`."""

from __future__ import annotations

from typing import Any, ClassVar

from fusee_runtime.model.payload import Payload
from fusee_runtime.model.records import FailureJson, Instant, OfRun, R, Seq, record


@record
class OfOp(OfRun):
    """A record of one operation of a run: its `seq` follows the `run_id`."""

    seq: Seq


@record
class StepCompleted(OfOp):
    code: ClassVar[R] = R.StepCompleted

    name: str
    value: Payload
    started_at: Instant
    ended_at: Instant


@record
class StepFailed(OfOp):
    code: ClassVar[R] = R.StepFailed

    name: str
    failure: FailureJson
    started_at: Instant
    ended_at: Instant


@record
class AttemptFailed(OfOp):
    code: ClassVar[R] = R.AttemptFailed

    name: str
    attempt: int
    failure: FailureJson
    failed_at: Instant
    retry_at: Instant | None
    delay: float
    started_at: Instant


@record
class ValueRecorded(OfOp):
    code: ClassVar[R] = R.ValueRecorded

    name: str
    value: Payload


@record
class TimerStarted(OfOp):
    code: ClassVar[R] = R.TimerStarted

    name: str
    fire_at: Instant | None


@record
class TimerFired(OfOp):
    code: ClassVar[R] = R.TimerFired

    fired_at: Instant


@record
class WaitStarted(OfOp):
    code: ClassVar[R] = R.WaitStarted

    name: str
    deadline: Instant | None


@record
class WaitCompleted(OfOp):
    code: ClassVar[R] = R.WaitCompleted

    signal_id: int | None
    value: Payload
    at: Instant


@record
class StepPaused(OfOp):
    code: ClassVar[R] = R.StepPaused

    name: str
    attempt: int
    failure: FailureJson
    started_at: Instant
    paused_at: Instant


@record
class StepResumed(OfOp):
    code: ClassVar[R] = R.StepResumed

    resumed_at: Instant


@record
class OpCancelled(OfOp):
    code: ClassVar[R] = R.OpCancelled

    kind: str
    name: str


@record
class RaceWon(OfOp):
    code: ClassVar[R] = R.RaceWon

    index: int


@record
class StreamAppended(OfOp):
    code: ClassVar[R] = R.StreamAppended

    name: str
    item: Payload


@record
class StreamClosed(OfOp):
    code: ClassVar[R] = R.StreamClosed

    name: str


@record
class CompletionIssued(OfOp):
    """`ctx.await_completion`: a token issued for an attempt (durable before `send` sees
    it), `send` returned, and the value or failure from outside."""

    code: ClassVar[R] = R.CompletionIssued

    name: str
    attempt: int
    issued_at: Instant


@record
class CompletionSent(OfOp):
    code: ClassVar[R] = R.CompletionSent

    sent_at: Instant


@record
class CompletionDone(OfOp):
    code: ClassVar[R] = R.CompletionDone

    value: Payload
    failure: FailureJson | None
    done_at: Instant


@record
class ChildStarted(OfOp):
    """Composition (`ctx.child`, `ctx.start_child`, `ctx.signal_workflow`,
    `ctx.cancel_workflow`), in the parent's (sender's) journal. A child's start
    comes first, then the child's own `RunStarted` (origin {"parent": ...}); its
    input is in both, so that recovery can start a child whose `RunStarted` a crash
    cut off. `error` is the refusal the code got (an id in use, an unknown or closed
    target), recorded so that replay gets the same."""

    code: ClassVar[R] = R.ChildStarted

    workflow_id: str
    child_run_id: str | None
    workflow: str
    input: Payload
    deadline: Instant | None
    parent_close: str
    error: FailureJson | None
    started_at: Instant


@record
class ChildClosed(OfOp):
    code: ClassVar[R] = R.ChildClosed

    child_run_id: str
    status: str
    result: Payload
    failure: FailureJson | None
    closed_at: Instant


@record
class SignalSent(OfOp):
    """A signal sent comes first, then the target's `SignalReceived` with `signal_id`."""

    code: ClassVar[R] = R.SignalSent

    workflow_id: str
    target_run_id: str | None
    signal_id: int | None
    name: str
    value: Payload
    error: FailureJson | None
    sent_at: Instant


@record
class CancelSent(OfOp):
    code: ClassVar[R] = R.CancelSent

    workflow_id: str
    target_run_id: str | None
    reason: str
    error: FailureJson | None
    sent_at: Instant


@record
class PatchMarked(OfOp):
    """`ctx.patched(patch_id)` (and `deprecate_patch`) reached live: from here on this run
    takes the patched branch, on every replay too."""

    code: ClassVar[R] = R.PatchMarked

    patch_id: str


@record
class AttributesSet(OfOp):
    """`ctx.set_attributes`: merged into the run's search attributes (null removes a key)."""

    code: ClassVar[R] = R.AttributesSet

    attributes: dict[str, Any]
    set_at: Instant


@record
class StepHeartbeat(OfOp):
    """`current_ctx().heartbeat(details)` from a running step's function: the latest of an
    attempt's heartbeats, coalesced (at most one record every `beats.EVERY_S`).
    `details` is what `progress()` gives the next attempt, after a crash too.
    `number` counts the step's heartbeat records (1, 2, ...): a run keeps only the
    latest, so the numbers before it account for the records its checkpoints no
    longer hold."""

    code: ClassVar[R] = R.StepHeartbeat

    name: str
    attempt: int
    details: Payload
    beat_at: Instant
    number: int


@record
class StepStreamAppended(OfOp):
    """An item a step function appended to stream `name` of its run (`current_ctx().
    stream(name)` in a step), in the attempt it came from; `own`: the stream is the
    step's (`scope="step"`), closed when the step ends."""

    code: ClassVar[R] = R.StepStreamAppended

    step: str
    name: str
    attempt: int
    item: Payload
    own: bool
