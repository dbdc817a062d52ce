"""A run's history folded into what its page shows: operations, events, streams.

`GET /v1/runs/{id}/history` (`Control.history`) gives the records of every
run of an id, oldest first, each as `records.as_json` shapes it. `fold`
keeps the records of one run and groups them:

- an *operation* per operation number (`op`: "4", or "3.1" inside a
  `ctx.all`): a step with its attempts (each with its start, end and
  failure), a sleep, a wait for a signal, a child (its id, for a link), a
  completion, and whatever else the code recorded, in the order the run
  first recorded each;
- *events* of the run itself, which have no operation number: started,
  a signal received, a cancel asked, the close;
- *streams*: the items of each `ctx.stream`, by name.

A run made by a reset keeps the operations before its reset point from the
run it was reset from (`chain.kept_records`): their records are that run's,
so `fold` takes them from there, first, and marks each operation and stream
item it got so (`Operation.kept_from`, `Timeline.kept_items`). The chain of
the id's runs (`chain.chain_of`) comes with the timeline, for the page's links.

Pure: no I/O, no engine. A step running now has no record yet (the journal
records a step once it returns), so it is not here; `RunInfo.waiting` says
what an open run waits for.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import assert_never

from fusee_runtime.control.ui.chain import Chain, chain_of, kept_records
from fusee_runtime.control.ui.records import at_of, patch_said
from fusee_runtime.model import readable
from fusee_runtime.model.json import Json, JsonObject
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
from fusee_runtime.model.readable import Named, OpRecord, RunEvent
from fusee_runtime.model.records import (
    CancelRequested,
    FailureJson,
    Instant,
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
from fusee_runtime.model.run import Status

STREAM_ITEMS_MAX = 20
"""Items kept of each stream: the newest ones (`fusee tail-stream` gives them all)."""

CLOSES: dict[type[Record], str] = {
    RunCompleted: "completed",
    RunFailed: "failed",
    RunCancelled: "cancelled",
    RunTerminated: "terminated",
    RunTimedOut: "timed out",
    RunReset: "reset",
    RunContinuedAsNew: "continued as new",
}
"""Records that close a run, and what the page calls each."""


class OpKind(enum.StrEnum):
    """What the page calls an operation: what it is, in a word or two."""

    STEP = "step"
    SLEEP = "sleep"
    SIGNAL = "signal"
    """A wait for a signal."""
    CHILD = "child"
    COMPLETION = "completion"
    STREAM = "stream"
    ATTRIBUTES = "attributes"
    VALUE = "value"
    """A value recorded: `ctx.now()`, `ctx.random()`, `ctx.uuid()`."""
    RACE = "race"
    CANCELLED = "cancelled"
    """An operation cancelled before it recorded anything."""
    SIGNAL_SENT = "signal sent"
    CANCEL_SENT = "cancel sent"
    PATCH = "patch"


@dataclass
class Attempt:
    """One attempt of a step: its number, when it ran, and how it failed (None: it did not)."""

    number: int
    started_at: datetime | None
    ended_at: datetime | None
    failure: FailureJson | None = None
    paused: bool = False
    """It failed the last attempt its policy allowed, and the step paused (`StepPaused`)."""
    resumed_at: datetime | None = None
    """When the paused step was resumed (its next attempt is numbered 1 again)."""
    retry_at: datetime | None = None
    """When the next attempt was due, after this one failed (its backoff)."""


@dataclass
class Operation:
    """One operation of a run, as its records tell it."""

    op: str
    kind: OpKind
    name: str
    state: str = ""
    started_at: datetime | None = None
    ended_at: datetime | None = None
    attempts: list[Attempt] = field(default_factory=list)
    value: Json = None
    """The step's value, the signal's, the child's result: what it gave the code."""
    has_value: bool = False
    failure: FailureJson | None = None
    child: str | None = None
    """The workflow id of the child it started (None: none, or its start was refused)."""
    child_run: str | None = None
    """The run id of that child: the run it started, which a link goes to."""
    reached_at: datetime | None = None
    """When the run's code got to it, at the latest: the instant of the record before its
    first (a sleep's or a wait's records say when it ends, not when it began)."""
    kept_from: str | None = None
    """The run a reset run kept it from (None: this run recorded it)."""

    @property
    def top(self) -> bool:
        """A top-level operation."""
        return "." not in self.op

    @property
    def resettable(self) -> bool:
        """A reset can go back to it: a step at the top level."""
        return self.top and self.kind is OpKind.STEP


