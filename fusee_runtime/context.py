"""`Ctx`: what workflow code calls to make durable progress.

Code between `ctx` calls must be deterministic: after a crash it runs again
from the top against the run's journal. Every operation it asks for takes
the next sequence number (`seq`); an operation the journal already holds at
that number returns its recorded outcome without running anything, and the
first one it does not hold runs live. Asking for another operation than the
one recorded at a number stops the run as `stuck` (`NonDeterminism`): it
never continues on a journal it does not match.

Each method says what it guarantees. Steps follow the durability contract:
a step's function runs only once every earlier record of its run is durable
(a `read_only` step skips that gate); its result is recorded and returned at
once, without waiting for the disk.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import random
import uuid
from collections.abc import Callable
from contextvars import ContextVar
from datetime import datetime
from typing import TYPE_CHECKING, Any

import orjson

from fusee_runtime.dsl import Exhausted, RetryPolicy, StepDef, StepOptions, seconds
from fusee_runtime.engine.state import Op, Run, utc
from fusee_runtime.errors import Failure, Rejected, StepFailed
from fusee_runtime.journal.records import R

if TYPE_CHECKING:
    from fusee_runtime.engine.engine import Engine

_ctx_var: ContextVar[Ctx | None] = ContextVar("fusee_ctx", default=None)
_step_var: ContextVar[int | None] = ContextVar("fusee_step", default=None)


class Halt(BaseException):
    """Stops a run's code without recording anything (stuck, closing, replaced).

    A BaseException so that workflow code's `except Exception` cannot swallow it.
    """


def journaling_ctx() -> Ctx | None:
    """The context a `@step` call journals into: workflow code, not a step function."""
    ctx = _ctx_var.get()
    if ctx is None or _step_var.get() is not None:
        return None
    return ctx


def current_ctx() -> Ctx:
    """The `Ctx` of the running workflow or step function.

    Raises:
        Rejected: called outside workflow code and step functions.
    """
    ctx = _ctx_var.get()
    if ctx is None:
        raise Rejected("current_ctx() is only available in workflow code or a step function")
    return ctx


class Ctx:
    """The context handed to workflow code as its first argument."""

    def __init__(self, engine: Engine, run: Run) -> None:
        self._engine = engine
        self._run = run
        self._seq = 0
        self._halted: str | None = None

    # -- identity, as recorded -------------------------------------------------

    @property
    def workflow_id(self) -> str:
        return self._run.workflow_id

    @property
    def workflow_type(self) -> str:
        return self._run.workflow

    @property
    def run_id(self) -> str:
        return self._run.run_id

    @property
    def started_at(self) -> datetime:
        return utc(self._run.started_at)

    @property
    def journal_size(self) -> int:
        """Operations asked for so far (deterministic: the same on every replay)."""
        return self._seq

    @property
    def is_replaying(self) -> bool:
        """Whether the next operation is already in the journal."""
        return (self._seq + 1) in self._run.ops

    # -- keys ------------------------------------------------------------------

    def key(self) -> str:
        """The idempotency key of the step whose function is running.

        Stable across retries and recovery: a step that runs again after a
        crash sees the same key, so services that take idempotency keys see
        its effect once.

        Raises:
            Rejected: called outside a step function.
        """
        seq = _step_var.get()
        if seq is None:
            raise Rejected(
                "ctx.key() is only available inside a step function: "
                "there is no step to key in workflow code"
            )
        return f"{self._run.workflow_id}/{self._run.run_id}/{seq}"

    # -- recorded values -------------------------------------------------------

    def now(self) -> datetime:
        """The engine clock's time, recorded: replay returns the same instant."""
        return utc(self._value("now", self._engine.clock.now))

    def random(self) -> float:
        """A float in [0, 1), recorded: replay returns the same number."""
        return float(self._value("random", random.random))

    def uuid(self) -> str:
        """A random UUID (string), recorded: replay returns the same one."""
        return str(self._value("uuid", lambda: str(uuid.uuid4())))

    def _value(self, name: str, make: Callable[[], Any]) -> Any:
        if _step_var.get() is not None:
            # In a step function (maybe on another thread): not workflow code,
            # and the step's own result is what gets recorded.
            return make()
        seq, op = self._next("value", name)
        if op is not None:
            return op.value
        value = make()
        self._engine._append(self._run, [R.ValueRecorded, self._run.run_id, seq, name, value])
        return value

    # -- steps -----------------------------------------------------------------

    async def step(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        retry: RetryPolicy | None = None,
        timeout: float | Any | None = None,
        heartbeat_timeout: float | Any | None = None,
        limit: str | None = None,
        limit_key: str | None = None,
        priority: int | None = None,
        fairness: str | None = None,
        fairness_weight: int | None = None,
        read_only: bool = False,
    ) -> Any:
        """Runs `fn(*args)` (sync or async) as a durable step named `name`.

        The function runs once every earlier record of the run is durable
        (not waited for when `read_only`); its result is recorded and
        returned without waiting for the disk. On replay the recorded result
        (or failure) is returned and `fn` does not run. A failure is retried
        under `retry` (the engine's default policy when None); one that is
        final raises `StepFailed` here.
        """
        for option, value in (
            ("heartbeat_timeout", heartbeat_timeout),
            ("limit", limit),
            ("limit_key", limit_key),
            ("priority", priority),
            ("fairness", fairness),
            ("fairness_weight", fairness_weight),
        ):
            if value is not None:
                raise Rejected(f"step option {option}= is not available in this version of fusee")
        if _step_var.get() is not None:
            # In a step function: not workflow code, so a plain call, as a `@step` is there.
            value = (fn.fn if isinstance(fn, StepDef) else fn)(*args)
            return await value if inspect.isawaitable(value) else value
        base = fn.opts if isinstance(fn, StepDef) else StepOptions()
        opts = base.merged(retry=retry, timeout=seconds(timeout), read_only=read_only or None)
        return await self._run_step(name, fn, args, {}, opts)

    async def _run_step(
        self,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        opts: StepOptions,
    ) -> Any:
        if isinstance(fn, StepDef):
            fn = fn.fn
        if opts.heartbeat_timeout is not None or opts.limit is not None:
            raise Rejected(
                f"step {name!r}: heartbeat_timeout and limit are not available in this version"
            )
        seq, op = self._next("step", name)
        if op is not None and op.done:
            if op.ok:
                return op.value
            raise StepFailed(name, Failure.from_json(op.failure or {}))
        return await self._live_step(seq, op, name, fn, args, kwargs, opts)

    async def _live_step(
        self,
        seq: int,
        op: Op | None,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        opts: StepOptions,
    ) -> Any:
        engine, run = self._engine, self._run
        policy = opts.retry or engine.config.retry
        # A step that failed before a crash continues with its attempt count,
        # its first failure's time and its recorded backoff.
        attempt = op.attempts_failed + 1 if op else 1
        not_before = op.retry_at if op else None
        first_failed_at = op.first_failed_at if op else None
        while True:
            if not_before is not None:
                run.current = f"{name}: retry {attempt} at {utc(not_before):%H:%M:%S}"
                await engine.clock.sleep_until(not_before)
            if not opts.read_only:
                await engine._wait_durable(run.last_lsn)
            self._check_live()
            run.current = f"{name} (attempt {attempt})"
            failure = await self._attempt(seq, name, attempt, fn, args, kwargs, opts)
            if isinstance(failure, bytes):
                engine._append(
                    run,
                    [R.StepCompleted, run.run_id, seq, name, orjson.loads(failure)],
                    wire=(int(R.StepCompleted), run.run_id, seq, name, orjson.Fragment(failure)),
                )
                run.current = None
                return run.ops[seq].value
            now = engine.clock.now()
            if first_failed_at is None:
                first_failed_at = now
            retry_at = _retry_at(policy, failure, attempt, now, first_failed_at)
            if retry_at is None and policy.on_exhausted is Exhausted.PAUSE:
                exhausted = policy.retryable(failure, attempt)
                if exhausted:
                    failure = Failure(
                        f"{failure} (retries exhausted; on_exhausted=PAUSE is not available "
                        "in this version, so the step fails)",
                        kind=failure.kind,
                        retryable=False,
                        details=failure.details,
                        cause=failure.cause,
                    )
            recorded = failure.to_json()
            if retry_at is not None:
                engine._append(
                    run,
                    [
                        R.AttemptFailed,
                        run.run_id,
                        seq,
                        name,
                        attempt,
                        recorded,
                        now,
                        retry_at,
                        retry_at - now,
                    ],
                )
                engine._log_attempt(run, name, attempt, failure, retry_at)
                attempt += 1
                not_before = retry_at
                continue
            engine._append(run, [R.StepFailed, run.run_id, seq, name, recorded])
            run.current = None
            raise StepFailed(name, Failure.from_json(recorded))

    async def _attempt(
        self,
        seq: int,
        name: str,
        attempt: int,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        opts: StepOptions,
    ) -> bytes | Failure:
        """Runs one attempt; returns the encoded result, or the failure."""
        engine = self._engine
        # Workflow code and async step functions share the run's task, so the
        # step marker is set around the await; a thread gets a copy of it.
        token = _step_var.set(seq)
        try:
            if _is_async(fn):
                work: Any = fn(*args, **kwargs)
            elif opts.inline:
                work = _ready(fn(*args, **kwargs))
            else:
                call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
                work = asyncio.get_running_loop().run_in_executor(engine._pool, call)
            if opts.timeout is not None:
                value = await self._within(asyncio.ensure_future(work), opts.timeout, name, attempt)
            else:
                value = await work
            if inspect.isawaitable(value):  # a plain function that returned a coroutine
                value = await value
        except Exception as e:
            return Failure.of(e)
        finally:
            _step_var.reset(token)
        try:
            encoded = orjson.dumps(value)
        except TypeError as e:
            return Failure(
                f"the result of step {name!r} cannot be encoded as JSON: {e}",
                kind="CodecError",
                retryable=False,
            )
        if len(encoded) > engine.config.payload_bytes_max:
            return Failure(
                f"the result of step {name!r} is {len(encoded)} bytes, over the limit of "
                f"{engine.config.payload_bytes_max} (Config.payload_bytes_max)",
                kind="CodecError",
                retryable=False,
            )
        return encoded

    async def _within(self, work: asyncio.Future[Any], limit_s: float, name: str, n: int) -> Any:
        clock = self._engine.clock
        timer = asyncio.ensure_future(clock.sleep_until(clock.now() + limit_s))
        try:
            done, _ = await asyncio.wait({work, timer}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            # The run stopped waiting (engine closing, run terminated): the step
            # function must not go on running on its own.
            work.cancel()
            raise
        finally:
            timer.cancel()
        if work in done:
            return work.result()
        work.cancel()
        raise Failure(f"step {name!r} attempt {n} timed out after {limit_s:g} s", kind="TimedOut")

    # -- replay ------------------------------------------------------------------

    def _next(self, kind: str, name: str) -> tuple[int, Op | None]:
        """Takes the next sequence number and what the journal holds there."""
        self._check_live()
        self._seq += 1
        seq = self._seq
        op = self._run.ops.get(seq)
        if op is not None and (op.kind, op.name) != (kind, name):
            self._stuck(
                f"replay mismatch at operation #{seq}: the journal holds {op.kind} "
                f"{op.name!r}, the code asks for {kind} {name!r}"
            )
        return seq, op

    def _check_live(self) -> None:
        if self._halted is None and not self._run.is_open:
            self._halted = "the run was closed"
        if self._halted is None and self._engine._closing:
            self._halted = "the engine is closing"
        if self._halted is not None:
            raise Halt(self._halted)

    def _stuck(self, message: str) -> None:
        self._halted = message
        self._engine._mark_stuck(self._run, message)
        raise Halt(message)

    def _finished(self) -> None:
        """Called when the code returned: it must have asked for every recorded operation."""
        later = [s for s in self._run.ops if s > self._seq]
        if later:
            op = self._run.ops[min(later)]
            self._stuck(
                f"replay mismatch at operation #{min(later)}: the journal holds {op.kind} "
                f"{op.name!r}, the code finished without asking for it"
            )


def _retry_at(
    policy: RetryPolicy, failure: Failure, attempt: int, now: float, first_failed_at: float
) -> float | None:
    """When to run the next attempt, or None when the failure is final or retries ran out."""
    if attempt >= policy.attempts or not policy.retryable(failure, attempt):
        return None
    delay = policy.backoff(attempt)
    if policy.jitter:
        delay = delay / 2 + random.random() * delay / 2
    at = now + delay
    if policy.max_elapsed is not None and at - first_failed_at > policy.max_elapsed:
        return None
    return at


def _is_async(fn: Callable[..., Any]) -> bool:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return inspect.iscoroutinefunction(fn)


async def _ready(value: Any) -> Any:
    return value
