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

Pure: no I/O, no engine. A step running now has no record yet (the journal
records a step once it returns), so it is not here; `RunInfo.waiting` says
what an open run waits for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

STREAM_ITEMS_MAX = 200
"""Items shown of each stream: the newest ones."""

CLOSES = {
    "RunCompleted": "completed",
    "RunFailed": "failed",
    "RunCancelled": "cancelled",
    "RunTerminated": "terminated",
    "RunTimedOut": "timed out",
    "RunReset": "reset",
    "RunContinuedAsNew": "continued as new",
}
"""Records that close a run, and what the page calls each."""


@dataclass
class Attempt:
    """One attempt of a step: its number, when it ran, and how it failed (None: it did not)."""

    number: int
    started_at: datetime | None
    ended_at: datetime | None
    failure: dict[str, Any] | None = None


@dataclass
class Operation:
    """One operation of a run, as its records tell it."""

    op: str
    kind: str
    """step, sleep, signal, child, completion, stream, or the first record's type."""
    name: str
    state: str = ""
    started_at: datetime | None = None
    ended_at: datetime | None = None
    attempts: list[Attempt] = field(default_factory=list)
    value: Any = None
    """The step's value, the signal's, the child's result: what it gave the code."""
    has_value: bool = False
    failure: dict[str, Any] | None = None
    child: str | None = None
    """The workflow id of the child it started."""

    @property
    def top(self) -> bool:
        """A top-level operation (a reset can go back to it)."""
        return "." not in self.op


@dataclass
class Event:
    """Something that happened to the run itself: its type, instant and a value to show."""

    type: str
    at: datetime | None
    text: str = ""
    value: Any = None
    has_value: bool = False


@dataclass
class Timeline:
    """One run's history, folded."""

    input: Any = None
    result: Any = None
    closed: str | None = None
    """How the run closed (a value of `CLOSES`), None while open."""
    failure: dict[str, Any] | None = None
    operations: list[Operation] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    streams: dict[str, list[Any]] = field(default_factory=dict)
    other_runs: int = 0
    """Runs of the same id other than this one (before a reset, a continue-as-new)."""


def fold(records: list[dict[str, Any]], run_id: str) -> Timeline:
    """The timeline of run `run_id` from the history of its id."""
    out = Timeline()
    ops: dict[str, Operation] = {}
    others: set[str] = set()
    for rec in records:
        if rec.get("run_id") != run_id:
            others.add(str(rec.get("run_id")))
            continue
        op = rec.get("op")
        if op is None or rec["type"] == "SignalReceived":
            _run_event(out, rec)
        else:
            _operation(out, ops, str(op), rec)
    out.other_runs = len(others)
    return out


def _run_event(out: Timeline, rec: dict[str, Any]) -> None:
    kind = rec["type"]
    at = next((v for k, v in rec.items() if k.endswith("_at") or k == "at"), None)
    event = Event(kind, _instant(at))
    if kind == "RunStarted":
        out.input = rec.get("input")
        event.value, event.has_value = out.input, True
    elif kind == "SignalReceived":
        event.text = str(rec.get("name"))
        event.value, event.has_value = rec.get("value"), True
    elif kind in CLOSES:
        out.closed = CLOSES[kind]
        if kind == "RunCompleted":
            out.result = rec.get("result")
            event.value, event.has_value = out.result, True
        if rec.get("failure"):
            out.failure = rec["failure"]
        event.text = str(rec.get("reason") or "")
    else:
        event.text = str(rec.get("reason") or rec.get("message") or rec.get("name") or "")
    out.events.append(event)


def _operation(out: Timeline, ops: dict[str, Operation], op: str, rec: dict[str, Any]) -> None:
    kind = rec["type"]
    if kind in ("StreamAppended", "StepStreamAppended"):
        items = out.streams.setdefault(str(rec.get("name")), [])
        items.append(rec.get("item"))
        del items[:-STREAM_ITEMS_MAX]
    found = ops.get(op)
    if found is None:
        found = ops[op] = Operation(op, _kind(kind), str(rec.get("step") or rec.get("name") or ""))
        out.operations.append(found)
    _apply(found, kind, rec)


def _kind(record_type: str) -> str:
    for prefix, kind in (
        ("Step", "step"),
        ("Attempt", "step"),
        ("Timer", "sleep"),
        ("Wait", "signal"),
        ("Child", "child"),
        ("Completion", "completion"),
        ("Stream", "stream"),
    ):
        if record_type.startswith(prefix):
            return kind
    return record_type


def _apply(o: Operation, kind: str, rec: dict[str, Any]) -> None:
    """What record `rec` (of type `kind`) tells about operation `o`."""
    if kind in ("StepCompleted", "StepFailed", "AttemptFailed"):
        _attempt_ended(o, kind, rec)
    elif kind in ("StepPaused", "StepResumed"):
        o.state = "paused" if kind == "StepPaused" else "resumed"
    elif kind == "TimerStarted":
        o.state = f"until {_clock(_instant(rec.get('fire_at')))}"
    elif kind == "TimerFired":
        o.state, o.ended_at = "fired", _instant(rec.get("fired_at"))
    elif kind == "WaitStarted":
        o.state = "waiting"
    elif kind == "WaitCompleted":
        o.state, o.ended_at = "received", _instant(rec.get("at"))
        o.value, o.has_value = rec.get("value"), True
    elif kind == "ChildStarted":
        started = _instant(rec.get("started_at"))
        o.name, o.child, o.started_at = str(rec.get("workflow")), rec.get("workflow_id"), started
        o.state = "failed to start" if rec.get("error") else "started"
    elif kind == "ChildClosed":
        o.state, o.ended_at = str(rec.get("status")), _instant(rec.get("closed_at"))
        o.value, o.has_value = rec.get("result"), rec.get("status") == "completed"
        o.failure = rec.get("failure")
    elif kind == "CompletionIssued":
        o.state, o.started_at = "issued", o.started_at or _instant(rec.get("issued_at"))
    elif kind == "CompletionDone":
        o.state = "done"
        o.value, o.has_value, o.failure = rec.get("value"), True, rec.get("failure")
    elif kind == "AttributesSet":
        o.kind, o.state = "attributes", "set"
        o.name = ", ".join(f"{k}={v}" for k, v in sorted((rec.get("attributes") or {}).items()))
    elif kind == "OpCancelled":
        o.state = "cancelled"
    elif kind not in ("StepHeartbeat", "CompletionSent", "StreamAppended", "StepStreamAppended"):
        o.state = o.state or kind


def _attempt_ended(o: Operation, kind: str, rec: dict[str, Any]) -> None:
    """An attempt of step `o` ended: it completed, it failed for good, or it retries."""
    started, ended = _instant(rec.get("started_at")), _instant(rec.get("ended_at"))
    failed_at = _instant(rec.get("failed_at"))
    number = rec.get("attempt") or len(o.attempts) + 1
    o.attempts.append(Attempt(number, started, ended or failed_at, rec.get("failure")))
    o.started_at = o.started_at or started
    o.ended_at = ended or failed_at
    if kind == "StepCompleted":
        o.state, o.value, o.has_value = "completed", rec.get("value"), True
    elif kind == "StepFailed":
        o.state, o.failure = "failed", rec.get("failure")
    else:
        o.state = f"retrying at {_clock(_instant(rec.get('retry_at')))}"


def _instant(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def _clock(at: datetime | None) -> str:
    return at.strftime("%H:%M:%S.%f")[:-3] if at else "?"
