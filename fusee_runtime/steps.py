"""Running one step live: gate, attempt, retry, pause. Used by `Ctx`.

The order of a live step is the durability contract made code:

1. wait out a recorded backoff (on the engine's clock);
2. wait until every earlier record of the run is durable (the gate;
   skipped for `read_only` steps), so a crash can never take back an input
   the function saw;
3. run one attempt: async functions on the loop, plain functions in the
   thread pool (or on the loop with `inline=True`), `ctx.key()` pointing at
   the step throughout;
4. record the outcome and hand it on at once, without waiting for the disk:
   `StepCompleted`, or `AttemptFailed` with the retry instant (jitter drawn
   here, then recorded), or `StepPaused` when retries run out under
   `Exhausted.PAUSE`, or `StepFailed`.

Attempts never overlap. An attempt given up on (timed out, or cut off when
the run stopped waiting) is cancelled; a thread cannot be, so its function
runs on until it returns, and its result is dropped. Until then it stays in
`_RUNNING_ON`, and the step's next attempt (after the backoff, a resume, or
an engine reopened in this process) starts only once it has returned,
with a log line while it lags: `ctx.key()` is used by one attempt at a time.
It also still counts in `StepWorkers.attempts`, so a closing engine gives it
its grace period as any attempt in flight; if it runs past that, the engine
closes without it (nothing can stop it) and the next attempt runs at the
next open, after it in this process, and in another process where it no
longer runs.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import inspect
import logging
import math
import random
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from fusee_runtime.completions import Completion
from fusee_runtime.dsl import Exhausted, RetryPolicy, StepOptions
from fusee_runtime.engine.limits import Permit
from fusee_runtime.engine.state import Op, Run
from fusee_runtime.engine.waits import utc
from fusee_runtime.errors import CodecError, Failure, StepFailed
from fusee_runtime.journal.records import PAYLOAD_DEPTH_MAX, R, too_deep
from fusee_runtime.scope import Running, step_var
from fusee_runtime.typed import check, dumps, returns

if TYPE_CHECKING:
    from fusee_runtime.execution import Execution
    from fusee_runtime.host import RunHost

log = logging.getLogger("fusee")

_RUNNING_ON: dict[tuple[str, str], tuple[int, concurrent.futures.Future[Any]]] = {}
"""Attempts given up on whose function has not returned yet, by (run id, seq): the
attempt's number and a future done when it returns. Process-wide, as threads are."""
_RUNNING_ON_LOCK = threading.Lock()


