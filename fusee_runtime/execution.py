"""One execution of a run's code: replay, parking, cancellation and compensation.

A run's code runs from the top each time it is driven: on open, after a
wake-up from parking, after `resume`. Each time is an `Execution`. It
numbers the operations the code asks for (`next`), matches each against
what the run's journal holds at that number, and decides:

- the journal holds the same operation: its recorded outcome is returned
  and nothing runs (replay);
- the journal holds another operation: the run stops as `stuck`, with a
  message naming both (`stuck`); it never continues on a journal it does
  not match;
- the journal holds nothing there: the operation runs live.

The code also stops, without recording anything, when the run closed or the
engine is closing (`Halt`, which `except Exception` cannot swallow). When
all the code waits on timers, signals or a resume and nothing else runs,
the execution parks: the engine drops its coroutine and a later execution
replays up to the same point when something wakes it.

`Ctx` is the face of an execution that workflow code sees; the step runner,
streams, the run log and the engine talk to the execution itself, through
its public members.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, cast

from fusee_runtime.context import Ctx
from fusee_runtime.dsl import StepDef, StepOptions
from fusee_runtime.engine.state import Op, Run, top
from fusee_runtime.errors import (
    Cancelled,
    CodecError,
    Failure,
    JournalFailed,
    Rejected,
    StepFailed,
)
from fusee_runtime.model.op_records import OpCancelled, ValueRecorded
from fusee_runtime.model.ops import (
    AttributesOp,
    ChildOp,
    GroupOp,
    OpT,
    PatchOp,
    ResultOp,
    StepOp,
    ValueOp,
)
from fusee_runtime.model.payload import Payload
from fusee_runtime.scope import (
    NAME_CHARS_MAX,
    Cursor,
    GivenUp,
    Halt,
    JournalEnds,
    cursor_var,
    execution_var,
    handling,
    handling_var,
    step_var,
)
from fusee_runtime.steps import abandoned, run_live
from fusee_runtime.typed import decode, parameter, returns, step_result
from fusee_runtime.updates import UpdateTasks, update_var

if TYPE_CHECKING:
    from fusee_runtime.host import RunHost


@dataclass
class Ended:
    """How a run's code ended, for the engine to record: it returned `value`, or
    raised `error` (its compensations have run; `cancelled` when the error is the
    run's own cancel arriving)."""

    value: object = None
    error: Exception | None = None
    cancelled: bool = False


class Execution:
    """One run of a run's code from the top, against the run's journal."""

    def __init__(self, host: RunHost, run: Run) -> None:
        self.host = host
        self.run = run
        self.root = Cursor("")
        self.count = 0
        """Operations asked for so far (deterministic: the same on every replay)."""
        run.live.position, run.live.position_kind = 0, None  # the code starts again from the top
        # and registers its handlers again: those of the code that ran before are gone.
        run.live.queries.clear()
        run.live.updates.clear()
        self.halted: str | None = None
        self.parking = False
        self.park_scheduled = False
        # Live steps in flight (a run with one is not parked) and their tasks.
        self.busy = 0
        # Of those, the ones waiting out a retry's backoff: when all are, the run shows
        # as parked (`Run.status`), as it waits on the clock alone.
        self.backing_off = 0
        self.step_tasks: dict[str, asyncio.Task[Any]] = {}
        # Futures of timers, waits and paused steps the code is blocked on.
        self.awaiting: set[asyncio.Future[None]] = set()
        self.compensations: list[tuple[str, Callable[..., Any], tuple[Any, ...]]] = []
        # Concurrent groups in progress: a run inside one is never parked, since
        # a branch that finished may not have been seen by its group yet.
        self.groups = 0
        self.journal_end: JournalEnds | None = None
        """Where the replay checker's code stopped, reaching its journal's end."""
        self.updates: UpdateTasks | None = None
        """Handlers of async updates (made at the first one): `fusee_runtime.updates`."""
        self.frontier = max((top(s) for s in run.ops), default=0)
        """The last top-level operation the journal held when this execution began."""
        self.reached = False
        """The code asked for an operation past `frontier`, or for one not done yet."""
        self.ended = False
        self.ctx: Ctx = Ctx(self)

    # -- replay --------------------------------------------------------------------

    def next(self, cls: type[OpT], name: str) -> tuple[str, OpT | None]:
        """Takes the next operation number and what the journal holds there (an op of
        class `cls` named `name`: else the run is stuck, its code not matching)."""
        kind = cls.kind
        if handling_var.get():
            raise Rejected(
                f"a query or update handler cannot start operations ({kind} {name!r}): "
                "it reads or changes the workflow's state, nothing more"
            )
        self.check_live()
        if not isinstance(name, str) or not 0 < len(name) <= NAME_CHARS_MAX:
            raise Rejected(
                f"a {kind} name is a string of 1 to {NAME_CHARS_MAX} characters, not {name!r:.60}"
            )
        cursor = self._cursor()
        cursor.n += 1
        self.count += 1
        seq = f"{cursor.prefix}{cursor.n}"
        run = self.run
        held = run.ops.get(seq)
        if held is None and self.host.replay_only and cls not in (GroupOp, ResultOp):
            self.journal_ends(seq, kind, name)  # (a group or a wait on a child records nothing)
        if held is not None and (type(held) is not cls or held.name != name):
            self.stuck(
                f"replay mismatch at operation #{seq}: the journal holds {held.kind} "
                f"{held.name!r}, the code asks for {kind} {name!r}"
            )
        op = held if isinstance(held, cls) else None  # (`stuck` raised otherwise)
        if cursor is self.root:
            # Updates applied live after the code asked for this operation apply
            # here again, before anything else (a cancel) reaches the code.
            run.live.position, run.live.position_kind = cursor.n, cls
            if cursor.n in run.update_log:
                self._replay_updates(cursor.n)
            if not self.reached and (cursor.n > self.frontier or op is None or not op.done):
                self._reach(seq, op)
        if self.updates is not None and cls is not GroupOp and (op is None or not op.done):
            self.updates.due(None)  # replay meets the live frontier here (in a branch too)
        if op is not None:
            if op.cancelled and not op.retired and cls is StepOp:
                raise self.cancelled()
            if not op.done and cls not in (ValueOp, ChildOp) and self.cancel_lands():
                # A cancel whose request is durable but whose delivery was not
                # (a crash in between): it lands here, on replay. (Not at a child's
                # start: the child runs on, and a cancel lands where code waits.)
                raise self.deliver_cancel(seq, kind, name)
        elif seq in run.prefixes and cls is not GroupOp:
            self.stuck(
                f"replay mismatch at operation #{seq}: the journal holds a group of concurrent "
                f"operations (ctx.all or ctx.race), the code asks for {kind} {name!r}"
            )
        elif cls not in (ValueOp, GroupOp, PatchOp, AttributesOp) and self.cancel_lands():
            raise self.deliver_cancel(seq, kind, name)
        if op is None and run.stuck is not None:
            self.host.carried_on(run)  # live past the journal's end: the code matches it
        return seq, op

    def _reach(self, seq: str, op: Op | None) -> None:
        """The code replayed what the journal held: it asks for an operation past it, or
        for one not done (at `seq`)."""
        self.reached = True
        run = self.run
        if op is None or seq not in run.pending or type(op) is StepOp:
            # Past its waits: it runs (woken, or spawned again on an open, it showed
            # as parked until here: `Driver.spawn`).
            run.live.shown_parked = False
        self.host.progressed()  # handlers wait for it (`caught_up`)

    @property
    def caught_up(self) -> bool:
        """The code replayed what the journal held when this execution began (it asked
        for an operation past it, or for one not done yet, or it ended), and the update
        handlers applied again every update applied before: the state its query and
        update handlers see is the run's, and an update applies where the code waits."""
        if self.ended:
            return True
        return self.reached and (self.updates is None or not self.updates.replaying)

    def upcoming(self) -> str:
        """The number the next operation will take, without taking it."""
        cursor = self._cursor()
        return f"{cursor.prefix}{cursor.n + 1}"

    def _cursor(self) -> Cursor:
        return cursor_var.get() or self.root

    def _replay_updates(self, position: int) -> None:
        """Applies again, in order, the updates recorded after operation #`position`: an
        async handler's in turn, from where replay meets what came after it, and a
        plain one after it too (live it came once that one was applied)."""
        for update_id, name, arg in self.run.update_log[position]:
            if update_id in self.run.updates_accepted or (self.updates and self.updates.busy):
                self.update_tasks().accepted(update_id, name, arg, position, now=False)
            else:
                self.apply_update(name, arg, position)

    def apply_update(self, name: str, arg: Any, position: int) -> None:
        """Applies a plain update's handler again, as recorded after #`position`."""
        entry = self.run.live.updates.get(name)
        if entry is None:
            self.stuck(
                f"replay mismatch after operation #{position}: the journal holds update "
                f"{name!r}, the code has no handler for it (ctx.on_update)"
            )
        try:
            value = decode(parameter(entry[0], 0), arg, f"the argument of update {name!r}")
        except CodecError as e:
            self.stuck(f"replay of an update after operation #{position}: {e}")
        # If it raises, it did live too, and that was recorded.
        with contextlib.suppress(Exception), handling():
            entry[0](value)

    async def replay_updates(self) -> None:
        """In the replay checker, where the code stops at its journal's end: the updates
        recorded before it are applied again, as live they were (each handler stops
        at its own journal's end), so the state the handlers see is the run's."""
        updates = self.updates
        if updates is None:
            return
        updates.due(None)
        while updates.runner is not None:
            await asyncio.wait([updates.runner])

    def update_tasks(self) -> UpdateTasks:
        """The execution's async update handlers, made at the first."""
        if self.updates is None:
            self.updates = UpdateTasks(self)
        return self.updates

    def check_live(self) -> None:
        """Raises `Halt` once the run closed or the engine is closing."""
        if self.halted is None and not self.run.is_open:
            self.halted = "the run was closed"
        if self.halted is None and self.host.closing:
            self.halted = "the engine is closing"
        if self.halted is not None:
            raise Halt(self.halted)

    def journal_ends(self, seq: str, kind: str, name: str) -> NoReturn:
        """Stops the replay checker's code where it would run operation `seq` live.

        In a branch of `ctx.all` the group decides what the end means
        (`replayed_group`): a sibling's recorded failure may end the group
        first, as it ended it live; the end that reaches `run_code` is the one
        `journal_end` keeps."""
        raise JournalEnds(seq, kind, name)

    async def given_up(self, seq: str) -> NoReturn:
        """Waits, as operation `seq` that the journal gave up, until its group cancels
        this branch (as it did live); the replay checker's group settles it instead."""
        if self.host.replay_only:
            raise GivenUp(seq)
        await abandoned()
        raise AssertionError("unreachable: abandoned() waits until cancelled")

    async def replayed_group(self, tasks: list[asyncio.Task[Any]]) -> list[Any]:
        """`ctx.all` in the replay checker: every branch settles (returns, raises, or
        stops where the journal ends or gave it up), then the group ends as the run's
        did: with a branch's failure first (live, it ended the group and the others
        were cut off where they stood), else where the journal ends, else with the
        results; a branch left waiting for an operation the journal gave up is a
        mismatch (the code no longer fails where the run failed)."""
        await asyncio.wait(tasks)
        errors = [t.exception() for t in tasks if not t.cancelled()]
        for kinds in ((Exception,), (Halt,)):
            for e in errors:
                if isinstance(e, kinds) and not isinstance(e, JournalEnds | GivenUp):
                    raise e
        for e in errors:
            if isinstance(e, JournalEnds):
                raise e
        for e in errors:
            if isinstance(e, GivenUp):
                self.stuck(
                    f"replay mismatch at operation #{e.seq}: the journal gave it up (its "
                    "group moved on without it), the code waits for it"
                )
        return [t.result() for t in tasks]

    def stuck(self, message: str) -> NoReturn:
        """Stops the run as `stuck` (its code does not match its journal)."""
        self.halted = message
        self.host.mark_stuck(self.run, message)
        raise Halt(message)

    def finished(self) -> None:
        """Called when the code returned: it must have asked for every recorded operation."""
        later = [s for s in self.run.ops if top(s) > self.root.n]
        if later:
            first = min(later, key=top)
            op = self.run.ops[first]
            self.stuck(
                f"replay mismatch at operation #{first}: the journal holds {op.kind} "
                f"{op.name!r}, the code finished without asking for it"
            )

    # -- operations --------------------------------------------------------------------

    def value(self, name: str, make: Callable[[], Any]) -> Any:
        """A value made by `make()`, recorded: replay returns the recorded one."""
        if step_var.get() is not None or handling_var.get():
            # In a step function (maybe on another thread) or a query or update
            # handler: not workflow code; what gets recorded is the step's result,
            # or the update.
            return make()
        seq, op = self.next(ValueOp, name)
        if op is not None:
            return op.value
        value = make()
        self.host.append(self.run, ValueRecorded(self.run.run_id, seq, name, Payload.of(value)))
        return value

    async def run_step(
        self,
        name: str,
        fn: Callable[..., object],
        args: tuple[object, ...],
        kwargs: dict[str, object],
        opts: StepOptions,
    ) -> Any:
        """A step: its recorded outcome on replay, else it runs live."""
        if isinstance(fn, StepDef):
            fn = fn.fn
        seq, op = self.next(StepOp, name)
        if op is not None and op.retired:
            await self.given_up(seq)
        if op is not None and op.done:
            if self.updates is not None:
                await self.updates.held(op)
            if op.ok:
                return op.value if returns(fn) is None else self._typed(seq, fn, op.value, name)
            raise StepFailed(name, Failure.from_json(op.failure or {}))
        # Live too, the step's result is read back from its JSON, as a replay reads it.
        try:
            value = await run_live(self, seq, op, name, fn, args, kwargs, opts)
        except Exception as e:
            if self.updates is not None and not isinstance(e, Cancelled):  # a cancel goes on
                await self.updates.held(self.run.ops.get(seq))
            raise
        if self.updates is not None:
            await self.updates.held(self.run.ops.get(seq))
        return value if returns(fn) is None else self._typed(seq, fn, value, name)

    def _typed(self, seq: str, fn: Callable[..., object], data: Any, name: str) -> Any:
        """A step's recorded result read back into its type. One that was recorded
        decoded then: if it no longer does, the annotation changed, and the run stops
        as `stuck` (as for any code that no longer matches its journal) until the code
        is fixed and the run resumed."""
        try:
            return step_result(fn, data, name)
        except CodecError as e:
            self.stuck(f"replay mismatch at operation #{seq}: {e}")

    async def paused(self, seq: str, op: Op) -> None:
        """Waits until a paused step is resumed (the run is parked meanwhile)."""
        self.busy -= 1
        try:
            await self.await_op(seq, op, f"paused in step {op.name!r}: run `fusee resume`")
        finally:
            self.busy += 1

    async def await_op(self, seq: str, op: Op, doing: str) -> None:
        """Waits until the engine resolves a timer, wait or paused step."""
        run = self.run
        if not op.done and self.host.replay_only:
            self.journal_ends(seq, op.kind, op.name)
        if not op.done and not (type(op) is StepOp and not op.paused):
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            run.live.waiters[seq] = fut
            self.awaiting.add(fut)
            run.live.current = doing
            self.schedule_park()
            self.host.progressed()
            try:
                with self.waiting():
                    await fut
            except asyncio.CancelledError:
                if not op.done and self.retires_on_cancel():
                    # A losing race branch or an abandoned wait: retire it, so it
                    # neither fires later nor takes a signal meant for another.
                    self.host.append(run, OpCancelled(run.run_id, seq, op.kind, op.name))
                raise
            finally:
                self.awaiting.discard(fut)
                if run.live.waiters.get(seq) is fut:
                    del run.live.waiters[seq]
            run.live.current = None
        if self.updates is not None and not op.cancelled:
            await self.updates.held(op)
        if op.retired:
            await self.given_up(seq)
        if op.cancelled:
            raise self.cancelled()

    # -- parking ---------------------------------------------------------------------

    def schedule_park(self) -> None:
        """Looks, once the loop has run what is ready, whether the run can park."""
        if self.awaiting and not self.park_scheduled:
            self.park_scheduled = True
            asyncio.get_running_loop().call_soon(self._maybe_park)

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """Around a wait that may park the run: in an update's handler, counted, since
        the run parks only once a handler running waits too."""
        updates = self.updates if update_var.get() is not None else None
        if updates is not None:
            updates.waiting += 1
        try:
            yield
        finally:
            if updates is not None:
                updates.waiting -= 1

    def _maybe_park(self) -> None:
        """Parks the run when all its code, and an update's handler running, wait on
        timers, signals, children or a resume."""
        self.park_scheduled = False
        if self.busy or self.groups or not self.awaiting or self.halted is not None:
            return
        updates = self.updates
        if updates is not None and updates.runner is not None and not updates.waiting:
            return  # a handler between two operations: it parks the run when it waits
        if any(f.done() for f in self.awaiting):
            return
        run = self.run
        if run.live.task is None or run.live.execution is not self or not run.is_open:
            return
        if self._updates_left():
            return  # (they run now: the run parks once they are applied)
        self.parking = True
        self.halted = "parked"
        self.host.park(run)
        if self.updates is not None:
            self.updates.cancel()

    def _updates_left(self) -> bool:
        """Whether updates accepted are not applied yet; if so, they are given their turn
        now, where the code waits (what was accepted after an update replayed was
        applied waited for a `due` that the code, waiting in its last operation, would
        never call again: a run parked so, its updates' callers waited for ever).
        Updates are applied in the order accepted: the newest says for all."""
        run = self.run
        if self.updates is not None and self.updates.runner is not None:
            return False  # a handler waits (a timer, a signal): it parks with the run
        newest = next(reversed(run.updates_accepted), None)
        if newest is None or newest in run.updates_done:
            return False
        tasks = self.update_tasks()
        for position, entries in run.update_log.items():
            for update_id, name, arg in entries:
                if update_id in run.updates_accepted and update_id not in run.updates_done:
                    tasks.accepted(update_id, name, arg, position, now=False)
        tasks.due(None)
        return True

    # -- cancellation ----------------------------------------------------------------

    def cancelled(self) -> Cancelled:
        """The error the run's cancel raises in its code."""
        return Cancelled(f"run {self.run.workflow_id!r} was cancelled: {self.run.cancel_reason}")

    def cancel_lands(self) -> bool:
        """Whether a task cancellation is the run's cancel arriving (not parking or closing)."""
        run = self.run
        return (
            run.cancel_reason is not None
            and update_var.get() is None  # it lands in the code, not in an update's handler
            and not run.cancel_delivered
            and self.halted is None
            and run.is_open
            and not self.host.closing
        )

    def retires_on_cancel(self) -> bool:
        """Whether an operation cut off now is given up on (a race loser, say), rather
        than cut off by parking, a close or the engine closing."""
        return self.halted is None and self.run.is_open and not self.host.closing

    def deliver_cancel(self, seq: str, kind: str, name: str) -> Cancelled:
        """Records that the run's cancel interrupted the operation at `seq`."""
        run = self.run
        self.host.append(run, OpCancelled(run.run_id, seq, kind, name))
        return self.cancelled()

    async def run_compensations(self) -> None:
        """Runs the registered compensations as steps, newest first."""
        while self.compensations:
            name, fn, args = self.compensations.pop()
            try:
                await self.run_step(name, fn, args, {}, StepOptions())
            except (StepFailed, Cancelled) as e:
                self.host.log_compensation(self.run, name, e)


async def run_code(host: RunHost, run: Run, fn: Callable[..., object]) -> Ended | None:
    """Runs a run's code (again) from the top until it returns, fails, parks or halts.

    Returns how it ended, for the engine to record, or None when there is
    nothing to record: it parked, halted (stuck, closed, engine closing) or
    the journal failed.
    """
    execution = Execution(host, run)
    run.live.execution = execution
    execution_var.set(execution)
    try:
        return await _run(execution, fn)
    finally:
        if execution.updates is not None:
            execution.updates.cancel()  # an update's handler does not outlive the code
        execution.ended = True
        host.progressed()


async def _run(execution: Execution, fn: Callable[..., object]) -> Ended | None:
    host, run = execution.host, execution.run
    try:
        try:
            input = decode(parameter(fn, 1), run.input, f"the input of workflow {run.workflow!r}")
        except CodecError as e:  # checked at the start: the annotation changed since
            execution.stuck(f"replay mismatch: {e}")
        # (`@workflow` refused a function that is not `async def`.)
        result = await cast(Awaitable[object], fn(execution.ctx, input))
        if execution.halted is not None or not run.is_open:
            return None  # the code swallowed the cancellation of a park, close or terminate
        execution.finished()
    except JournalEnds as e:
        execution.journal_end = e
        await execution.replay_updates()
        return None
    except (Halt, JournalFailed):
        return None
    except asyncio.CancelledError:
        if execution.parking or host.closing or host.failed or not run.is_open:
            return None
        raise
    except Exception as e:
        if execution.halted is None and run.is_open:
            return await _settled(execution, e)
        return None
    return Ended(value=result)


async def _settled(execution: Execution, error: Exception) -> Ended | None:
    """The code raised: run the compensations, then say how it ended."""
    run = execution.run
    cancelled = isinstance(error, Cancelled) and run.cancel_reason is not None
    try:
        await execution.run_compensations()
    except JournalEnds as e:
        execution.journal_end = e
        return None
    except (Halt, JournalFailed):
        return None
    except asyncio.CancelledError:
        if execution.parking or execution.host.closing or execution.host.failed or not run.is_open:
            return None
        raise
    if not run.is_open:
        return None
    return Ended(error=error, cancelled=cancelled)
