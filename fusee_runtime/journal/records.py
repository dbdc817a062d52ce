"""Record types: what the journal says happened, in the past tense.

A record's payload is a JSON array (orjson) whose first element is its type
code and second the `run_id` it belongs to (the workflow's name for the
records of a cron schedule); the rest is per type, in the
order `FIELDS` gives. Values the user supplied (inputs, results) are
embedded as already-encoded JSON, so each is encoded exactly once.
"""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from typing import Any

import orjson


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


FIELDS: dict[R, tuple[str, ...]] = {
    R.RunStarted: (
        "run_id",
        "workflow_id",
        "workflow",
        "input",
        "started_at",
        "deadline",
        "origin",
    ),
    R.StepCompleted: ("run_id", "seq", "name", "value", "started_at", "ended_at"),
    R.StepFailed: ("run_id", "seq", "name", "failure", "started_at", "ended_at"),
    R.AttemptFailed: (
        "run_id",
        "seq",
        "name",
        "attempt",
        "failure",
        "failed_at",
        "retry_at",
        "delay",
        "started_at",
    ),
    R.ValueRecorded: ("run_id", "seq", "name", "value"),
    R.RunCompleted: ("run_id", "result", "closed_at"),
    R.RunFailed: ("run_id", "failure", "closed_at"),
    R.RunTerminated: ("run_id", "reason", "closed_at"),
    R.TimerStarted: ("run_id", "seq", "name", "fire_at"),
    R.TimerFired: ("run_id", "seq", "fired_at"),
    R.SignalReceived: ("run_id", "signal_id", "name", "value", "received_at"),
    R.WaitStarted: ("run_id", "seq", "name", "deadline"),
    R.WaitCompleted: ("run_id", "seq", "signal_id", "value", "at"),
    R.StepPaused: ("run_id", "seq", "name", "attempt", "failure", "started_at", "paused_at"),
    R.StepResumed: ("run_id", "seq", "resumed_at"),
    R.CancelRequested: ("run_id", "reason", "requested_at"),
    R.OpCancelled: ("run_id", "seq", "kind", "name"),
    R.RunCancelled: ("run_id", "reason", "closed_at"),
    R.RunTimedOut: ("run_id", "reason", "closed_at"),
    R.RunReset: ("run_id", "reason", "closed_at"),
    R.RunContinuedAsNew: ("run_id", "new_run_id", "input", "closed_at"),
    R.RaceWon: ("run_id", "seq", "index"),
    R.StreamAppended: ("run_id", "seq", "name", "item"),
    R.StreamClosed: ("run_id", "seq", "name"),
    # `ctx.await_completion`: a token issued for an attempt (durable before
    # `send` sees it), `send` returned, and the value or failure from outside.
    R.CompletionIssued: ("run_id", "seq", "name", "attempt", "issued_at"),
    R.CompletionSent: ("run_id", "seq", "sent_at"),
    R.CompletionDone: ("run_id", "seq", "value", "failure", "done_at"),
    # Cron schedules belong to a workflow, not to a run: the second field is
    # the workflow's name.
    R.ScheduleArmed: ("workflow", "cron", "timezone", "armed_at"),
    R.ScheduleFired: ("workflow", "instant", "outcome", "workflow_id", "at"),
    R.SchedulePaused: ("workflow", "paused", "at"),
    # `handle.update`: applied after the code asked for `position` operations
    # (top level), so a replay applies it again at the same point.
    R.UpdateApplied: (
        "run_id",
        "update_id",
        "name",
        "arg",
        "position",
        "result",
        "failure",
        "applied_at",
    ),
    # Why a run's code stopped (its code does not match its journal), so every
    # process sees it `stuck`; and that it went on (`resume`, or code that matches).
    R.RunStuck: ("run_id", "message", "stuck_at"),
    R.RunUnstuck: ("run_id", "at"),
    # Composition (`ctx.child`, `ctx.start_child`, `ctx.signal_workflow`,
    # `ctx.cancel_workflow`), in the parent's (sender's) journal. A child's start
    # comes first, then the child's own `RunStarted` (origin {"parent": ...}); its
    # input is in both, so that recovery can start a child whose `RunStarted` a
    # crash cut off. `error` is the refusal the code got (an id in use, an
    # unknown or closed target), recorded so that replay gets the same.
    R.ChildStarted: (
        "run_id",
        "seq",
        "workflow_id",
        "child_run_id",
        "workflow",
        "input",
        "deadline",
        "parent_close",
        "error",
        "started_at",
    ),
    R.ChildClosed: ("run_id", "seq", "child_run_id", "status", "result", "failure", "closed_at"),
    # A signal sent comes first, then the target's `SignalReceived` with `signal_id`.
    R.SignalSent: (
        "run_id",
        "seq",
        "workflow_id",
        "target_run_id",
        "signal_id",
        "name",
        "value",
        "error",
        "sent_at",
    ),
    R.CancelSent: ("run_id", "seq", "workflow_id", "target_run_id", "reason", "error", "sent_at"),
    # `ctx.patched(patch_id)` (and `deprecate_patch`) reached live: from here on this
    # run takes the patched branch, on every replay too.
    R.PatchMarked: ("run_id", "seq", "patch_id"),
    # `ctx.set_attributes`: merged into the run's search attributes (null removes a key).
    R.AttributesSet: ("run_id", "seq", "attributes", "set_at"),
    # `current_ctx().heartbeat(details)` from a running step's function: the latest of
    # an attempt's heartbeats, coalesced (at most one record every `beats.EVERY_S`).
    # `details` is what `progress()` gives the next attempt, after a crash too. `number`
    # counts the step's heartbeat records (1, 2, ...): a run keeps only the latest, so
    # the numbers before it account for the records its checkpoints no longer hold.
    R.StepHeartbeat: ("run_id", "seq", "name", "attempt", "details", "beat_at", "number"),
    # `engine.limit(name, permits)`: the size of a named limit, from here on.
    R.LimitSet: ("name", "permits", "set_at"),
    # An item a step function appended to stream `name` of its run (`current_ctx().
    # stream(name)` in a step), in the attempt it came from; `own`: the stream is the
    # step's (`scope="step"`), closed when the step ends.
    R.StepStreamAppended: ("run_id", "seq", "step", "name", "attempt", "item", "own"),
    # An update whose handler is `async def` was accepted at `position` (the code was
    # waiting in that top-level operation): its handler runs from there, its own
    # operations numbered "<position>.u<n>.<k>", and its `UpdateApplied` follows.
    R.UpdateAccepted: ("run_id", "update_id", "name", "arg", "position", "accepted_at"),
}