@dataclass
class Event:
    """Something that happened to the run itself: its type, instant and a value to show
    (the run's input is shown on its own, not in its start's event)."""

    type: str
    at: datetime | None
    text: str = ""
    value: Json = None
    has_value: bool = False


@dataclass
class Timeline:
    """One run's history, folded."""

    input: Json = None
    result: Json = None
    closed: str | None = None
    """How the run closed (a value of `CLOSES`), None while open."""
    failure: FailureJson | None = None
    operations: list[Operation] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    streams: dict[str, list[Json]] = field(default_factory=dict)
    stream_counts: dict[str, int] = field(default_factory=dict)
    """How many items each stream has (`streams` keeps the newest `STREAM_ITEMS_MAX`)."""
    kept_items: dict[str, int] = field(default_factory=dict)
    """Of each stream's items, how many a reset run kept from the runs before it."""
    chain: Chain = field(default_factory=Chain)
    """The runs of the id, and how they follow each other."""
    kept_missing: str | None = None
    """A run this reset run kept operations from whose records the history no longer
    holds (pruned): those operations are not shown."""

    @property
    def other_runs(self) -> int:
        """Runs of the same id other than this one (before a reset, a continue-as-new)."""
        return max(len(self.chain.runs) - 1, 0)


def fold(records: list[JsonObject], run_id: str) -> Timeline:
    """The timeline of run `run_id` from the history of its id (`model.readable` reads
    each record back), with the operations a reset run kept from the runs before it."""
    folding = Folding(run_id)
    folding.add(records)
    return folding.timeline


