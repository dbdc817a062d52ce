"""Updates whose handler is `async def`: they run steps, sleep and wait like workflow code.

An update is accepted where the run's code waits (a sleep, a signal, a step
in flight, a child, inside `ctx.all` or `ctx.race`): `UpdateAccepted` records
it with the top-level operation the code waits in (its position), and its
handler runs at once, in the run's execution (its steps wait, as any step,
for what came before to be durable). Updates are applied one at a time, in
the order accepted: an async one waits for the one before it, and a plain
update sent while one is being applied is refused (send it again), since a
replay applies it after that one. The
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
the state the code sees is the same on every replay, in the branches of
`ctx.all`/`ctx.race` too. (Between branches, which of two that go on from
operations resolved before the update runs first may differ on replay, as
it may without updates.)

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
from fusee_runtime.model.payload import NULL, Payload
from fusee_runtime.model.records import UpdateApplied
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
    """The updates of one execution that run in turn: async handlers, and the plain
    updates a replay finds recorded after one at the same position. One runner task
    applies them in the order accepted, one at a time, and holds the code meanwhile."""

    def __init__(self, execution: Execution) -> None:
        self.execution = execution
        self.queue: list[tuple[int, str, str, Any, int]] = []
        """In turn: (accepted lsn, update id, name, arg, position)."""
        self.runner: asyncio.Task[None] | None = None
        self.current = 0
        """The accepted lsn of the update the runner applies now (0: none)."""
        self.current_id: str | None = None
        self.seen: set[str] = set()
        self.live = False
        """The code met the live frontier: every update queued is due, in turn."""
        self.waiting = 0
        """Waits of the handler running that may park the run (`Execution.waiting`)."""

    @property
    def busy(self) -> bool:
        """An update accepted here is not applied yet."""
        return bool(self.queue) or self.runner is not None

    @property
    def replaying(self) -> bool:
        """An update applied before (by an earlier execution) is to be applied again."""
        done = self.execution.run.updates_done
        if self.runner is not None and self.current_id in done:
            return True
        return any(queued[1] in done for queued in self.queue)

    def accepted(self, update_id: str, name: str, arg: Any, position: int, now: bool) -> None:
        """An update at `position` takes its turn: at once when `now` (live), else where
        replay meets the first operation resolved after it (`due`)."""
        if update_id in self.seen:
            return
        self.seen.add(update_id)
        run = self.execution.run
        lsn = run.updates_accepted.get(update_id) or run.updates_done[update_id][0]
        self.queue.append((lsn, update_id, name, arg, position))
        if now:
            self.due(None)

    def due(self, lsn: int | None) -> None:
        """The code met an operation resolved at `lsn` (None: not resolved yet, or live):
        the updates accepted before it start, in turn."""
        if lsn is None:
            self.live = True
        if self.runner is None and self.queue and (self.live or self.queue[0][0] < (lsn or 0)):
            context = contextvars.Context()
            context.run(execution_var.set, self.execution)
            self.runner = asyncio.get_running_loop().create_task(self._run(), context=context)

    async def held(self, op: Op | None) -> None:
        """Holds workflow code that goes on from `op` while an update accepted before
        `op` was resolved is applied (None: resolved live, now); an update's own code
        is not held."""
        if update_var.get() is not None:
            return
        lsn = op.done_lsn if op is not None else None
        while True:
            # Again after each runner: one may stop before an update accepted after it
            # was applied, which is due here all the same if accepted before `op`.
            self.due(lsn)
            if self.runner is None or (lsn is not None and self.current >= lsn):
                return
            await asyncio.wait([self.runner])
            self.execution.check_live()

    def cancel(self) -> None:
        """The execution ends (parked, halted, closed): its updates stop; the next
        execution applies them again from the start."""
        if self.runner is not None:
            self.runner.cancel()
        self.runner = None
        self.queue.clear()

    async def _run(self) -> None:
        run = self.execution.run
        try:
            while self.queue:
                accepted, update_id, name, arg, position = self.queue.pop(0)
                self.current, self.current_id = accepted, update_id
                if update_id not in run.updates_accepted:
                    try:
                        self.execution.apply_update(name, arg, position)  # a plain one
                    except Halt:
                        return  # stuck: the code halts at its next step too
                    continue
                n = list(run.updates_accepted).index(update_id) + 1
                cursor_var.set(Cursor(f"{position}.u{n}."))
                update_var.set(update_id)
                await self._handle(update_id, name, arg, position)
                update_var.set(None)
                done = run.updates_done.get(update_id)
                if self.queue and not self.live and (done is None or self.queue[0][0] > done[0]):
                    return  # accepted after this one was applied: due where replay says
        finally:
            if self.runner is asyncio.current_task():
                self.runner, self.current, self.current_id = None, 0, None
                self.execution.schedule_park()  # the code may wait where it can park
                self.execution.host.progressed()  # (`Execution.caught_up`)

    async def _handle(self, update_id: str, name: str, arg: Any, position: int) -> None:
        execution = self.execution
        run, host = execution.run, execution.host
        failure: Failure | None = None
        result: Any = None
        try:
            entry = run.live.updates.get(name)
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
        except (Halt, JournalEnds, JournalFailed):
            raise asyncio.CancelledError from None  # stopped with the execution: it runs again
        except Exception as e:
            failure = Failure.of(e)
        if update_id in run.updates_done or not run.is_open or host.closing or host.replay_only:
            return  # replayed: its outcome is recorded already (or is not to be, here)
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
        result, now = Payload(encoded), host.clock.now()
        host.append(
            run, UpdateApplied(run.run_id, update_id, name, NULL, position, result, wire, now)
        )


def outcome(run: Any, update_id: str, name: str, id: str) -> Any:
    """The result of an applied update, or `Rejected` with why it failed."""
    _, result, failure = run.updates_done[update_id]
    if failure is not None:
        raise Rejected(f"update {name!r} of run {id!r} failed: {Failure.from_json(failure)}")
    return result