SCHEDULES = {R.ScheduleArmed, R.ScheduleFired, R.SchedulePaused}
"""Record types of cron schedules (not of a run)."""
NOT_OF_A_RUN = SCHEDULES | {R.LimitSet}
"""Record types of no run: the schedules', and the sizes of limits."""

CLOSES = {
    R.RunCompleted,
    R.RunFailed,
    R.RunTerminated,
    R.RunCancelled,
    R.RunTimedOut,
    R.RunReset,
    R.RunContinuedAsNew,
}
"""Record types that close a run."""

_TYPES = {int(r): r for r in R}

PAYLOAD_DEPTH_MAX = 200
"""Deepest nesting of arrays and objects in a value the engine records. orjson writes
at most `ENCODE_DEPTH_MAX` levels, and a recorded value sits a few levels deeper in a
checkpoint, a history-store row and an HTTP answer: a value accepted deeper than this
would be recorded, then fail there."""
ENCODE_DEPTH_MAX = 254
"""orjson's own limit: deeper values raise `TypeError: Recursion limit reached`."""


def too_deep(value: Any, encoded: bytes) -> bool:
    """Whether `value` (encoded as `encoded`) nests over `PAYLOAD_DEPTH_MAX` levels.

    Counting brackets first keeps it free for most values; only one with more
    brackets than the limit is encoded again, wrapped in as many levels as the
    limit leaves to orjson's, which fails exactly when the value is too deep.
    """
    if encoded.count(b"[") + encoded.count(b"{") <= PAYLOAD_DEPTH_MAX:
        return False
    wrapped = value
    for _ in range(ENCODE_DEPTH_MAX - PAYLOAD_DEPTH_MAX):
        wrapped = [wrapped]
    try:
        orjson.dumps(wrapped)
    except TypeError:
        return True
    return False


def encode(kind: R, *fields: Any) -> bytes:
    """The payload of one record. Encoded values go in as `orjson.Fragment`."""
    return orjson.dumps((int(kind), *fields))


def decode(payload: bytes) -> list[Any]:
    """The fields of a record, its type code first.

    Raises:
        ValueError: the payload is not a record this version knows.
    """
    rec = orjson.loads(payload)
    if not isinstance(rec, list) or not rec or rec[0] not in _TYPES:
        raise ValueError("not a fusee record")
    if len(rec) != 1 + len(FIELDS[_TYPES[rec[0]]]):
        raise ValueError(f"record {R(rec[0]).name} has {len(rec) - 1} fields")
    return rec


def as_dict(lsn: int, rec: list[Any]) -> dict[str, Any]:
    """A record as a readable mapping, for `history()` and `fusee history`."""
    kind = R(rec[0])
    out: dict[str, Any] = {"lsn": lsn, "type": kind.name}
    out.update(zip(FIELDS[kind], rec[1:], strict=True))
    return out


INSTANTS = frozenset(
    {f for fields in FIELDS.values() for f in fields if f.endswith("_at")}
    | {"at", "deadline", "instant"}
)
"""Fields that hold an instant (Unix seconds in the journal)."""


def as_json(record: dict[str, Any]) -> dict[str, Any]:
    """A record from `as_dict` in the JSON shape that `fusee history --json` and the
    HTTP API give: instants in ISO 8601 (UTC), and the operation number `seq` an
    integer (the top-level operation) beside `op`, the operation's full path as a
    string ("3", or "3.1" for the first branch of operation 3's `ctx.all`)."""
    out = dict(record)
    for name in INSTANTS.intersection(record):
        at = record[name]
        if isinstance(at, int | float) and not isinstance(at, bool):
            out[name] = datetime.fromtimestamp(at, UTC).isoformat()
    seq = record.get("seq")
    if isinstance(seq, str):
        out["seq"] = int(seq.split(".", 1)[0])
        out["op"] = seq
    return out
