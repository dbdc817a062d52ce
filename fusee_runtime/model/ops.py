"""A run's operations as the journal holds them: one class per kind of operation.

Workflow code asks for operations in order (`ctx.step`, `ctx.sleep`, ...), and each
is numbered (`seq`). What the journal says of one is folded into an instance of its
class, which has its own fields and no other's: a timer has when it fires, a child
its run and how it closed, a step its failed attempts. `kind` names the class in
records (`OpCancelled`), in a reset run's creation and in replay-mismatch messages.

Part of `fusee_runtime.model`: it imports nothing of the engine, the journal or the
control surface.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar, TypeVar

from fusee_runtime.model.json import Json, JsonObject
from fusee_runtime.model.records import FailureJson, Instant


@dataclass(slots=True)
class Op:
    """What every operation has: its name, whether and how it ended, and where."""

    kind: ClassVar[str]
    name: str
    done: bool = False
    ok: bool = True
    # Its result once done; a child's input until it closes.
    value: Json = None
    failure: FailureJson | None = None
    cancelled: bool = False
    # Cancelled because its `ctx.all`/`ctx.race` group stopped waiting for it,
    # not by the run's cancel: replay leaves it pending, as it was then.
    retired: bool = False
    # Where the op was resolved: update handlers order replay by it.
    done_lsn: int | None = None


@dataclass(slots=True)
class StepOp(Op):
    """A step (`ctx.step`, `@step`): its failed attempts, whether it is paused, its
    latest heartbeat and what its function appended to streams."""

    kind: ClassVar[str] = "step"
    attempts_failed: int = 0
    first_failed_at: Instant | None = None
    retry_at: Instant | None = None
    paused: bool = False
    # Its latest heartbeat (`current_ctx().heartbeat`): its details, which the next
    # attempt gets from `progress()`, when it came, and how many heartbeat records the
    # step has (the `number` of the latest).
    progress: Json = None
    beat_at: Instant | None = None
    beats: int = 0
    # Items its function appended to streams of the run, by stream (with the position
    # of each), and the streams that are the step's own, which its end closes.
    streamed: dict[str, list[tuple[int, Json]]] | None = None
    owns: list[str] | None = None


@dataclass(slots=True)
class CompletionOp(StepOp):
    """An `await_completion`: a step whose `send` hands a token out. `attempt`: the
    attempt that issued the token valid now; `issued`: how many tokens were issued
    (the number in the token: it only grows, also across a resume); `sent`: whether
    `send` returned."""

    kind: ClassVar[str] = "completion"
    attempt: int = 0
    issued: int = 0
    sent: bool = False


@dataclass(slots=True)
class ValueOp(Op):
    """A value recorded once (`ctx.now`, `ctx.uuid`, `ctx.random`, `ctx.record`)."""

    kind: ClassVar[str] = "value"


@dataclass(slots=True)
class TimerOp(Op):
    """A `ctx.sleep`: when it fires (None: never)."""

    kind: ClassVar[str] = "timer"
    fire_at: Instant | None = None


@dataclass(slots=True)
class WaitOp(Op):
    """A `ctx.wait_for` signal `name`: its deadline (None: none), and the signal it
    took (None: it timed out, or waits)."""

    kind: ClassVar[str] = "wait"
    fire_at: Instant | None = None
    signal_id: int | None = None


@dataclass(slots=True)
class StreamAppendOp(Op):
    """An item appended to stream `name` (`value`), at `lsn`: a reset run inherits
    the item with its position, which says when readers may see it."""

    kind: ClassVar[str] = "stream.append"
    lsn: int | None = None


@dataclass(slots=True)
class StreamCloseOp(Op):
    """Stream `name` closed, at `lsn`."""

    kind: ClassVar[str] = "stream.close"
    lsn: int | None = None


@dataclass(slots=True)
class Peer(Op):
    """An operation on another run: its workflow id (`peer`) and run id (`peer_run`;
    None: refused, see `failure`), and where it was recorded."""

    peer: str | None = None
    peer_run: str | None = None
    lsn: int | None = None


@dataclass(slots=True)
class ChildOp(Peer):
    """A child run (`name` is its id): its workflow, `parent_close`, deadline and how
    it closed; until it closes, `value` is its input (recovery starts it from there
    if a crash cut its `RunStarted` off)."""

    kind: ClassVar[str] = "child"
    workflow: str | None = None
    policy: str | None = None
    deadline: Instant | None = None
    status: str | None = None


@dataclass(slots=True)
class SignalSentOp(Peer):
    """A signal sent to another run (`name` is the signal's): its id there."""

    kind: ClassVar[str] = "signal_workflow"
    signal_id: int | None = None


@dataclass(slots=True)
class CancelSentOp(Peer):
    """A cancel sent to another run (`name` is its id; `value` the reason)."""

    kind: ClassVar[str] = "cancel_workflow"


@dataclass(slots=True)
class AttributesOp(Op):
    """`ctx.set_attributes`: `value` holds the changes."""

    kind: ClassVar[str] = "attributes"


@dataclass(slots=True)
class PatchOp(Op):
    """`ctx.patched` reached live (`name` is the patch id)."""

    kind: ClassVar[str] = "patch"


@dataclass(slots=True)
class ResultOp(Op):
    """Waiting for a child's result through its handle: recorded only when cancelled."""

    kind: ClassVar[str] = "result"


@dataclass(slots=True)
class GroupOp(Op):
    """A `ctx.all` or `ctx.race`: recorded only by its branches and a race's winner."""

    kind: ClassVar[str] = "group"


OPS: dict[str, type[Op]] = {
    cls.kind: cls
    for cls in (
        StepOp,
        CompletionOp,
        ValueOp,
        TimerOp,
        WaitOp,
        StreamAppendOp,
        StreamCloseOp,
        ChildOp,
        SignalSentOp,
        CancelSentOp,
        AttributesOp,
        PatchOp,
        ResultOp,
        GroupOp,
    )
}
"""Every operation class, by its `kind`."""

OpT = TypeVar("OpT", bound=Op)
"""An operation class, for what takes one and gives an op of it."""

Pending = TimerOp | WaitOp | StepOp | ChildOp
"""What a run's `pending` holds: timers and waits not resolved, paused steps (and
completions not done), children not closed."""


def op_to_json(op: Op) -> JsonObject:
    """`op` as a reset run's creation keeps it (a copy): its kind and its fields."""
    return {"kind": op.kind, **asdict(op)}


def op_from_json(data: Mapping[str, Any]) -> Op:
    """The op `op_to_json` wrote; also one written when an op had every kind's fields
    (those not of its kind are at their defaults there, and dropped).

    Raises:
        ValueError: an unknown kind.
        KeyError: no kind or name.
    """
    cls = OPS.get(data["kind"])
    if cls is None:
        raise ValueError(f"unknown operation kind {data['kind']!r}")
    own = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in own})
