"""Updates whose handler is `async def`: they run steps, sleep and wait like workflow code.

An update is accepted where the run's code waits (a sleep, a signal, a step
in flight, a child, inside `ctx.all` or `ctx.race`): `UpdateAccepted` records
it with the top-level operation the code waits in (its position), and once
that is durable its handler runs as a task of the run's execution. The
handler's operations are numbered apart, `"<position>.u<n>.<k>"` for the
n-th update the run accepted, so they never take a number the code would
take; they are recorded like the code's, and the handler's outcome is
recorded as `UpdateApplied`, whose durability the caller waits for.

An update runs as a unit where it was accepted: while a handler runs, the
workflow code does not go on past an operation that was resolved after the
update was accepted (a timer that fires meanwhile, a step that returns): it
goes on once the handler returned. On replay the same holds by position in
the journal: an operation resolved before the update was accepted returns at
once, one resolved after waits for the handler, and the handler starts where
the code first meets such an operation, or an operation not resolved yet. So
the state the code sees is the same on every replay. (In branches of
`ctx.all`/`ctx.race`, operations the branches resolved before the update
return before it on replay as they did live; the handler may start before a
branch has gone on from such an operation, so state that an update changes
is best not read in branches.)

The run's cancel never lands in a handler; it lands in the code. A handler
stopped by parking, the engine closing or a crash runs again from its
start on the next execution, replaying what it recorded; one that raised,
or whose result cannot be recorded, is recorded as failed and the caller
gets `Rejected` with the reason. A handler still running when the run
closes is stopped, and its caller told so.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import TYPE_CHECKING, Any

import orjson

from fusee_runtime.errors import CodecError, Failure, JournalFailed, Rejected
from fusee_runtime.journal.records import R
from fusee_runtime.scope import Cursor, Halt, JournalEnds, cursor_var, execution_var
from fusee_runtime.typed import decode, parameter

if TYPE_CHECKING:
    from fusee_runtime.engine.state import Op
    from fusee_runtime.execution import Execution

update_var: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "fusee_update", default=None
)
"""The id of the update whose handler runs in this task (None: workflow code)."""


class UpdateTasks:
    """The async update handlers of one execution: those accepted and not started yet
    (on replay), those running, and the hold they put on the code."""

    def __init__(self, execution: Execution) -> None:
        self.execution = execution
        self.waiting: list[tuple[int, str, str, Any, int]] = []
        """Not started yet: (accepted lsn, update id, name, arg, position)."""
        self.running: dict[str, tuple[int, asyncio.Task[None]]] = {}
        """By update id: where it was accepted, and its handler's task."""

    def accepted(self, update_id: str, name: str, arg: Any, position: int, now: bool) -> None:
        """An update accepted at `position`: its handler starts `now` (live), or where
        replay meets the first operation resolved after it (`due`)."""
        if update_id in self.running or any(w[1] == update_id for w in self.waiting):
            return
        lsn = self.execution.run.updates_accepted[update_id]
        self.waiting.append((lsn, update_id, name, arg, position))
        if now:
            self.due(None)

    def due(self, lsn: int | None) -> None:
        """Starts the handlers accepted before `lsn` (None: all of them)."""
        start = [w for w in self.waiting if lsn is None or w[0] < lsn]
        if not start:
            return
        self.waiting = [w for w in self.waiting if w not in start]
        for accepted, update_id, name, arg, position in start:
            n = list(self.execution.run.updates_accepted).index(update_id) + 1
            context = contextvars.Context()
            context.run(self._enter, Cursor(f"{position}.u{n}."), update_id)
            task = asyncio.get_running_loop().create_task(
                self._handle(update_id, name, arg, position), context=context
            )
            self.running[update_id] = (accepted, task)

    def _enter(self, cursor: Cursor, update_id: str) -> None:
        execution_var.set(self.execution)
        cursor_var.set(cursor)
        update_var.set(update_id)

    async def held(self, op: Op | None) -> None:
        """Holds workflow code that goes on from `op` while an update accepted before
        `op` was resolved runs (None: resolved live, now); a handler's own code is not
        held."""
        if update_var.get() is not None:
            return
        lsn = op.done_lsn if op is not None else None
        self.due(lsn)
        while True:
            running = [
                t for a, t in self.running.values() if (lsn is None or a < lsn) and not t.done()
            ]
            if not running:
                return
            await asyncio.wait(running)
            self.execution.check_live()

    def cancel(self) -> None:
        """The execution ends (parked, halted, closed): its handlers stop; the next
        execution runs them again from the start."""
        for _, task in self.running.values():
            task.cancel()
        self.running.clear()
        self.waiting.clear()

    async def _handle(self, update_id: str, name: str, arg: Any, position: int) -> None:
        execution = self.execution
        run, host = execution.run, execution.host
        failure: Failure | None = None
        result: Any = None
        try:
            entry = run.updates.get(name)
            if entry is None:
                execution.stuck(
                    f"replay mismatch after operation #{position}: the journal holds update "
                    f"{name!r}, the code has no handler for it (ctx.on_update)"
                )
            handle = entry[0]
            try:
                value = decode(parameter(handle, 0), arg, f"the argument of update {name!r}")
            except CodecError as e:
                execution.stuck(f"replay of update {name!r} after operation #{position}: {e}")
            result = await handle(value)
        except (Halt, JournalEnds, JournalFailed, asyncio.CancelledError):
            return  # stopped with the execution: it runs again in the next one
        except Exception as e:
            failure = Failure.of(e)
        finally:
            self.running.pop(update_id, None)
        if update_id in run.updates_done or not run.is_open or host.closing:
            return  # replayed: its outcome is recorded already
        encoded = b"null"
        if failure is None:
            try:
                encoded = host.encode(result, f"the result of update {name!r}")
            except CodecError as e:
                failure = Failure.of(e)
        wire: Any = None
        if failure is not None:
            encoded, wire = b"null", failure.to_json()
            if len(orjson.dumps(wire)) > host.config.payload_bytes_max // 2:
                wire = Failure(f"{failure.kind}: {failure.message[:200]}", kind=failure.kind)
                wire = wire.to_json()
        # Its argument is in its `UpdateAccepted` already.
        rec = [R.UpdateApplied, run.run_id, update_id, name, None, position]
        now = host.clock.now()
        host.append(run, [*rec, orjson.loads(encoded), wire, now])


def outcome(run: Any, update_id: str, name: str, id: str) -> Any:
    """The result of an applied update, or `Rejected` with why it failed."""
    _, result, failure = run.updates_done[update_id]
    if failure is not None:
        raise Rejected(f"update {name!r} of run {id!r} failed: {Failure.from_json(failure)}")
    return result
