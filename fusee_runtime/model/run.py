"""What a run is: what its journal says of it (`RunRecord`, folded by
`model/fold.py`), and as everyone outside the engine sees it: its status,
`RunInfo`, and what an open run waits for (`Waiting`, of a `WaitKind`).

Part of `fusee_runtime.model`, the engine's vocabulary: it imports nothing of the
engine, the journal or the control surface.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from fusee_runtime.errors import Failure
from fusee_runtime.model.json import Json
from fusee_runtime.model.op_records import StepHeartbeat
from fusee_runtime.model.ops import Op, OpT, Pending, StepOp
from fusee_runtime.model.records import FailureJson, Record
from fusee_runtime.model.status import Status


@dataclass(frozen=True)
class RunInfo:
    """One run, as `describe()` and `list()` show it.

    `failure` is the recorded failure of a failed run (its `kind`, `message`,
    `traceback` and `cause`, as `Failure.to_json` writes it); `waiting` says
    what an open run waits for, oldest first. `parent` is `(id, run_id)` of the
    run that started this one as its child (`ctx.child`), or None.
    """

    id: str
    run_id: str
    workflow: str
    status: Status
    started_at: datetime
    closed_at: datetime | None
    error: str | None
    attributes: dict[str, Any]
    failure: dict[str, Any] | None = None
    waiting: tuple[Waiting, ...] = ()
    parent: tuple[str, str] | None = None


class WaitKind(enum.StrEnum):
    """What an open run waits for (`Waiting.kind`, which says what each means); the
    values are the lowercase names."""

    BEGIN = "begin"
    SIGNAL = "signal"
    TIMER = "timer"
    RETRY = "retry"
    RESUME = "resume"
    COMPLETION = "completion"
    CHILD = "child"
    STEP = "step"
    PERMIT = "permit"
    RATE = "rate"
    QUEUE = "queue"
    WORKER = "worker"
    CANCEL = "cancel"


@dataclass(frozen=True)
class Waiting:
    """One thing an open run waits for, as `RunInfo.waiting` lists them.

    `kind` says what (`WaitKind`; its value is the lowercase name):

    - `begin`: a run started with `start_delay` or `start_at` begins at `until`;
    - `signal`: a `ctx.wait_signal` for signal `name`, `until` its timeout (None: none);
    - `timer`: a `ctx.sleep` (timer `name`) that fires at `until` (None: never);
    - `retry`: step `name` runs its next attempt at `until`; `detail` is the last
      failure;
    - `resume`: step `name` is paused until `fusee resume`; `detail` is its failure;
    - `completion`: the `ctx.await_completion` of step `name` waits for its token
      to be completed from outside;
    - `child`: child workflow `name` (its id) has not closed; `until` is its deadline;
    - `step`: step `name` is running and has sent a heartbeat: `detail` says when,
      and its details (`current_ctx().heartbeat`);
    - `permit`: step `name` waits for a permit of the limit `detail` names
      (`limit=`, with its key after a '/');
    - `rate`: step `name` waits for a slot of the rate `detail` names (`rate=`, with
      its key after a '/'), the next one free at `until`;
    - `queue`: the run waits in queue `name` to be let in (`start(queue=...)`);
      `detail` says its place ("2nd of 5 in key 'acme'");
    - `worker`: step `name` waits for a worker with the labels `detail` ("gpu,eu") to
      take its attempt (`@step(labels=...)`, `fusee serve --labels`);
    - `cancel`: a cancel was recorded (`detail`, its reason) and the run has not
      closed: its code has not acted on it yet (`name` None), or it was delivered
      (`name` "delivered") and the code is cleaning up.
    """

    kind: WaitKind
    name: str | None = None
    until: datetime | None = None
    detail: str | None = None


@dataclass
class Stream:
    """One stream of a run: its items with the position of each record, and
    where it was closed. Readers see an item once its position is durable."""

    items: list[tuple[int, Json]] = field(default_factory=list)
    closed_lsn: int | None = None


def top(seq: str) -> int:
    """The top-level operation number of a seq ("3" or "3.1.2" -> 3)."""
    return int(seq.split(".", 1)[0])


@dataclass
class RunRecord:
    """What the journal says of one run: its identity, each operation recorded so far
    by `seq`, and how it closed.

    Only the fold (`fusee_runtime.model.fold.apply`) writes it after it is made, one
    record at a time, both for records read on open and for records the engine
    appends, so memory and journal cannot tell different stories. What the engine
    does with a run right now (its task, who waits for it, its handlers) is not
    here: the engine's `Run` holds it apart, as `run.live`.
    """

    run_id: str
    workflow_id: str
    workflow: str
    input: Json
    started_at: float
    start_lsn: int
    deadline: float | None = None
    # How the run began when not by `start`: a reset, or a cron schedule's firing.
    origin: dict[str, Any] | None = None
    ops: dict[str, Op] = field(default_factory=dict)
    # Seqs that group concurrent operations (`ctx.all`, `ctx.race`).
    prefixes: set[str] = field(default_factory=set)
    races: dict[str, int] = field(default_factory=dict)
    # Timers, waits and paused steps not yet resolved, in the order they began.
    pending: dict[str, Pending] = field(default_factory=dict)
    # Signals received and not yet taken by a wait: (signal_id, name, value).
    signals: list[tuple[int, str, Json]] = field(default_factory=list)
    next_signal_id: int = 1
    # Streams by name, as `ctx.stream(name)` wrote them (held while the run is in memory).
    streams: dict[str, Stream] = field(default_factory=dict)
    # Signals handed over at creation by the run this one continues or resets.
    carried_signals: list[tuple[int, str, Json]] = field(default_factory=list)
    cancel_reason: str | None = None
    cancel_delivered: bool = False
    # Why the run's code stopped, as recorded (`RunStuck`), until it went on (`RunUnstuck`).
    stuck: str | None = None
    # Let in by its queue (`RunAdmitted`): a run started in a queue runs no code before.
    admitted: bool = False
    records: list[tuple[int, Record]] = field(default_factory=list)
    # The latest `StepHeartbeat` of each step, by seq: the only one `records` keeps.
    beat_records: dict[str, StepHeartbeat] = field(default_factory=dict)
    last_lsn: int = 0
    # How it closed, as recorded (final for everyone once that is durable).
    closing: Status | None = None
    close_lsn: int | None = None
    result: Json = None
    failure: Failure | None = None
    reason: str | None = None
    closed_at: float | None = None
    # Why it stopped or closed, for people (a stuck, a paused step, a failure).
    error: str | None = None
    successor: str | None = None
    # Updates applied: by position, (update_id, name, arg) in order; by id, (lsn,
    # result, failure) for an update sent again with the same id.
    update_log: dict[int, list[tuple[str, str, Json]]] = field(default_factory=dict)
    updates_done: dict[str, tuple[int, Json, FailureJson | None]] = field(default_factory=dict)
    update_lsn: int = 0  # where the latest update was recorded
    # Async handlers' updates by id, in the order accepted, with where (`UpdateAccepted`).
    updates_accepted: dict[str, int] = field(default_factory=dict)
    # Search attributes (`ctx.set_attributes`), as the journal left them.
    attributes: dict[str, Any] = field(default_factory=dict)
    # How the run was made when not by a `RunStarted` alone (a reset's inherited
    # journal, or a continue-as-new's carried state), as JSON: checkpoints and the
    # history store keep it, so the run is rebuilt without the run it came from.
    creation: dict[str, Any] | None = None

    def op_at(self, seq: str, cls: type[OpT], name: str) -> OpT:
        """The op at `seq`, made (of class `cls`, named `name`) by its first record.

        A record of another kind of op than the one at `seq` changes nothing of it: it
        gets an op of its own, kept nowhere. (A step's thread given up on, as its run's
        code moved on, may still beat or stream at a number the code now uses for a
        timer, say; the record is written before it is folded, so folding it must not
        fail, or the home would not open again.)
        """
        op = self.ops.get(seq)
        if op is not None:
            return op if isinstance(op, cls) else cls(name)
        made = self.ops[seq] = cls(name)
        if "." in seq:
            parts = seq.split(".")
            for k in range(1, len(parts)):
                if parts[k][0] == "u" or parts[k - 1][0] == "u":
                    continue  # "3" and "3.u1" of "3.u1.2": an update's numbers, no group
                self.prefixes.add(".".join(parts[:k]))
        return made

    def op_of(self, seq: str, cls: type[OpT]) -> OpT:
        """The op at `seq`, which its records made of class `cls`.

        Raises:
            TypeError: it is of another class (the engine's own mistake).
        """
        op = self.ops[seq]
        if not isinstance(op, cls):
            raise TypeError(f"operation #{seq} is a {op.kind}, not a {cls.kind}")
        return op

    def stream(self, name: str) -> Stream:
        stream = self.streams.get(name)
        if stream is None:
            stream = self.streams[name] = Stream()
        return stream

    @property
    def is_open(self) -> bool:
        return self.closing is None

    @property
    def begin_at(self) -> float | None:
        """When a run started with a delay begins (`start_delay`, `start_at`): its code runs
        from then on. None: at once."""
        origin = self.origin
        return origin.get("begin_at") if origin else None

    @property
    def queue(self) -> dict[str, Any] | None:
        """The queue the run was started in: {"name", "key", "priority"} (None: none)."""
        origin = self.origin
        return origin.get("queue") if origin else None

    @property
    def parent(self) -> dict[str, Any] | None:
        """The run that started this one as its child: {"id", "run_id", "seq", "close"}."""
        origin = self.origin
        return origin.get("parent") if origin else None

    def paused_ops(self) -> list[str]:
        return [seq for seq, op in self.pending.items() if isinstance(op, StepOp) and op.paused]
