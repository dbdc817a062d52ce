"""The in-memory state of runs, rebuilt from the journal on open.

`Run` holds what the journal says of one run: its identity, each operation
recorded so far by `seq`, and how it closed. `apply` folds one record into
it; the engine calls it both for records read on open and for records it
appends, so memory and journal cannot tell different stories.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from fusee_runtime.engine.fold import OP_RECORDS, RUN_RECORDS
from fusee_runtime.engine.waits import utc, waiting
from fusee_runtime.errors import Failure
from fusee_runtime.model.json import Json
from fusee_runtime.model.op_records import StepHeartbeat
from fusee_runtime.model.ops import Op, OpT, Pending, StepOp, StreamAppendOp, StreamCloseOp
from fusee_runtime.model.records import (
    CLOSED_AS,
    FailureJson,
    Record,
    RunCancelled,
    RunCompleted,
    RunContinuedAsNew,
    RunFailed,
    RunReset,
    RunStarted,
    RunTerminated,
    RunTimedOut,
)
from fusee_runtime.model.run import RunInfo, Status

if TYPE_CHECKING:
    from fusee_runtime.execution import Execution


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
class Run:
    """One run of a workflow id."""

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
    records: list[tuple[int, Record]] = field(default_factory=list)
    # The latest `StepHeartbeat` of each step, by seq: the only one `records` keeps.
    beat_records: dict[str, StepHeartbeat] = field(default_factory=dict)
    last_lsn: int = 0
    # How it closed, as recorded; `status` turns closed once that is durable.
    closing: Status | None = None
    close_lsn: int | None = None
    status: Status = Status.RUNNING
    result: Json = None
    failure: Failure | None = None
    reason: str | None = None
    closed_at: float | None = None
    error: str | None = None
    successor: str | None = None
    task: asyncio.Task[None] | None = None
    closed: asyncio.Future[None] | None = None
    # Futures of live code waiting for a pending operation, by seq.
    waiters: dict[str, asyncio.Future[None]] = field(default_factory=dict)
    parked: bool = False
    # The execution of the run's code now (none while parked, or with no code running here).
    execution: Execution | None = None
    # What the run is doing now, for people (`fusee start` shows it).
    current: str | None = None
    # Its steps waiting for a permit of a limit now (not recorded): by seq, the
    # step's name and the limit's (with its key: "name/key").
    permit_waits: dict[str, tuple[str, str]] = field(default_factory=dict)
    # `ctx.on_query` and `ctx.on_update` handlers ((handle, validate) for updates),
    # as the code registered them last (kept while parked).
    queries: dict[str, Any] = field(default_factory=dict)
    updates: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    # Top-level operations the code has asked for so far, and the kind of the last:
    # where an update applied now happens, as a replay will see it.
    position: int = 0
    position_kind: type[Op] | None = None
    # Updates applied: by position, (update_id, name, arg) in order; by id, (lsn,
    # result, failure) for an update sent again with the same id.
    update_log: dict[int, list[tuple[str, str, Json]]] = field(default_factory=dict)
    updates_done: dict[str, tuple[int, Json, FailureJson | None]] = field(default_factory=dict)
    update_lsn: int = 0  # where the latest update was recorded
    # Async handlers' updates by id, in the order accepted, with where (`UpdateAccepted`);
    # callers waiting for one (not recorded): each gets its `UpdateApplied`'s lsn (0: none).
    updates_accepted: dict[str, int] = field(default_factory=dict)
    update_waiters: dict[str, asyncio.Future[int]] = field(default_factory=dict)
    # Search attributes (`ctx.set_attributes`), as the journal left them.
    attributes: dict[str, Any] = field(default_factory=dict)
    # How the run was made when not by a `RunStarted` alone (a reset's inherited
    # journal, or a continue-as-new's carried state), as JSON: checkpoints and the
    # history store keep it, so the run is rebuilt without the run it came from.
    creation: dict[str, Any] | None = None

    def apply(self, lsn: int, rec: Record) -> Op | None:
        """Folds one record of this run into its state; returns the op it resolved, if any."""
        cls = type(rec)
        if cls is StepHeartbeat:
            self._replace_beat(cast(StepHeartbeat, rec))
        self.records.append((lsn, rec))
        self.last_lsn = lsn
        fold = OP_RECORDS.get(cls)
        if fold is not None:
            return self._resolved(lsn, fold(self, rec, lsn))
        fold = RUN_RECORDS.get(cls)
        if fold is not None:
            return fold(self, rec, lsn)
        if cls is RunStarted and self.ops:
            self._inherit_streams()
        elif cls in CLOSED_AS:
            self._close(lsn, rec)
        return None

    def _resolved(self, lsn: int, op: Op | None) -> Op | None:
        """An op a record at `lsn` ended is done there, and so are the streams its step
        owned (a step's end closes them)."""
        if op is not None and op.done:
            op.done_lsn = lsn
            for name in (op.owns if isinstance(op, StepOp) else None) or ():
                self.stream(name).closed_lsn = lsn
        return op

    def _replace_beat(self, rec: StepHeartbeat) -> None:
        """Drops the step's previous heartbeat record: the run keeps only the latest of
        each step, so a step beating for hours does not grow its checkpoints."""
        old = self.beat_records.get(rec.seq)
        self.beat_records[rec.seq] = rec
        if old is None:
            return
        records = self.records
        for i in range(len(records) - 1, -1, -1):  # usually near the end
            if records[i][1] is old:
                # A new list: a checkpoint's thread may be cutting the old one at a
                # length it counted, so a list once handed out only ever grows.
                self.records = records[:i] + records[i + 1 :]
                return

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

    def _inherit_streams(self) -> None:
        """A reset run starts with the operations it kept: their stream items are its own,
        since its code replays those appends without writing them again."""
        kept: list[tuple[int, StreamAppendOp | StreamCloseOp]] = [
            (op.lsn, op)
            for op in self.ops.values()
            if isinstance(op, StreamAppendOp | StreamCloseOp)
            and op.lsn is not None
            and not op.cancelled
        ]
        for op in self.ops.values():  # and what its steps appended, in their streams
            if not isinstance(op, StepOp):
                continue
            for name, items in (op.streamed or {}).items():
                kept += [(lsn, StreamAppendOp(name, value=item)) for lsn, item in items]
                if op.done and name in (op.owns or ()):
                    kept.append((items[-1][0], StreamCloseOp(name)))
        for lsn, op in sorted(kept, key=lambda k: k[0]):
            if isinstance(op, StreamAppendOp):
                self.stream(op.name).items.append((lsn, op.value))
            else:
                self.stream(op.name).closed_lsn = lsn

    def _close(self, lsn: int, rec: Record) -> None:
        self.closing = CLOSED_AS[type(rec)]
        self.close_lsn = lsn
        if isinstance(rec, RunCompleted):
            self.result, self.closed_at = rec.result.value, rec.closed_at
        elif isinstance(rec, RunFailed):
            self.failure, self.closed_at = Failure.from_json(rec.failure), rec.closed_at
            self.error = str(self.failure)
        elif isinstance(rec, RunContinuedAsNew):
            self.successor, self.closed_at = rec.new_run_id, rec.closed_at
        elif isinstance(rec, RunTerminated | RunCancelled | RunTimedOut | RunReset):
            self.reason, self.closed_at = rec.reason, rec.closed_at
            self.error = f"{self.closing}: {rec.reason}"
        self.pending.clear()
        for waiter in self.update_waiters.values():  # their handlers stop here: 0, not applied
            if not waiter.done():
                waiter.set_result(0)
        self.update_waiters.clear()

    @property
    def is_open(self) -> bool:
        return self.closing is None

    @property
    def parent(self) -> dict[str, Any] | None:
        """The run that started this one as its child: {"id", "run_id", "seq", "close"}."""
        origin = self.origin
        return origin.get("parent") if origin else None

    def paused_ops(self) -> list[str]:
        return [seq for seq, op in self.pending.items() if isinstance(op, StepOp) and op.paused]

    def info(self) -> RunInfo:
        return RunInfo(
            id=self.workflow_id,
            run_id=self.run_id,
            workflow=self.workflow,
            status=self.status,
            started_at=utc(self.started_at),
            closed_at=utc(self.closed_at) if self.closed_at and not self.status.is_open else None,
            # Why it closed shows once the close is durable, with the closed status.
            error=self.error if self.closing is None or not self.status.is_open else None,
            attributes=dict(self.attributes),
            failure=self.failure.to_json() if self.failure and not self.status.is_open else None,
            waiting=waiting(self) if self.status.is_open else (),
            parent=(self.parent["id"], self.parent["run_id"]) if self.parent else None,
        )