class StepWorkers:
    """Where step functions run, and how many run now.

    Async step functions run on the engine's loop; plain ones in this pool
    of threads (a thread cannot be cancelled, so a process that exits must
    know whether one still runs: `threads_busy`). A closing engine gives the
    attempts in flight (`attempts`) a grace period to finish.
    """

    def __init__(self, threads: int) -> None:
        self.pool = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="fusee-step")
        self.attempts = 0
        """Step attempts whose function is running now, those given up on included."""
        self.threads_busy = 0
        """Plain-def step functions running in the pool now (cut-off ones included)."""
        self.in_threads = 0
        """Attempts of plain-def step functions, from their submission to the pool until
        the attempt ends (queued ones included; not those cut off)."""
        self.steps_done = 0
        """Steps finished (completed, or failed for good) since the engine opened."""
        self.steps_failed = 0
        """Of those, the steps that failed for good."""
        self.attempts_done = 0
        """Attempts finished since the engine opened (succeeded or failed)."""
        self.attempts_failed = 0
        """Of those, the attempts that failed (retried, paused or final)."""
        self._lock = threading.Lock()

    def in_thread(self, run: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Runs a plain-def step function in the pool, counted while it runs."""
        with self._lock:
            self.threads_busy += 1
        try:
            return run(*args, **kwargs)
        finally:
            with self._lock:
                self.threads_busy -= 1

    def shutdown(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


async def run_live(
    execution: Execution,
    seq: str,
    op: Op | None,
    name: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    opts: StepOptions,
    kind: str = "step",
) -> Any:
    """Runs the step at `seq` from where its journal leaves it; returns its result.

    For `kind="completion"` (`ctx.await_completion`) `fn` is `send`: each
    attempt first records that it issues a token and waits until that is
    durable, then calls `send(Completion)`; a success records that `send`
    returned (the value comes later, from outside) and returns None.
    """
    host, run = execution.host, execution.run
    if host.replay_only:
        execution.journal_ends(seq, kind, name)  # a step in flight: it would run now
    policy = opts.retry or host.config.retry
    # A step that failed before a crash continues with its attempt count,
    # its first failure's time and its recorded backoff.
    attempt = op.attempts_failed + 1 if op else 1
    not_before = op.retry_at if op else None
    first_failed_at = op.first_failed_at if op else None
    task = asyncio.current_task()
    execution.busy += 1
    if task is not None:
        execution.step_tasks[seq] = task
    try:
        if op is not None and op.paused:
            await execution.paused(seq, op)
            attempt, not_before, first_failed_at = 1, None, None
        while True:
            if not_before is not None:
                # The last failure's message, so a follower sees why it retries.
                last = run.ops[seq].failure if seq in run.ops else None
                why = f"; attempt {attempt - 1} failed: {Failure.from_json(last)}" if last else ""
                run.current = f"{name}: retry {attempt} at {utc(not_before):%H:%M:%S}{why}"
                await host.clock.sleep_until(not_before)
            if _RUNNING_ON:
                # Before the gate, which then covers whatever was appended meanwhile.
                await _after_abandoned(execution, seq, name, attempt)
            # The permit first: the gate then covers whatever was appended while it waited.
            permit = await _permit(execution, seq, name, opts) if opts.limit else None
            gated = False
            try:
                if not opts.read_only:
                    await host.wait_durable(run.last_lsn)
                    # An update applied meanwhile changed what the function may see:
                    # that too must be durable first.
                    while run.update_lsn > host.durable_lsn:
                        await host.wait_durable(run.update_lsn)
                execution.check_live()
                if kind == "completion":
                    if _finished(run, seq):
                        return None
                    args = (await _issue(execution, seq, name, attempt),)
                    if _finished(run, seq):
                        return None
                    execution.check_live()
                gated = True
            finally:
                if permit is not None and not gated:
                    permit.release()
            run.current = f"{name} (attempt {attempt})"
            started = host.clock.now()
            tracing = host.tracing
            span = tracing.attempt(run, seq, name, attempt) if tracing is not None else None
            outcome: bytes | Failure | None = None
            try:
                outcome = await _attempt(
                    execution, seq, name, attempt, fn, args, kwargs, opts, permit
                )
            finally:
                if tracing is not None:
                    tracing.attempt_ended(span, outcome)
            now = host.clock.now()
            host.workers.attempts_done += 1
            if not isinstance(outcome, bytes):
                host.workers.attempts_failed += 1
            if kind == "completion":
                op = run.ops[seq]
                if op.done:  # finished from outside while `send` ran
                    return None
                if isinstance(outcome, bytes):
                    host.append(run, [R.CompletionSent, run.run_id, seq, now])
                    run.current = None
                    return None
            if isinstance(outcome, bytes):
                head = (run.run_id, seq, name)
                host.append(
                    run,
                    [R.StepCompleted, *head, orjson.loads(outcome), started, now],
                    wire=(int(R.StepCompleted), *head, orjson.Fragment(outcome), started, now),
                )
                run.current = None
                host.workers.steps_done += 1
                return run.ops[seq].value
            failure = outcome
            if first_failed_at is None:
                first_failed_at = now
            retry_at = _retry_at(policy, failure, attempt, now, first_failed_at)
            recorded = failure.to_json()
            if retry_at is not None:
                delay = retry_at - now
                rec = [R.AttemptFailed, run.run_id, seq, name, attempt, recorded, now, retry_at]
                host.append(run, [*rec, delay, started])
                host.log_attempt(run, name, attempt, failure, f"retry in {delay:.3g} s")
                attempt += 1
                not_before = retry_at
                continue
            if _pauses(execution, policy) and policy.retryable(failure, attempt):
                rec = [R.StepPaused, run.run_id, seq, name, attempt, recorded, started, now]
                host.append(run, rec)
                host.log_attempt(run, name, attempt, failure, "paused: waits for resume")
                await execution.paused(seq, run.ops[seq])
                attempt, not_before, first_failed_at = 1, None, None
                continue
            host.append(run, [R.StepFailed, run.run_id, seq, name, recorded, started, now])
            host.log_attempt(run, name, attempt, failure, "the step failed")
            run.current = None
            host.workers.steps_done += 1
            host.workers.steps_failed += 1
            raise StepFailed(name, Failure.from_json(recorded))
    except asyncio.CancelledError:
        if execution.cancel_lands():
            if task is not None:
                task.uncancel()
            raise execution.deliver_cancel(seq, kind, name) from None
        now_op = run.ops.get(seq)
        if (now_op is None or not now_op.done) and execution.retires_on_cancel():
            # A losing race branch or the sibling of a failed ctx.all branch:
            # retire the step, so replay does not run its function again.
            host.append(run, [R.OpCancelled, run.run_id, seq, kind, name])
        raise
    finally:
        execution.busy -= 1
        execution.step_tasks.pop(seq, None)
        execution.schedule_park()


async def _issue(execution: Execution, seq: str, name: str, attempt: int) -> Completion:
    """The token of this attempt of an `await_completion`, durable before anyone sees it."""
    host, run = execution.host, execution.run
    op = run.ops.get(seq)
    if op is None or op.attempt != attempt:
        now = host.clock.now()
        host.append(run, [R.CompletionIssued, run.run_id, seq, name, attempt, now])
        await host.wait_durable(run.last_lsn)
    return host.completion(run, seq, run.ops[seq].issued)


def _finished(run: Run, seq: str) -> bool:
    """Whether an `await_completion` was finished (completed, failed or cancelled)
    while its `send` waited: then no token goes out again."""
    op = run.ops.get(seq)
    return op is not None and op.done


def _pauses(execution: Execution, policy: RetryPolicy) -> bool:
    then = policy.on_exhausted or execution.host.config.on_exhausted
    return then is Exhausted.PAUSE


async def _attempt(
    execution: Execution,
    seq: str,
    name: str,
    attempt: int,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    opts: StepOptions,
    permit: Permit | None = None,
) -> bytes | Failure:
    """Runs one attempt; returns the encoded result, or the failure. The `permit` (of
    the step's limit) goes back once the attempt's function has returned."""
    host = execution.host
    workers = host.workers
    # Workflow code and async step functions share the run's task, so the
    # step marker is set around the await; a thread gets a copy of it.
    token = step_var.set(Running(seq, name, attempt))
    # A closing engine gives the attempts in flight a grace period to finish.
    workers.attempts += 1
    thread: concurrent.futures.Future[Any] | None = None
    task: asyncio.Future[Any] | None = None  # an attempt with a timeout, apart from the run's
    shape = returns(fn)  # None for a result that is plain JSON: the usual path
    try:
        if host.config.step_mock is not None:
            run = execution.run
            fn = host.config.step_mock(run.workflow, run.workflow_id, name, attempt) or fn
        is_async = _is_async(fn)
        watched = opts.heartbeat_timeout is not None
        if is_async:
            if watched:
                host.beats.started(execution.run, seq)
            work: Any = fn(*args, **kwargs)
        elif opts.inline:
            work = _ready(fn(*args, **kwargs))
        else:
            if watched:  # its silence counts once a thread runs it, not while it queues
                fn = _starting(fn, host, execution.run, seq)
            call = functools.partial(
                workers.in_thread, contextvars.copy_context().run, fn, *args, **kwargs
            )
            thread = workers.pool.submit(call)
            workers.in_threads += 1
            work = asyncio.wrap_future(thread, loop=asyncio.get_running_loop())
        if opts.timeout is not None or opts.heartbeat_timeout is not None:
            task = asyncio.ensure_future(work)
            value = await _within(execution, task, opts, seq, name, attempt)
        else:
            value = await work
        if not is_async and inspect.isawaitable(value):  # a plain def returned a coroutine
            value = await value
    except Exception as e:
        return Failure.of(e)
    finally:
        step_var.reset(token)
        workers.attempts -= 1
        host.beats.ended(execution.run, seq)
        if thread is not None:
            workers.in_threads -= 1
            # Given up on (timed out, cut off): a thread not started yet is cancelled;
            # one running cannot be, and the next attempt waits for it.
            if not thread.done() and not thread.cancel():
                _runs_on(host, execution.run.run_id, seq, attempt, thread, permit)
                permit = None
        elif task is not None and not task.done():
            _runs_on(host, execution.run.run_id, seq, attempt, _returns(task), permit)
            permit = None
        if permit is not None:
            permit.release()
        if host.closing:
            host.progressed()
    try:
        encoded = orjson.dumps(value) if shape is None else dumps(value, shape)
    except TypeError as e:
        return Failure(
            f"the result of step {name!r} cannot be encoded as JSON: {e}",
            kind="CodecError",
            retryable=False,
        )
    if len(encoded) > host.config.payload_bytes_max:
        return Failure(
            f"the result of step {name!r} is {len(encoded)} bytes, over the limit of "
            f"{host.config.payload_bytes_max} (Config.payload_bytes_max)",
            kind="CodecError",
            retryable=False,
        )
    if shape is not None:  # typed: checked to read back into its type before it is recorded
        try:
            value = check(shape, encoded, f"the result of step {name!r}")
        except CodecError as e:
            return Failure(str(e), kind="CodecError", retryable=False)
    if too_deep(value, encoded):
        return Failure(
            f"the result of step {name!r} nests arrays and objects over "
            f"{PAYLOAD_DEPTH_MAX} levels deep",
            kind="CodecError",
            retryable=False,
        )
    return encoded


async def _within(
    execution: Execution, work: asyncio.Future[Any], opts: StepOptions, seq: str, name: str, n: int
) -> Any:
    """The attempt's result, or a `TimedOut` failure once `opts.timeout` passes, or
    `opts.heartbeat_timeout` passes without a heartbeat (the start of the step's
    function counts as one; a thread not started yet is not silent)."""
    host, run = execution.host, execution.run
    clock = host.clock
    ends = clock.now() + opts.timeout if opts.timeout is not None else math.inf

    def silent_until() -> float:
        if opts.heartbeat_timeout is None:
            return math.inf
        last = host.beats.last(run, seq)
        return (clock.now() if last is None else last) + opts.heartbeat_timeout

    while True:
        timer = asyncio.ensure_future(clock.sleep_until(min(ends, silent_until())))
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
        now = clock.now()
        if now >= ends:
            why = f"timed out after {opts.timeout:g} s"
        elif now >= silent_until():
            why = f"sent no heartbeat for {opts.heartbeat_timeout:g} s"
        else:
            continue  # it beat meanwhile: wait until the new silence would be too long
        work.cancel()
        raise Failure(f"step {name!r} attempt {n} {why}", kind="TimedOut")


async def _permit(execution: Execution, seq: str, name: str, opts: StepOptions) -> Permit:
    """A permit of the step's limit for its next attempt, waited for in the open."""
    run, limits = execution.run, execution.host.limits
    assert opts.limit is not None
    label = opts.limit if opts.limit_key is None else f"{opts.limit}/{opts.limit_key}"
    run.permit_waits[seq] = (name, label)
    run.current = f"{name}: waiting for a permit of limit {label!r}"
    try:
        return await limits.acquire(
            opts.limit,
            opts.limit_key,
            opts.priority,
            opts.fairness,
            opts.fairness_weight,
            run.run_id,
        )
    finally:
        del run.permit_waits[seq]


def _starting(fn: Callable[..., Any], host: RunHost, run: Run, seq: str) -> Callable[..., Any]:
    """`fn`, telling the step's heartbeats when a thread starts running it."""

    @functools.wraps(fn)
    def starting(*args: Any, **kwargs: Any) -> Any:
        host.beats.started(run, seq)
        return fn(*args, **kwargs)

    return starting


def _runs_on(
    host: RunHost,
    run_id: str,
    seq: str,
    attempt: int,
    done: concurrent.futures.Future[Any],
    permit: Permit | None,
) -> None:
    """Keeps an attempt given up on whose function runs on, until `done`: the step's
    next attempt waits for it, it still counts as an attempt in flight, and it keeps
    its `permit` of the step's limit."""
    key = (run_id, seq)
    with _RUNNING_ON_LOCK:
        _RUNNING_ON[key] = (attempt, done)
    host.workers.attempts += 1
    loop = asyncio.get_running_loop()

    def settled() -> None:
        host.workers.attempts -= 1
        if permit is not None:
            permit.release()
        host.progressed()  # a closing engine may be waiting for it

    def returned(_: concurrent.futures.Future[Any]) -> None:  # on the thread that ran it
        with _RUNNING_ON_LOCK:
            if _RUNNING_ON.get(key, (0, None))[1] is done:
                del _RUNNING_ON[key]
        with contextlib.suppress(RuntimeError):  # the engine's loop is closed: nothing to tell
            loop.call_soon_threadsafe(settled)

    done.add_done_callback(returned)


def _returns(task: asyncio.Future[Any]) -> concurrent.futures.Future[Any]:
    """A future done once a cancelled attempt's task has unwound; its outcome is dropped."""
    done: concurrent.futures.Future[Any] = concurrent.futures.Future()

    def unwound(t: asyncio.Future[Any]) -> None:
        if not t.cancelled():
            t.exception()  # retrieved, so asyncio does not report it: it is dropped
        done.set_result(None)

    task.add_done_callback(unwound)
    return done


async def _after_abandoned(execution: Execution, seq: str, name: str, attempt: int) -> None:
    """Returns once no earlier attempt of this step runs: attempts never overlap."""
    run = execution.run
    lag = _RUNNING_ON.get((run.run_id, seq))
    if lag is None or lag[1].done():
        return
    given_up, done = lag
    log.warning(
        "fusee: %s step %r: attempt %d was given up on but its function has not returned "
        "(a thread cannot be stopped); attempt %d starts once it returns",
        run.workflow_id,
        name,
        given_up,
        attempt,
    )
    run.current = f"{name}: attempt {attempt} waits for attempt {given_up} to return"
    loop = asyncio.get_running_loop()
    returned: asyncio.Future[None] = loop.create_future()

    def wake(_: concurrent.futures.Future[Any]) -> None:  # on the thread that ran it
        with contextlib.suppress(RuntimeError):  # the loop is closed
            loop.call_soon_threadsafe(_set_none, returned)

    done.add_done_callback(wake)
    await returned  # cancelled with the run's task (a close, a cancel), `done` left alone
    log.info(
        "fusee: %s step %r: attempt %d returned, its result dropped; attempt %d starts",
        run.workflow_id,
        name,
        given_up,
        attempt,
    )


def _set_none(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


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
    try:
        return _ASYNC[fn]
    except (KeyError, TypeError):
        pass
    inner = fn
    while isinstance(inner, functools.partial):
        inner = inner.func
    is_async = inspect.iscoroutinefunction(inner)
    with contextlib.suppress(TypeError):  # not hashable: not remembered
        if len(_ASYNC) >= 4096:
            _ASYNC.clear()
        _ASYNC[fn] = is_async
    return is_async


_ASYNC: dict[Callable[..., Any], bool] = {}
"""Whether each step function seen is async (asking `inspect` costs more than a step)."""


async def _ready(value: Any) -> Any:
    return value


async def abandoned() -> None:
    """Where replay leaves an operation its group gave up on (a race loser, the sibling
    of a failed `ctx.all` branch): pending, as it was then, until the group gives up on
    it again. Raising here instead could change which branch the group sees first."""
    await asyncio.get_running_loop().create_future()
