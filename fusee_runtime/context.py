"""`Ctx`: what workflow code calls to make durable progress.

Code between `ctx` calls must be deterministic: after a crash it runs again
from the top against the run's journal. Every operation it asks for takes
the next sequence number (`seq`); an operation the journal already holds at
that number returns its recorded outcome without running anything, and the
first one it does not hold runs live. Asking for another operation than the
one recorded at a number stops the run as `stuck`, with a message naming
both (`describe().error`): it never continues on a journal it does not
match. The replay itself is `fusee_runtime.execution`'s; `Ctx` is its face.

Each method says what it guarantees. Steps follow the durability contract:
a step's function runs only once every earlier record of its run is durable
(a `read_only` step skips that gate); its result is recorded and returned at
once, without waiting for the disk.
"""

from __future__ import annotations

import inspect
import random
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import orjson

from fusee_runtime import attributes as attributes_
from fusee_runtime import children, groups, versions
from fusee_runtime.children import ChildHandle
from fusee_runtime.completions import Completion
from fusee_runtime.dsl import Rate, RetryPolicy, StepDef, StepOptions, WorkflowDef, seconds
from fusee_runtime.engine.waits import until, utc, wake_at
from fusee_runtime.errors import Failure, Rejected, StepFailed
from fusee_runtime.model.op_records import TimerStarted, WaitStarted
from fusee_runtime.model.ops import CompletionOp, TimerOp, WaitOp
from fusee_runtime.scope import NAME_CHARS_MAX, Halt, execution_var, handling_var, step_var
from fusee_runtime.steps import run_live
from fusee_runtime.streams import StepStreamWriter, StreamWriter
from fusee_runtime.tracing import traceparent_of
from fusee_runtime.typed import decode, shape_of
from fusee_runtime.updates import update_var

if TYPE_CHECKING:
    from fusee_runtime.execution import Execution


