"""Talking to a running workflow: queries, updates and completion tokens.

A query reads a run's state through its `ctx.on_query` handler and records
nothing. An update changes it through its `ctx.on_update` handler and is
recorded (with its id, its result and where the code was), so a replay
applies it again at the same point; the caller gets the result once that
is durable. A completion token finishes an `await_completion` from outside
the workflow; tokens are signed with the home's secret
(`fusee_runtime.completions`), made when the first one is issued.

Handlers run on the engine's loop, in the engine that drives the run's code,
once that code has replayed its journal to where it waits (`_replayed`): a
run answers whether or not its code ran in this process before (a reopen, a
takeover, a wake-up from parking). An engine that runs no code (a passive
command) answers a query from a copy of the run replayed in memory
(`fusee_runtime.replayer.replayed`: no step runs, nothing is written), and
applies no update.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import TYPE_CHECKING, Any

import orjson

from fusee_runtime.completions import Awaited, Tokens, current_token, read_token
from fusee_runtime.engine.runs import RunTable
from fusee_runtime.engine.state import Run, Status, top
from fusee_runtime.engine.waits import utc
from fusee_runtime.errors import (
    CodecError,
    Failure,
    FuseeError,
    NotFound,
    Rejected,
    UpdatePending,
)
from fusee_runtime.model.op_records import CompletionDone
from fusee_runtime.model.ops import CompletionOp, GroupOp
from fusee_runtime.model.payload import NULL, Payload
from fusee_runtime.model.records import UpdateAccepted, UpdateApplied
from fusee_runtime.scope import NAME_CHARS_MAX, Halt, fresh_id, handling
from fusee_runtime.typed import decode, parameter
from fusee_runtime.updates import outcome

if TYPE_CHECKING:
    from fusee_runtime.engine.driver import Driver


class Handlers:
    """Queries, updates and completions of the runs an engine holds."""

    def __init__(self, driver: Driver, runs: RunTable, tokens: Tokens) -> None:
        self.driver = driver
        self.runs = runs
        self.tokens = tokens
        self.config = driver.config

    async def query(self, id: str, name: str, arg: object = None, run_id: str | None = None) -> Any:
        """The answer of a run to a query: `Engine.query` says what it raises."""
        if not self.driver.opened:
            self.driver.check_accepting()
        run = self.runs.get(id, run_id)  # a read: it answers while the engine stops, too
        if not run.is_open:
            raise Rejected(f"run {id!r} is {run.closing}: only open runs answer queries")
        _check_begun(run, id, "queries")
        if self.config.drive:
            await self._replayed(run)
        else:
            missing = self.runs.chain.missing()
            if missing is not None:  # (its code would get what it cannot read)
                raise missing
            run = await self._replayed_here(run)
        if run.status == Status.STUCK:
            # Its code stopped where it no longer matches the journal: the state its
            # handlers hold is not the run's.
            raise Rejected(
                f"run {id!r} is stuck: its code does not replay its journal, so its handlers "
                "cannot answer for it; `fusee resume` it once the code is fixed"
            )
        fn = self._handler(run, run.live.queries, "query", name, "answer queries")
        try:
            with handling():
                value = fn(arg)
            if inspect.isawaitable(value):
                if inspect.iscoroutine(value):
                    value.close()
                raise Rejected(f"query handler {name!r} must be a plain function, not async")
        except FuseeError:
            raise
        except Halt as e:  # a handler that asked the run's ctx for an operation
            raise Rejected(f"query {name!r} of run {id!r} failed: {e}") from None
        except Exception as e:
            raise Rejected(f"query {name!r} of run {id!r} failed: {type(e).__name__}: {e}") from e
        return orjson.loads(self.driver.encode(value, f"the answer to query {name!r}"))

    async def update(
        self,
        id: str,
        name: str,
        arg: object = None,
        update_id: str | None = None,
        run_id: str | None = None,
    ) -> Any:
        """Applies an update to a run; its result once durable: see `Engine.update`."""
        self.driver.check_accepting()
        run = self.runs.get(id, run_id)
        if run.is_open:
            _check_begun(run, id, "updates")
        await self._replayed(run)
        if update_id is not None:
            if not isinstance(update_id, str) or not 0 < len(update_id) <= NAME_CHARS_MAX:
                raise Rejected(f"an update id is a string of 1 to {NAME_CHARS_MAX} characters")
            if update_id in run.updates_accepted or update_id in run.updates_done:
                return await self._sent_before(run, id, name, update_id)
        if not run.is_open:
            raise Rejected(f"run {id!r} is {run.closing}: it takes no more updates")
        handle, validate = self._handler(run, run.live.updates, "update", name, "apply updates")
        is_async = inspect.iscoroutinefunction(handle)
        if self.config.drive:
            self._check_update_point(run, id, is_async)
        arg, encoded_arg = self._argument(id, name, arg, handle, validate)
        if is_async:
            return await self._accept(run, id, name, update_id, Payload(encoded_arg))
        self._check_not_applying(run, id, name)
        result, failure = self._call_plain(name, handle, arg, encoded_arg)
        at = self.driver.clock.now()
        uid = update_id or fresh_id()
        wire_failure = self._update_failure(failure, len(encoded_arg))
        applied = UpdateApplied(
            run.run_id,
            uid,
            name,
            Payload(encoded_arg),
            run.live.position,
            Payload.of(result),
            wire_failure,
            at,
        )
        await self.driver.wait_durable(self.driver.append(run, applied))
        if failure is not None:
            raise Rejected(f"update {name!r} of run {id!r} failed: {failure}")
        return result

    async def _sent_before(self, run: Run, id: str, name: str, update_id: str) -> Any:
        """The answer to an update sent again with its id: its result once applied and
        durable (the handler does not run again)."""
        done = run.updates_done.get(update_id)
        if done is None:
            return await self._applied(run, id, name, update_id)  # accepted, running
        done_lsn, done_result, done_failure = done
        await self.driver.wait_durable(done_lsn)
        if done_failure is not None:
            raise Rejected(
                f"update {name!r} of run {id!r} failed: {Failure.from_json(done_failure)}"
            )
        return done_result

    def _argument(
        self, id: str, name: str, arg: Any, handle: Any, validate: Any
    ) -> tuple[Any, bytes]:
        """An update's argument as its handler gets it, and as its record holds it
        (encoded); `Rejected` if its validator refuses it."""
        # Typed by the handler's first parameter (`fusee_runtime.typed`): the handler and
        # the validator get the argument read back from its JSON, as a replay gives it.
        shape = parameter(handle, 0)
        what = f"the argument of update {name!r}"
        encoded_arg = self.driver.encode(arg, what, shape)
        if shape is not None:
            arg = decode(shape, orjson.loads(encoded_arg), what)
        if validate is not None:
            try:
                validate(arg)
            except Exception as e:
                raise Rejected(f"update {name!r} of run {id!r} was refused: {e}") from e
        return arg, encoded_arg

    @staticmethod
    def _check_not_applying(run: Run, id: str, name: str) -> None:
        """Refuses a plain update while the run applies an earlier one."""
        execution = run.live.execution
        busy = execution is not None and execution.updates is not None and execution.updates.busy
        # An async update accepted and not applied yet counts too: the run may be parked,
        # or waking for it, with no execution to say so. A replay applies a plain update
        # after it, so applying this one now would answer from another state.
        pending = any(u not in run.updates_done for u in run.updates_accepted)
        if busy or pending:
            # After it, as a replay will apply it: the code is held until it is applied.
            raise Rejected(
                f"run {id!r} is applying an earlier update; send update {name!r} again once "
                "that one answered"
            )

    def _call_plain(
        self, name: str, handle: Any, arg: Any, encoded_arg: bytes
    ) -> tuple[Any, Failure | None]:
        """Runs a plain update handler: its result as JSON reads it back, or how it failed
        (result None). A failure is recorded all the same; an async result is refused."""
        failure: Failure | None = None
        result: Any = None
        try:
            with handling():
                result = handle(arg)
        except (Exception, Halt) as e:
            # Recorded all the same, whatever it raised: the handler may have changed
            # the state before it raised, and a replay must do the same.
            failure = Failure.of(e if isinstance(e, Exception) else Rejected(str(e)))
        if failure is None and inspect.isawaitable(result):
            # Its body never ran: nothing changed, nothing to record.
            if inspect.iscoroutine(result):
                result.close()
            raise Rejected(f"update handler {name!r} must be a plain function, not async")
        if failure is None:
            try:
                result = orjson.loads(self._encoded_result(name, result, len(encoded_arg)))
            except CodecError as e:
                failure = Failure.of(e)
        if failure is not None:
            result = None
        return result, failure

    def _encoded_result(self, name: str, result: Any, arg_bytes: int) -> bytes:
        """An update's result encoded; `CodecError` if it cannot be, or if it and the
        argument are over `Config.payload_bytes_max` together."""
        encoded = self.driver.encode(result, f"the result of update {name!r}")
        if len(encoded) + arg_bytes > self.config.payload_bytes_max:
            raise CodecError(
                f"update {name!r}: its argument and result are {arg_bytes} + "
                f"{len(encoded)} bytes, over the limit of "
                f"{self.config.payload_bytes_max} (Config.payload_bytes_max)"
            )
        return encoded

    async def _accept(
        self, run: Run, id: str, name: str, update_id: str | None, arg: Payload
    ) -> Any:
        """Records an async handler's update as accepted where the code waits, starts its
        handler once that is durable (a parked run's code runs again for it), and
        returns its result once applied and durable."""
        uid, position = update_id or fresh_id(), run.live.position
        now = self.driver.clock.now()
        lsn = self.driver.append(run, UpdateAccepted(run.run_id, uid, name, arg, position, now))
        # At once, where the code waits (its steps wait for the record to be durable).
        execution = run.live.execution
        if execution is not None and not run.live.parked:
            execution.update_tasks().accepted(uid, name, arg.value, position, now=True)
        else:
            self.driver.wake(run)
        await self.driver.wait_durable(lsn)
        return await self._applied(run, id, name, uid)

    async def _applied(self, run: Run, id: str, name: str, update_id: str) -> Any:
        """The result of an accepted update once its `UpdateApplied` is durable."""
        if update_id not in run.updates_done:
            # A failed journal or a stopping engine resolves the waiters it finds, once.
            self.driver.check_accepting()
            waiter = run.live.update_waiters.get(update_id)
            if waiter is None:
                waiter = asyncio.get_running_loop().create_future()
                run.live.update_waiters[update_id] = waiter
            if run.is_open:
                self.driver.wake(run)  # parked: its code runs again, and the handler with it
                await asyncio.shield(waiter)
            failed = self.driver.durability.failed
            if update_id not in run.updates_done and failed is not None:
                raise failed  # the journal failed: nothing more is acknowledged
            if update_id not in run.updates_done and run.is_open:
                raise UpdatePending(
                    f"update {name!r} of run {id!r} was accepted, and the engine stopped before "
                    "it was applied: its handler runs again when the run's code does; send it "
                    f"again with update id {update_id!r} for its result"
                )
            if update_id not in run.updates_done:
                raise Rejected(f"run {id!r} closed before update {name!r} was applied")
        await self.driver.wait_durable(run.updates_done[update_id][0])
        return outcome(run, update_id, name, id)

    async def _replayed(self, run: Run) -> None:
        """Returns once the run's code, if it runs here, replayed its journal to where it
        waits: its handlers are then those its code registered, over the state the
        journal gives it, wherever and whenever the code ran before (a reopen, a
        takeover, a wake-up from parking)."""
        if not self.config.drive:
            return

        def ready() -> bool:
            if not run.is_open or run.status == Status.STUCK or self.driver.closing:
                return True
            execution = run.live.execution
            if execution is not None and not execution.ended:
                return execution.caught_up
            # Parked (its handlers are those it parked with), or its code is to run again.
            return run.live.task is None or run.live.task.done()

        await self.driver.durability.wait_until(ready)

    async def _replayed_here(self, run: Run) -> Run:
        """`run` replayed in memory here, for an engine that runs no code (a command
        with no owner to ask): its handlers, over the state its journal gives."""
        from fusee_runtime.replayer import replayed  # (a passive engine's queries only)

        workflows = self.driver.workflows
        own = self.driver.defined(run.workflow)  # (an object's key: the engine's own code)
        if own is not None and run.workflow not in workflows:
            workflows = {**workflows, run.workflow: own}
        return await replayed(run, workflows)

    def _update_failure(self, failure: Failure | None, arg_bytes: int) -> Any:
        """A failure as the update's record carries it: cut to what fits beside the argument."""
        if failure is None:
            return None
        wire = failure.to_json()
        if arg_bytes + len(orjson.dumps(wire)) > self.config.payload_bytes_max:
            short = Failure(f"{failure.kind}: {failure.message[:200]}", kind=failure.kind)
            wire = short.to_json()
        return wire

    def _handler(self, run: Run, handlers: dict[str, Any], kind: str, name: str, to: str) -> Any:
        """The run's `kind` handler `name`, or `Rejected` saying why there is none."""
        found = handlers.get(name)
        if found is not None:
            return found
        if not self.config.drive and handlers is run.live.updates:  # (only code registers them)
            raise Rejected(
                f"no process runs the code of {run.workflow_id!r} to {to}: "
                "start `fusee serve` (or the command that drives it) first"
            )
        known = ", ".join(sorted(handlers)) or "none"
        raise Rejected(
            f"run {run.workflow_id!r} has no {kind} handler {name!r}; its handlers: {known}"
        )

    @staticmethod
    def _check_update_point(run: Run, id: str, is_async: bool) -> None:
        """Refuses an update where a replay could not apply it at the same point (an
        async handler's runs as a unit where the code waits, in a group too)."""
        if run.status == Status.STUCK:
            raise Rejected(f"run {id!r} is stuck: it takes no updates until it is resumed")
        execution = run.live.execution
        if not run.live.parked and execution is None:
            raise Rejected(f"run {id!r} is not running its code yet; send the update again")
        inside = run.live.position_kind is GroupOp or (execution is not None and execution.groups)
        if inside and not is_async:
            raise Rejected(
                f"run {id!r} is inside ctx.all or ctx.race; send the update again once it is past"
            )
        frontier = max((top(s) for s in run.ops), default=0)
        if run.live.position < frontier or run.live.position == 0:
            raise Rejected(f"run {id!r} is replaying its journal; send the update again")

    async def finish(self, token: str, value: Any, error: str | Failure | None) -> tuple[Run, str]:
        """Records how the `await_completion` of `token` ended (`error` None: with `value`);
        returns its run and seq once that is durable."""
        self.driver.check_accepting()
        run, seq = self._completing(token)
        now = self.driver.clock.now()
        if error is None:
            encoded = self.driver.encode(value, f"the completion of {run.ops[seq].name!r}")
            done = CompletionDone(run.run_id, seq, Payload(encoded), None, now)
        else:
            failure = error if isinstance(error, Failure) else Failure(str(error), kind="Failed")
            done = CompletionDone(run.run_id, seq, NULL, failure.to_json(), now)
        lsn = self.driver.append(run, done)
        await self.driver.wait_durable(lsn)
        return run, seq

    def awaited(self, id: str, run_id: str | None) -> list[Awaited]:
        """The completions the newest run of `id` (or its run `run_id`) waits for, with
        their current tokens (`Tokens.awaited`). A read: it answers while the engine
        stops, and in an engine that runs no code."""
        return self.tokens.awaited(self.runs.get(id, run_id))

    def _completing(self, token: str) -> tuple[Run, str]:
        secret = self.tokens.secret(create=False)
        if secret is None:  # this home never issued a token
            raise NotFound(f"{str(token)[:80]!r} is not a completion token of this home")
        run_id, seq, issued = read_token(secret, token)
        run = self.runs.by_id(run_id)
        op = run.ops.get(seq) if run is not None else None
        if run is None or not isinstance(op, CompletionOp):
            raise NotFound("the run that issued this completion token is not in this home")
        what = f"completion {op.name!r} of run {run.workflow_id!r}"
        if not run.is_open:
            raise Rejected(f"the {what} cannot finish: the run is {run.closing}")
        if op.done:
            raise Rejected(f"the {what} has already finished")
        if op.paused:
            raise Rejected(
                f"the {what} is paused (`send` failed at attempt {op.attempts_failed}): no token "
                f"finishes it until `fusee resume {run.workflow_id}` sends again with a new token"
            )
        if op.issued != issued:
            raise Rejected(
                f"this token of the {what} was replaced by a later one "
                f"(token {issued} of {op.issued}: `send` ran again)"
            )
        if current_token(op) is None:  # resumed: its next attempt issues a new token
            raise Rejected(
                f"the {what} was resumed: `send` runs again with a new token, which "
                "replaces this one"
            )
        return run, seq


def _check_begun(run: Run, id: str, what: str) -> None:
    """Raises `Rejected` for a run whose delayed start has not come, or that waits in its
    queue: no code of it has run, so no handler of it is there."""
    if run.status == Status.SCHEDULED:
        begins = utc(run.begin_at or 0).isoformat()
        raise Rejected(f"run {id!r} is scheduled to begin at {begins}: it takes no {what} before")
    if run.status == Status.QUEUED:
        place = run.live.queued() if run.live.queued is not None else ""
        raise Rejected(f"run {id!r} waits in its queue ({place}): it takes no {what} before")
