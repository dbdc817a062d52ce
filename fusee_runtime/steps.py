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
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import inspect
import random
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from fusee_runtime.completions import Completion
from fusee_runtime.dsl import Exhausted, RetryPolicy, StepOptions
from fusee_runtime.engine.state import Op, Run, utc
from fusee_runtime.errors import Failure, StepFailed
from fusee_runtime.journal.records import R
from fusee_runtime.scope import Running, step_var

if TYPE_CHECKING:
    from fusee_runtime.execution import Execution


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
        """Step attempts whose function is running now."""
        self.threads_busy = 0
        """Plain-def step functions running in the pool now (cut-off ones included)."""
        self.steps_done = 0
        """Steps finished (completed, or failed for good) since the engine opened."""
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
                run.current = f"{name}: retry {attempt} at {utc(not_before):%H:%M:%S}"
                await host.clock.sleep_until(not_before)
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
            run.current = f"{name} (attempt {attempt})"
            started = host.clock.now()
            outcome = await _attempt(execution, seq, name, attempt, fn, args, kwargs, opts)
            now = host.clock.now()
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
                host.log_attempt(run, name, attempt, failure, retry_at)
                attempt += 1
                not_before = retry_at
                continue
            if _pauses(execution, policy) and policy.retryable(failure, attempt):
                rec = [R.StepPaused, run.run_id, seq, name, attempt, recorded, started, now]
                host.append(run, rec)
                await execution.paused(seq, run.ops[seq])
                attempt, not_before, first_failed_at = 1, None, None
                continue
            host.append(run, [R.StepFailed, run.run_id, seq, name, recorded, started, now])
            run.current = None
            host.workers.steps_done += 1
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
) -> bytes | Failure:
    """Runs one attempt; returns the encoded result, or the failure."""
    host = execution.host
    workers = host.workers
    # Workflow code and async step functions share the run's task, so the
    # step marker is set around the await; a thread gets a copy of it.
    token = step_var.set(Running(seq, name, attempt))
    # A closing engine gives the attempts in flight a grace period to finish.
    workers.attempts += 1
    try:
        is_async = _is_async(fn)
        if is_async:
            work: Any = fn(*args, **kwargs)
        elif opts.inline:
            work = _ready(fn(*args, **kwargs))
        else:
            call = functools.partial(
                workers.in_thread, contextvars.copy_context().run, fn, *args, **kwargs
            )
            work = asyncio.get_running_loop().run_in_executor(workers.pool, call)
        if opts.timeout is not None:
            value = await _within(
                execution, asyncio.ensure_future(work), opts.timeout, name, attempt
            )
        else:
            value = await work
        if not is_async and inspect.isawaitable(value):  # a plain def returned a coroutine
            value = await value
    except Exception as e:
        return Failure.of(e)
    finally:
        step_var.reset(token)
        workers.attempts -= 1
        if host.closing:
            host.progressed()
    try:
        encoded = orjson.dumps(value)
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
    return encoded


async def _within(
    execution: Execution, work: asyncio.Future[Any], limit_s: float, name: str, n: int
) -> Any:
    clock = execution.host.clock
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