class Folding:
    """The timeline of run `run_id` folded so far, to fold on with the records that come
    after (`add`): a page that shows an open run asks only for the records past
    `last_lsn` (`Control.history(after=)`), not for the run's whole history each time.

    The first `add` takes the run's records and those of the runs it kept operations
    from by a reset (`Control.history(id, run_id)`); the later ones its own records past
    `last_lsn` (any other record, or one folded already, is passed over)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.timeline = Timeline()
        self.last_lsn: int | None = None
        """The newest record of the run folded (None: none yet)."""
        self._ops: dict[str, Operation] = {}
        self._reached: list[datetime | None] = [None]  # the latest instant a record told of

    def add(self, records: list[JsonObject]) -> None:
        """Folds on with `records` (`Control.history`'s JSON), oldest first."""
        read = list(map(readable.read, records))
        out, run_id = self.timeline, self.run_id
        if self.last_lsn is None:
            out.chain = chain_of(rec for _, rec in read)
            ops_of: dict[str, list[OpRecord]] = {}
            for _, rec in read:
                if isinstance(rec, OpRecord):
                    ops_of.setdefault(rec.run_id, []).append(rec)
            kept, out.kept_missing = kept_records(out.chain, ops_of, run_id)
            for rec in kept:
                _operation(out, self._ops, rec, self._reached, rec.run_id)
        last = self.last_lsn if self.last_lsn is not None else -1
        for lsn, rec in read:
            if lsn <= last:
                continue  # folded already (two pages asked for the same records)
            if isinstance(rec, OpRecord) and rec.run_id == run_id:
                _operation(out, self._ops, rec, self._reached, None)
            elif isinstance(rec, RunEvent) and rec.run_id == run_id:
                _run_event(out, rec)
                self._reached[0] = _instant(_event_at(rec)) or self._reached[0]
            else:
                continue
            self.last_lsn = lsn
        if self.last_lsn is None:
            self.last_lsn = -1  # nothing of its own yet: its kept part is folded


def _run_event(out: Timeline, rec: RunEvent) -> None:
    event = Event(rec.code.name, _instant(_event_at(rec)), _event_text(rec))
    match rec:
        case RunStarted():
            out.input = rec.input.value
        case SignalReceived():
            event.value, event.has_value = rec.value.value, True
        case RunCompleted():
            out.result = rec.result.value
            event.value, event.has_value = out.result, True
        case RunFailed() if rec.failure:
            out.failure = rec.failure
    out.closed = CLOSES.get(type(rec), out.closed)
    out.events.append(event)


def _event_at(rec: RunEvent) -> Instant:
    match rec:
        case RunStarted(started_at=at) | SignalReceived(received_at=at) | RunUnstuck(at=at):
            return at
        case RunAdmitted(at=at) | StartDebounced(at=at):
            return at
        case CancelRequested(requested_at=at) | RunStuck(stuck_at=at):
            return at
        case UpdateApplied(applied_at=at) | UpdateAccepted(accepted_at=at):
            return at
        case RunCompleted(closed_at=at) | RunFailed(closed_at=at) | RunTerminated(closed_at=at):
            return at
        case RunCancelled(closed_at=at) | RunTimedOut(closed_at=at) | RunReset(closed_at=at):
            return at
        case RunContinuedAsNew(closed_at=at):
            return at
    assert_never(rec)


def _event_text(rec: RunEvent) -> str:
    """What the events table says of it: the reason of a close or a cancel, why the run
    got stuck, the name of a signal or an update."""
    match rec:
        case RunTerminated(reason=text) | RunCancelled(reason=text) | RunTimedOut(reason=text):
            return text
        case RunReset(reason=text) | CancelRequested(reason=text) | RunStuck(message=text):
            return text
        case SignalReceived(name=text) | UpdateApplied(name=text) | UpdateAccepted(name=text):
            return text
    return ""


def _operation(
    out: Timeline,
    ops: dict[str, Operation],
    rec: OpRecord,
    reached: list[datetime | None],
    kept_from: str | None,
) -> None:
    if isinstance(rec, StreamAppended | StepStreamAppended):
        items = out.streams.setdefault(rec.name, [])
        items.append(rec.item.value)
        del items[:-STREAM_ITEMS_MAX]
        out.stream_counts[rec.name] = out.stream_counts.get(rec.name, 0) + 1
        if kept_from is not None:
            out.kept_items[rec.name] = out.kept_items.get(rec.name, 0) + 1
    found = ops.get(rec.seq)
    if found is None:
        found = ops[rec.seq] = Operation(rec.seq, _kind(rec), _name(rec))
        found.reached_at, found.kept_from = reached[0], kept_from
        out.operations.append(found)
    _apply(found, rec)
    reached[0] = _instant(at_of(rec)) or reached[0]


def _kind(rec: OpRecord) -> OpKind:
    match rec:
        case StepCompleted() | StepFailed() | AttemptFailed() | StepPaused() | StepResumed():
            return OpKind.STEP
        case StepHeartbeat() | StepStreamAppended():
            return OpKind.STEP
        case TimerStarted() | TimerFired():
            return OpKind.SLEEP
        case WaitStarted() | WaitCompleted():
            return OpKind.SIGNAL
        case ChildStarted() | ChildClosed():
            return OpKind.CHILD
        case CompletionIssued() | CompletionSent() | CompletionDone():
            return OpKind.COMPLETION
        case StreamAppended() | StreamClosed():
            return OpKind.STREAM
        case AttributesSet():
            return OpKind.ATTRIBUTES
        case ValueRecorded():
            return OpKind.VALUE
        case RaceWon():
            return OpKind.RACE
        case OpCancelled():
            return OpKind.CANCELLED
        case SignalSent():
            return OpKind.SIGNAL_SENT
        case CancelSent():
            return OpKind.CANCEL_SENT
        case PatchMarked():
            return OpKind.PATCH
    raise AssertionError(f"no kind for {rec.code.name}")  # every OpRecord has one above


def _name(rec: OpRecord) -> str:
    """The name its first record gives an operation: a step function's for its stream's
    items, else the record's name ("" for the records that have none)."""
    if isinstance(rec, StepStreamAppended):
        return rec.step or rec.name
    if isinstance(rec, PatchMarked):
        return rec.patch_id
    if isinstance(rec, SignalSent | CancelSent):
        return rec.workflow_id
    return rec.name if isinstance(rec, Named) else ""


def _apply(o: Operation, rec: OpRecord) -> None:
    """What record `rec` tells about operation `o`: a step's, a sleep's, a wait's."""
    match rec:
        case StepCompleted() | StepFailed() | AttemptFailed():
            _attempt_ended(o, rec)
        case StepPaused():
            _attempt_paused(o, rec)
        case StepResumed():
            o.state = "resumed"
            if o.attempts and o.attempts[-1].paused:
                o.attempts[-1].resumed_at = _instant(rec.resumed_at)
        case TimerStarted():
            o.state = f"until {_clock(_instant(rec.fire_at))}"
        case TimerFired():
            o.state, o.ended_at = "fired", _instant(rec.fired_at)
        case WaitStarted():
            o.state = "waiting"
        case WaitCompleted():
            o.state, o.ended_at = "received", _instant(rec.at)
            o.value, o.has_value = rec.value.value, True
        case StepHeartbeat() | StreamAppended() | StepStreamAppended():
            pass  # the stream's items are folded apart; a heartbeat changes nothing shown
        case _:
            _apply_other(o, rec)


def _apply_other(o: Operation, rec: OpRecord) -> None:
    """What record `rec` tells about operation `o`: a child's, a completion's, any other."""
    match rec:
        case ChildStarted():
            started = _instant(rec.started_at)
            o.name, o.started_at = rec.workflow, started
            if rec.error:  # refused: no child was started, nothing to link
                o.state = "failed to start"
                why = rec.error
                o.failure = why if isinstance(why, dict) else {"kind": "Refused", "message": why}
            else:
                o.child, o.child_run, o.state = rec.workflow_id, rec.child_run_id, "started"
        case ChildClosed():
            o.state, o.ended_at = rec.status, _instant(rec.closed_at)
            o.value, o.has_value = rec.result.value, rec.status == Status.COMPLETED
            o.failure = rec.failure
        case CompletionIssued():
            o.state, o.started_at = "issued", o.started_at or _instant(rec.issued_at)
        case CompletionSent():
            pass
        case CompletionDone():
            o.state = "done"
            o.value, o.has_value, o.failure = rec.value.value, True, rec.failure
        case AttributesSet():
            o.kind, o.state = OpKind.ATTRIBUTES, "set"
            o.name = ", ".join(f"{k}={v}" for k, v in sorted((rec.attributes or {}).items()))
        case OpCancelled():
            o.state = "cancelled"
        case PatchMarked():
            o.state = patch_said(rec.patch_id)
        case RaceWon():
            o.state = f"branch {rec.index} won"
        case SignalSent() | CancelSent():
            o.state, o.started_at = ("refused" if rec.error else "sent"), _instant(rec.sent_at)
        case ValueRecorded():
            o.state, o.value, o.has_value = "recorded", rec.value.value, True
        case _:
            o.state = o.state or rec.code.name


def _attempt_ended(o: Operation, rec: StepCompleted | StepFailed | AttemptFailed) -> None:
    """An attempt of step `o` ended: it completed, it failed for good, or it retries."""
    started = _instant(rec.started_at)
    retry_at = None
    if isinstance(rec, AttemptFailed):
        ended, number = _instant(rec.failed_at), rec.attempt or _next_number(o)
        retry_at = _instant(rec.retry_at)
        o.state = f"retrying at {_clock(retry_at)}"
    else:
        ended, number = _instant(rec.ended_at), _next_number(o)
    failure = None if isinstance(rec, StepCompleted) else rec.failure
    o.attempts.append(Attempt(number, started, ended, failure, retry_at=retry_at))
    o.started_at = o.started_at or started
    o.ended_at = ended
    if isinstance(rec, StepCompleted):
        o.state, o.value, o.has_value = "completed", rec.value.value, True
    elif isinstance(rec, StepFailed):
        o.state, o.failure = "failed", rec.failure


def _attempt_paused(o: Operation, rec: StepPaused) -> None:
    """The step's last allowed attempt failed, and the step paused until a resume."""
    started = _instant(rec.started_at)
    ended = _instant(rec.paused_at)
    o.attempts.append(Attempt(rec.attempt, started, ended, rec.failure, paused=True))
    o.started_at = o.started_at or started
    o.ended_at, o.state = ended, "paused"


def _next_number(o: Operation) -> int:
    """The number of a step's next attempt where its record does not say: one past the
    last, or 1 again after a resume (a resumed step gets a fresh budget)."""
    if not o.attempts:
        return 1
    last = o.attempts[-1]
    return 1 if last.paused else last.number + 1


def _instant(at: Instant | None) -> datetime | None:
    return None if at is None else datetime.fromtimestamp(at, UTC)


def _clock(at: datetime | None) -> str:
    return at.strftime("%H:%M:%S.%f")[:-3] if at else "?"
