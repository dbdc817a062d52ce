"""The fields of a history document (`history_doc`), each with its type, and how a
JSON value is checked against one.

A type here is a Python type expression, so that the table reads as the
records do: `str`, `int`, `float`, `bool`, `None`, `Json` (any JSON: a
value of the user's), the `NewType`s below for what JSON alone does not say (an
operation number, an instant, a failure), unions, and lists, tuples and
dicts of those. `conforms(value, tp)` checks a value as JSON gives it (an
integer is one of 64 bits, a bool is no integer); `says(tp)` and `what_is`
word a mismatch for people: "its workflow is a list, not a string".
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Callable
from typing import NewType, TypeGuard

from fusee_runtime.engine.state import Status
from fusee_runtime.engine.waits import INSTANT_MAX
from fusee_runtime.errors import CAUSES_MAX
from fusee_runtime.journal.records import R
from fusee_runtime.model.json import Json
from fusee_runtime.model.ops import OPS

INT_MIN, INT_MAX = -(2**63), 2**63 - 1
SEQ_CHARS_MAX = 1000
_SEQ = re.compile(r"[0-9]{1,18}(?:\.u?[0-9]{1,18})*")

# The types of fields beyond JSON's own: checked by `conforms` as described by `says`.
RunId = NewType("RunId", str)
"""The run's id: a string, the document's `run_id`."""
Seq = NewType("Seq", str)
"""An operation number: "3", "4.0.1" (a branch of a group), "3.u1.2" (an update's)."""
Instant = NewType("Instant", float)
"""Unix seconds, within `INSTANT_MAX` either side of 1970."""
Count = NewType("Count", int)
"""A whole number from 0 (an attempt, a signal id, an lsn, a position)."""
FailureJson = NewType("FailureJson", dict)  # (NewType needs a class: not dict[str, Json])
"""A recorded failure (`Failure.to_json`), its causes at most `CAUSES_MAX` deep."""
StatusName = NewType("StatusName", str)
"""A run status (`Status`)."""
OpKind = NewType("OpKind", str)
"""The kind of an operation (`model.ops.OPS`: "step", "timer", ...)."""

FIELD_TYPES: dict[R, tuple[object, ...]] = {
    R.RunStarted: (RunId, str, str, Json, Instant, Instant | None, dict[str, Json] | None),
    R.StepCompleted: (RunId, Seq, str, Json, Instant, Instant),
    R.StepFailed: (RunId, Seq, str, FailureJson, Instant, Instant),
    R.AttemptFailed: (RunId, Seq, str, Count, FailureJson, Instant, Instant | None, float, Instant),
    R.ValueRecorded: (RunId, Seq, str, Json),
    R.RunCompleted: (RunId, Json, Instant),
    R.RunFailed: (RunId, FailureJson, Instant),
    R.RunTerminated: (RunId, str, Instant),
    R.TimerStarted: (RunId, Seq, str, Instant | None),
    R.TimerFired: (RunId, Seq, Instant),
    R.SignalReceived: (RunId, Count, str, Json, Instant),
    R.WaitStarted: (RunId, Seq, str, Instant | None),
    R.WaitCompleted: (RunId, Seq, Count | None, Json, Instant),
    R.StepPaused: (RunId, Seq, str, Count, FailureJson, Instant, Instant),
    R.StepResumed: (RunId, Seq, Instant),
    R.CancelRequested: (RunId, str, Instant),
    R.OpCancelled: (RunId, Seq, OpKind, str),
    R.RunCancelled: (RunId, str, Instant),
    R.RunTimedOut: (RunId, str, Instant),
    R.RunReset: (RunId, str, Instant),
    R.RunContinuedAsNew: (RunId, str, Json, Instant),
    R.RaceWon: (RunId, Seq, Count),
    R.StreamAppended: (RunId, Seq, str, Json),
    R.StreamClosed: (RunId, Seq, str),
    R.CompletionIssued: (RunId, Seq, str, Count, Instant),
    R.CompletionSent: (RunId, Seq, Instant),
    R.CompletionDone: (RunId, Seq, Json, FailureJson | None, Instant),
    R.UpdateApplied: (RunId, str, str, Json, Count, Json, FailureJson | None, Instant),
    R.RunStuck: (RunId, str, Instant),
    R.RunUnstuck: (RunId, Instant),
    R.ChildStarted: (
        RunId,
        Seq,
        str,
        str | None,
        str,
        Json,
        Instant | None,
        str,
        FailureJson | None,
        Instant,
    ),
    R.ChildClosed: (RunId, Seq, str, StatusName, Json, FailureJson | None, Instant),
    R.SignalSent: (
        RunId,
        Seq,
        str,
        str | None,
        Count | None,
        str,
        Json,
        FailureJson | None,
        Instant,
    ),
    R.CancelSent: (RunId, Seq, str, str | None, str, FailureJson | None, Instant),
    R.PatchMarked: (RunId, Seq, str),
    R.AttributesSet: (RunId, Seq, dict[str, Json], Instant),
    R.StepHeartbeat: (RunId, Seq, str, Count, Json, Instant, Count),
    R.StepStreamAppended: (RunId, Seq, str, str, Count, Json, bool),
    R.UpdateAccepted: (RunId, str, str, Json, Count, Instant),
    R.RunAdmitted: (RunId, Instant),
    R.StartDebounced: (RunId, Json, Instant, Instant | None, Instant),
}
"""The type of each field of the records of a run, in `FIELDS` order."""


@dataclasses.dataclass
class _JsonField:
    value: Json


# `Json` as `get_type_hints` gives it for a field that says `Json`: unfolded one level.
_JSON_UNFOLDED = typing.get_type_hints(_JsonField)["value"]


def _marked(hint: object) -> object:
    """An operation's field type as these tables write it: any JSON value is `Json`,
    whether the field says `Json` or, as the operations once did, `typing.Any`."""
    return Json if hint is typing.Any or hint == _JSON_UNFOLDED else hint


_SIGNAL = tuple[Count, str, Json]
_UPDATE_DONE = tuple[Count, Json, FailureJson | None]
OP_FIELDS = {
    "kind": OpKind,
    **{
        f.name: _marked(typing.get_type_hints(cls)[f.name])
        for cls in OPS.values()
        for f in dataclasses.fields(cls)
    },
    "failure": FailureJson | None,
    **{name: Instant | None for name in ("first_failed_at", "retry_at", "fire_at", "beat_at")},
    "deadline": Instant | None,
    "streamed": dict[str, list[tuple[Count, Json]]] | None,
    **{name: Json for name in ("value", "progress")},  # (a forward reference at run time)
}
"""The fields of an operation a reset run inherited (`op_to_json` writes its kind and its
class's fields; an earlier version wrote every kind's fields for each)."""
CREATIONS: dict[str, dict[str, object]] = {
    "reset": {
        "attributes": dict[str, Json],
        "ops": dict[Seq, dict[str, Json]],
        "prefixes": list[Seq],
        "races": dict[Seq, Count],
        "pending": list[Seq],
        "carried_signals": list[_SIGNAL],
        "next_signal_id": Count,
        "update_log": list[tuple[Count, list[tuple[str, str, Json]]]],
        "updates_done": dict[str, _UPDATE_DONE],
        "updates_accepted": dict[str, Count],
    },
    "continued": {
        "run_id": RunId,
        "workflow_id": str,
        "workflow": str,
        "input": Json,
        "started_at": Instant,
        "start_lsn": Count,
        "deadline": Instant | None,
        "origin": dict[str, Json] | None,
        "carried_signals": list[_SIGNAL],
        "next_signal_id": Count,
        "updates_done": dict[str, _UPDATE_DONE],
        "attributes": dict[str, Json],
    },
}
"""The fields of each kind of `creation` (`engine.creation`), all of them there."""

STATUSES = frozenset(str(s) for s in Status)
"""The statuses a run has (`Status`)."""


def conforms(value: object, tp: object, depth: int = 0) -> bool:
    """Whether JSON `value` is of type `tp`: a type of `FIELD_TYPES`, `CREATIONS` or
    `Op`'s fields (str, int, float, bool, None, Json, the NewTypes above, unions,
    and lists, tuples and dicts of those)."""
    if tp is Json:
        return True
    if tp is type(None):
        return value is None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return any(conforms(value, arg, depth) for arg in typing.get_args(tp))
    simple = _SIMPLE.get(tp)
    if simple is not None:
        return simple(value)
    if tp is FailureJson:
        return _is_failure(value, depth)
    args = typing.get_args(tp)
    if origin is list:
        return isinstance(value, list) and all(conforms(v, args[0]) for v in value)
    if origin is tuple:
        return (
            isinstance(value, list | tuple)
            and len(value) == len(args)
            and all(conforms(v, a) for v, a in zip(value, args, strict=True))
        )
    if origin is dict:
        key, item = args
        return isinstance(value, dict) and all(
            conforms(k, key) and conforms(v, item) for k, v in value.items()
        )
    raise TypeError(f"no check for type {tp!r}")


# A document passed as Python objects may hold an `IntEnum` or a `StrEnum` (a record's
# type, a status) where JSON has a number or a string: subclasses count, bools do not.


def is_str(value: object) -> TypeGuard[str]:
    """Whether `value` is a string."""
    return isinstance(value, str)


def is_int(value: object) -> TypeGuard[int]:
    """Whether `value` is an integer of 64 bits (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and INT_MIN <= value <= INT_MAX


def _is_number(value: object) -> TypeGuard[int | float]:
    # (NaN and the infinities fail the comparison; no huge int is turned into a float.)
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and -INT_MAX <= value <= INT_MAX
    )


def _is_failure(value: object, depth: int) -> bool:
    if not isinstance(value, dict) or depth > CAUSES_MAX:
        return False
    if not (is_str(value.get("kind")) and is_str(value.get("message"))):
        return False
    if "traceback" in value and not conforms(value["traceback"], str | None):
        return False
    if "retryable" in value and not isinstance(value["retryable"], bool):
        return False
    cause = value.get("cause")
    return cause is None or _is_failure(cause, depth + 1)


_SIMPLE: dict[object, Callable[[object], bool]] = {
    str: is_str,
    RunId: is_str,
    bool: lambda v: isinstance(v, bool),
    int: is_int,
    Count: lambda v: is_int(v) and v >= 0,
    float: _is_number,
    Instant: lambda v: _is_number(v) and abs(v) <= INSTANT_MAX,
    Seq: lambda v: is_str(v) and len(v) <= SEQ_CHARS_MAX and _SEQ.fullmatch(v) is not None,
    StatusName: lambda v: is_str(v) and v in STATUSES,
    OpKind: lambda v: is_str(v) and v in OPS,
}

_SAYS: dict[object, str] = {
    str: "a string",
    RunId: "a run id (a string)",
    bool: "true or false",
    int: "an integer",
    Count: "a whole number from 0",
    float: "a number",
    Instant: "an instant (Unix seconds)",
    Seq: 'an operation number (a string: "3", "4.0.1")',
    StatusName: "a run status",
    OpKind: "an operation kind (" + ", ".join(sorted(OPS)) + ")",
    FailureJson: 'a failure ({"kind": ..., "message": ...})',
    type(None): "null",
    Json: "a JSON value",
}


def says(tp: object) -> str:
    """`tp` for people: 'a string', 'an instant (Unix seconds) or null'."""
    if tp in _SAYS:
        return _SAYS[tp]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(says(a) for a in args)
    if origin is list:
        return "a list" if args[0] is Json else f"a list of {says(args[0])}"
    if origin is tuple:
        return f"[{', '.join(says(a) for a in args)}]"
    if origin is dict and args[1] is not Json:
        return f"an object mapping {says(args[0])} to {says(args[1])}"
    return "an object"


def mismatch(name: str, value: object, tp: object) -> str:
    """What is wrong with `name` (of `value`, not of type `tp`), in words."""
    shown = what_is(value)
    expected = says(tp)
    if expected.startswith(shown):  # (a container of the wrong things)
        return f"{name} is not {expected}"
    return f"{name} is {shown}, not {expected}"


def what_is(value: object) -> str:
    """What `value` is, in a few words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and not INT_MIN <= value <= INT_MAX:
        return "an integer out of range"
    if isinstance(value, int | float):
        return quoted(value)
    if isinstance(value, str):
        return f"the string {quoted(value)}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def quoted(value: object) -> str:
    """`value` as a message shows it: a string quoted, either cut to 40 characters."""
    text = repr(str(value)) if isinstance(value, str) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."