class Ctx:
    """The context handed to workflow code as its first argument.

    It is the face of one execution of the run's code (`fusee_runtime.execution`),
    which does the replay and the bookkeeping.
    """

    def __init__(self, execution: Execution) -> None:
        self._execution = execution
        self._run = execution.run
        self._host = execution.host

    # -- identity, as recorded -------------------------------------------------

    @property
    def workflow_id(self) -> str:
        return self._run.workflow_id

    @property
    def workflow_type(self) -> str:
        return self._run.workflow

    def version(self) -> int:
        """The version of the workflow's code this run began with (`@workflow(version=)`),
        as recorded at its start: 1 unless the code said otherwise. A run continued as
        new keeps its predecessor's, a reset run the version of the run it resets."""
        origin = self._execution.run.origin
        return int(origin.get("version", 1)) if origin else 1

    @property
    def run_id(self) -> str:
        return self._run.run_id

    @property
    def started_at(self) -> datetime:
        return utc(self._run.started_at)

    @property
    def traceparent(self) -> str | None:
        """The W3C traceparent the run recorded at its start (`fusee_runtime.tracing`)."""
        return traceparent_of(self._run)

    @property
    def journal_size(self) -> int:
        """Operations asked for so far (deterministic: the same on every replay)."""
        return self._execution.count

    # -- keys ------------------------------------------------------------------

    def key(self) -> str:
        """The idempotency key of the step whose function is running.

        Stable across retries and recovery: a step run again after a crash sees
        the same key, so services that take idempotency keys see its effect once.

        Called in workflow code, outside a step function, there is no step to key: as
        in the crate, the run stops as `stuck` with a message saying so (nothing is
        recorded as failed: fix the code, and the next process to drive the run, or
        `fusee result ID --wait`, runs it again with the code loaded then).

        Raises:
            Rejected: called in a query or update handler (its caller is told).
        """
        running = step_var.get()
        if running is None:
            message = (
                "ctx.key() is only available inside a step function: "
                "there is no step to key in workflow code"
            )
            in_code = not handling_var.get() and update_var.get() is None
            if in_code and execution_var.get() is self._execution:
                self._execution.stuck(message)
            raise Rejected(message)
        return f"{self._run.workflow_id}/{self._run.run_id}/{running.seq}"

    @property
    def fence(self) -> int:
        """This process's turn driving the journal, never lower than an earlier driver's:
        pass it with a step's writes, for the system written to refuse a lower one once it
        saw a higher one, so a driver that lost the journal cannot write after its
        successor (`docs/postgresql.md`, "Fencing"). PostgreSQL: `fusee_owner.epoch`, one
        more at each open; a local home: the lsn its one driver began writing at.

        Raises:
            Rejected: called outside a step function (workflow code replays under
                whichever driver runs it: a fence read there would change with it).
        """
        if step_var.get() is None:
            raise Rejected(
                "ctx.fence is for step functions: workflow code replays under any driver, "
                "so a fence it read would change from one to the next"
            )
        return self._host.fence

    def heartbeat(self, details: object = None) -> None:
        """Reports progress from inside a running step function (async or in a thread):
        `details` (JSON) replace the step's latest, never wait for the disk, and are
        made durable within `beats.FLUSH_S` with the next group commit. They restart
        the step's `heartbeat_timeout`, and `progress()` gives them to the step's next
        attempt, after a crash too: a step that copies rows can go on from the last
        row it reported.

        Raises:
            Rejected: called outside a step function.
            CodecError: `details` is not JSON, or is over `Config.payload_bytes_max`.
        """
        running = step_var.get()
        if running is None:
            raise Rejected(
                "ctx.heartbeat() is for step functions: workflow code has no step to report on"
            )
        what = f"the heartbeat details of step {running.name!r}"
        value = orjson.loads(self._host.encode(details, what))
        self._host.beats.beat(self._run, running.seq, running.name, running.attempt, value)

    def progress(self) -> Any:
        """The latest details the running step reported with `heartbeat()`, in this
        attempt or an earlier one (before a crash too); None if it reported none, or
        outside a step function."""
        running = step_var.get()
        if running is None:
            return None
        return self._host.beats.latest(self._run, running.seq)

    # -- recorded values -------------------------------------------------------

    def now(self) -> datetime:
        """The engine clock's time, recorded: replay returns the same instant."""
        return utc(self._execution.value("now", self._host.clock.now))

    def random(self) -> float:
        """A float in [0, 1), recorded: replay returns the same number."""
        return float(self._execution.value("random", random.random))

    def uuid(self) -> str:
        """A random UUID (string), recorded: replay returns the same one."""
        return str(self._execution.value("uuid", lambda: str(uuid.uuid4())))

    # -- steps -----------------------------------------------------------------

    async def step(
        self,
        name: str,
        fn: Callable[..., object],
        *args: object,
        retry: RetryPolicy | None = None,
        timeout: float | timedelta | None = None,
        heartbeat_timeout: float | timedelta | None = None,
        limit: str | None = None,
        limit_key: str | None = None,
        priority: int | None = None,
        fairness: str | None = None,
        fairness_weight: int | None = None,
        rate: Rate | None = None,
        read_only: bool = False,
    ) -> Any:
        """Runs `fn(*args)` (sync or async) as a durable step named `name`.

        The function runs once every earlier record of the run is durable
        (not waited for when `read_only`); its result is recorded and returned
        without waiting for the disk. On replay the recorded result (or failure)
        is returned and `fn` does not run. A failure is retried under `retry`
        (the engine's default policy when None); a final one raises `StepFailed`.

        With `limit`, each attempt first takes a permit of that named limit (of
        its `limit_key` alone, if given); while it waits, a higher `priority`
        goes first and `fairness` keys take turns of `fairness_weight` (1 to 10)
        permits, a run's steps waiting under the first key it waits with. With
        `rate` (`Rate`), each attempt then waits for a slot of that rate.
        """
        if step_var.get() is not None:
            # In a step function: not workflow code, so a plain call, as a `@step` is there.
            value = (fn.fn if isinstance(fn, StepDef) else fn)(*args)
            return await value if inspect.isawaitable(value) else value
        base = fn.opts if isinstance(fn, StepDef) else StepOptions()
        beat_s = seconds(heartbeat_timeout)
        if beat_s is not None and not beat_s > 0:
            raise Rejected(f"step {name!r}: heartbeat_timeout must be positive, not {beat_s!r}")
        opts = base.merged(
            retry=retry,
            timeout=seconds(timeout),
            heartbeat_timeout=beat_s,
            read_only=read_only or None,
            limit=limit,
            limit_key=limit_key,
            priority=priority,
            fairness=fairness,
            fairness_weight=fairness_weight,
            rate=rate,
        )
        problem = opts.limit_problem()
        if problem is None and rate is not None and not isinstance(rate, Rate):
            problem = f"rate= takes a Rate(n, per=...), not {rate!r}"
        if problem is not None:
            raise Rejected(f"step {name!r}: {problem}")
        return await self._execution.run_step(name, fn, args, {}, opts)

    # -- timers and signals --------------------------------------------------------

    async def sleep(self, name: str, duration: float | timedelta) -> None:
        """Waits `duration` on a durable timer named `name`.

        The wake-up time is recorded, so a restart does not reset it; a timer
        that came due while no engine ran fires as soon as one opens the home.
        While it waits the run is parked: its coroutine is dropped and
        rebuilt by replay when the timer fires.
        """
        d = seconds(duration)
        if d is None or not d >= 0:  # NaN is neither
            raise Rejected(f"ctx.sleep({name!r}): the duration must not be negative")
        await self._timer(name, lambda now: now + d)

    async def sleep_until(self, name: str, instant: datetime | float) -> None:
        """Waits on a durable timer until `instant` (an aware datetime or Unix seconds)."""
        if isinstance(instant, datetime):
            if instant.tzinfo is None:
                raise Rejected(f"ctx.sleep_until({name!r}): the datetime must be timezone-aware")
            at = instant.timestamp()
        else:
            at = float(instant)
        if at != at:
            raise Rejected(f"ctx.sleep_until({name!r}): the instant is not a number")
        await self._timer(name, lambda now: at)

    async def _timer(self, name: str, fire_at: Callable[[float], float]) -> None:
        seq, op = self._execution.next(TimerOp, name)
        if op is None:
            at = wake_at(fire_at(self._host.clock.now()))
            self._host.append(self._run, TimerStarted(self._run.run_id, seq, name, at))
            op = self._run.op_of(seq, TimerOp)
        await self._execution.await_op(seq, op, f"sleeping {until(op.fire_at)}")

    async def wait_for(
        self, signal: str, timeout: float | timedelta | None = None, *, type: object = None
    ) -> Any:
        """The value of the next signal named `signal`, or None when `timeout` passes.

        Signals are buffered per run in arrival order; this takes the oldest
        of that name. Which signal was taken (or that the wait timed out) is
        recorded, so replay returns the same. While it waits the run is parked.
        With `type` (`datetime`, a dataclass, `list[Item]`, ...: see
        `fusee_runtime.typed`) the value is read back into that type, live and
        on replay alike; one that does not decode raises `CodecError` here,
        naming the signal and the type.
        """
        t = seconds(timeout)
        seq, op = self._execution.next(WaitOp, signal)
        if op is None:
            deadline = None if t is None else wake_at(self._host.clock.now() + t)
            self._host.append(self._run, WaitStarted(self._run.run_id, seq, signal, deadline))
            op = self._run.op_of(seq, WaitOp)
        till = "" if op.fire_at is None else f" {until(op.fire_at)}"
        await self._execution.await_op(seq, op, f"waiting for signal {signal!r}{till}")
        if type is None or op.value is None:  # None: also a wait that timed out
            return op.value
        return decode(shape_of(type), op.value, f"the value of signal {signal!r}")

    async def await_completion(
        self,
        name: str,
        send: Callable[[Completion], object],
        *,
        retry: RetryPolicy | None = None,
        timeout: float | timedelta | None = None,
    ) -> Any:
        """A step finished from outside the workflow: returns the value it is completed with.

        `send(completion)` (sync or async) hands `completion.token` (and
        `completion.url`, when `fusee serve --http` runs) to whoever does the
        work: an approval mail, a job on another system. The workflow then
        waits (parked) until `engine.complete(token, value)`, `fusee complete`
        or a `POST` to the URL; `engine.fail(token, message)` raises
        `StepFailed` here instead. `send` is retried under `retry` (and each
        attempt of `timeout` seconds); every attempt gets a new token, and the
        tokens of earlier attempts are refused. The token is durable before
        `send` sees it; a `send` cut off by a crash runs again with the same token.

        When `send`'s attempts run out under `Exhausted.PAUSE` (the policy's, or the
        engine's default), the run pauses, as it does for a step, and `resume` sends
        again with a fresh token. While paused the step takes no token: `complete`
        and `fail` are refused (`Rejected`, saying so), and the last attempt's token
        stays refused after the resume, which replaced it. The Rust crate fails the
        step there instead; fusee keeps one rule for every step, and a `send` that
        could not reach its service is the failure a pause is for. Under
        `Exhausted.FAIL` it raises `StepFailed`.
        """
        seq, op = self._execution.next(CompletionOp, name)
        if op is not None and op.retired:
            await self._execution.given_up(seq)
        if op is None or not (op.done or op.sent):
            opts = StepOptions().merged(retry=retry, timeout=seconds(timeout))
            await run_live(self._execution, seq, op, name, send, (), {}, opts, kind=CompletionOp)
            op = self._run.op_of(seq, CompletionOp)
        await self._execution.await_op(seq, op, f"waiting for completion {name!r}")
        if op.ok:
            return op.value
        raise StepFailed(name, Failure.from_json(op.failure or {}))

    def compensate(self, name: str, fn: Callable[..., object], *args: object) -> None:
        """Registers `fn(*args)` to undo what the workflow did so far.

        If the workflow fails or is cancelled, registered compensations run
        as steps named `name`, newest first (one that fails is logged and the
        rest still run); then the failure or cancellation is returned.
        """
        self._execution.compensations.append((name, fn, args))

    # -- concurrency -------------------------------------------------------------------

    async def all(self, awaitables: Iterable[Awaitable[object]]) -> list[Any]:
        """Runs steps, sleeps and waits concurrently; their results in argument order.

        Each branch numbers its operations under this call's own number, so
        replay assigns the same numbers whatever order branches finish in.
        The legs of a fan-out become ready together and share one `fdatasync`.
        """
        return await groups.all_of(self._execution, awaitables)

    async def race(self, awaitables: Iterable[Awaitable[object]]) -> tuple[int, Any]:
        """`(index, result)` of the first awaitable to finish; the others are cancelled.

        The winner is recorded, so replay takes the same one. A run waiting
        inside `all` or `race` keeps its coroutine (it is not parked).
        """
        return await groups.race(self._execution, awaitables)

    # -- search attributes ----------------------------------------------------------

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        """Records search attributes of this run, merged into those it has: str, int,
        float, bool or aware datetime values (kept as ISO 8601 in UTC); None removes
        a name. Recorded once (a replay does not record them again); `RunInfo.attributes`
        and `fusee describe` show them. Keep secrets out: they are readable where
        payloads are not.

        Raises:
            Rejected: a name or value a search attribute cannot hold (nothing is recorded).
        """
        attributes_.set_attributes(self._execution, attributes)

    # -- versions --------------------------------------------------------------------

    def patched(self, patch_id: str) -> bool:
        """Whether this run takes the new branch of a change deployed under it.

        True for runs that get to this point after the deploy (new runs, and
        running ones the first time they get here): the decision is recorded,
        and a replay takes the same branch. False while replaying a journal
        that passed this point before the patch existed, so old runs finish
        on the old branch::

            if ctx.patched("fee"):
                await charge_fee(order)

        See `fusee_runtime.versions` for the life of a patch.
        """
        return versions.patched(self._execution, patch_id)

    def deprecate_patch(self, patch_id: str) -> None:
        """Marks a patch whose old branch is gone (every open run passed this point
        with the patch, or has not reached it): journals with its marker and without
        it both replay, and new runs record it, as `patched` does."""
        versions.patched(self._execution, patch_id, deprecated=True)

    # -- other workflows -----------------------------------------------------------

    async def child(
        self,
        workflow: WorkflowDef | str,
        id: str,
        input: object = None,
        timeout: float | timedelta | None = None,
        parent_close: str = "terminate",
    ) -> Any:
        """Starts child workflow `id` and returns its result.

        `workflow` is a `@workflow` function or its registered name. The start
        is recorded in this run's journal, and durable, before the child
        runs; the id makes it idempotent: a replay finds the child it started,
        running or closed, and never starts a second one. `timeout` is the
        child's run deadline (it closes `timed_out`). `parent_close` is what
        happens to the child if this run closes first: `"terminate"` (the
        default), `"cancel"` (its compensations run) or `"abandon"` (it runs on).

        Raises:
            ChildFailed: the child did not complete (`.status`, `.failure`).
            IdConflict: an open run already has that id (recorded: a replay gets it too).
            NotFound: no workflow of that name. Rejected: the id is this run's own, or
                `parent_close` or `timeout` is not one it takes. CodecError: the input
                does not encode.
        """
        handle = await self.start_child(workflow, id, input, timeout, parent_close)
        return await handle.result()

    async def start_child(
        self,
        workflow: WorkflowDef | str,
        id: str,
        input: object = None,
        timeout: float | timedelta | None = None,
        parent_close: str = "terminate",
    ) -> ChildHandle:
        """Starts child workflow `id` as `child` does, and returns its `ChildHandle` once
        the start is durable, without waiting for the child: `await handle.result()`,
        `handle.signal(...)`, `handle.cancel(...)`. Starts made concurrently (in
        `ctx.all`) share their fdatasyncs, as steps do."""
        return await children.start_child(
            self._execution, workflow, id, input, timeout, parent_close
        )

    async def signal_workflow(
        self, id: str, signal: str, value: object = None, *, run_id: str | None = None
    ) -> None:
        """Sends `signal` with `value` to the newest run of workflow `id` (or to its run
        `run_id`), once.

        It is sent once this point of the run is durable: a replay does not
        send it again. It returns once the send is durable.

        Raises:
            NotFound: no run has that id. Rejected: its newest run is closed. Both
                are recorded, so a replay raises them at the same point.
        """
        await children.send_signal(self._execution, id, signal, value, run_id)

    async def cancel_workflow(
        self, id: str, reason: str = "cancelled", *, run_id: str | None = None
    ) -> None:
        """Cancels the newest run of workflow `id` (or its run `run_id`), once, as
        `signal_workflow` sends.

        The target's code gets `Cancelled` at its current await and its
        compensations run (a run cancelled already is left as it is).

        Raises:
            NotFound, Rejected: as `signal_workflow`.
        """
        await children.send_cancel(self._execution, id, reason, run_id)

    async def continue_as_new(self, input: object) -> Any:
        """Ends this run and starts a fresh one of the same id with `input`, in one record.

        Signals that arrive afterwards go to the new run. Never returns.
        """
        self._execution.check_live()
        self._host.continue_as_new(self._run, input)
        self._execution.halted = "continued as new"
        raise Halt(self._execution.halted)

    # -- handlers --------------------------------------------------------------

    def on_query(self, name: str, fn: Callable[[Any], Any]) -> None:
        """Answers `handle.query(name, arg)` (`fusee query`) with `fn(arg)`.

        A query reads the run's state and records nothing; `fn` runs on the
        engine's loop, so it must not block. Registering the name again
        replaces the handler. A parked run answers with the handler and
        state it had when it parked.
        """
        if not isinstance(name, str) or not 0 < len(name) <= NAME_CHARS_MAX:
            raise Rejected(f"a query name is a string of 1 to {NAME_CHARS_MAX} characters")
        if not callable(fn):
            raise Rejected(f"ctx.on_query({name!r}, fn): fn must be callable")
        self._run.live.queries[name] = fn

    def on_update(
        self,
        name: str,
        handle: Callable[[Any], Any],
        validate: Callable[[Any], Any] | None = None,
    ) -> None:
        """Applies `handle.update(name, arg)` (`fusee update`) as `handle(arg)`.

        When `handle`'s first parameter is annotated (a dataclass, `Decimal`,
        ...: see `fusee_runtime.typed`), `arg` is decoded into that type from
        its JSON, for the validator and the handler, live and on replay alike.
        `validate(arg)`, when given, runs first: if it raises, the caller gets
        `Rejected` with its message and nothing is recorded. Then `handle(arg)`
        runs on the engine's loop (a plain function: it must not block or
        await) and may change the workflow's state; the update is recorded
        with its id and where the code was, and the caller gets the result
        once that is durable. A replay applies each recorded update again at
        the same point of the code, so the state the code sees is the same.
        An update is refused while the code is inside `ctx.all`/`ctx.race` or
        still replaying its journal. Registering the name again replaces the
        handler.
        """
        if not isinstance(name, str) or not 0 < len(name) <= NAME_CHARS_MAX:
            raise Rejected(f"an update name is a string of 1 to {NAME_CHARS_MAX} characters")
        if not callable(handle) or (validate is not None and not callable(validate)):
            raise Rejected(f"ctx.on_update({name!r}, handle, validate): both must be callable")
        self._run.live.updates[name] = (handle, validate)

    # -- logs and streams ------------------------------------------------------

    @property
    def log(self) -> Any:
        """This run's logger: `ctx.log.debug/info/warn/error(msg)`, followable with `fusee logs -f`.

        Lines are tagged with the workflow id, the workflow, the run and, in a step function,
        the step and its attempt. Workflow code logs nothing while it replays operations
        the journal holds; a line after the last recorded operation can appear again
        after a crash. Lines are not durable (never synced).
        """
        run_log = self._host.run_log
        if run_log is None:
            raise Rejected("ctx.log needs an engine that runs workflow code")
        return run_log.logger(self._execution)

    def stream(self, name: str, *, scope: str = "run") -> Any:
        """A writer for stream `name` of this run: `append(item)` and `close()` (plain calls).

        In workflow code each append or close is an operation of the run, recorded
        without waiting for the disk; replay does not write it again. In a step
        function the appends are the step's: an attempt that runs again finds what
        earlier ones appended in `writer.recorded`, and with `scope="step"` the
        step's end closes the stream. Readers (`handle.stream(name)`, `fusee
        tail-stream`) see an item once it is durable. See `fusee_runtime.streams`.
        """
        running = step_var.get()
        if running is not None:
            return StepStreamWriter(self._host, self._run, running, name, scope)
        if scope != "run":
            raise Rejected(f"stream {name!r}: scope={scope!r} is for step functions")
        return StreamWriter(self._execution, name)

    # (last: a method named `object` shadows the builtin in the class body below it)
    def object(self, name: str, key: str) -> Any:
        """Key `key` of virtual object `name`: `await ctx.object(name, key).call(handler,
        arg)` is one operation of this run that reaches the object exactly once (see
        `fusee_runtime.objects`)."""
        from fusee_runtime.engine.objects import ObjectRef

        return ObjectRef(self, self._host.objects, name, key)
