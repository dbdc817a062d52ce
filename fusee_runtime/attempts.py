"""One attempt of a live step: where its function runs, its timeout, its result
encoded. Used by `steps.run_live`, which gates, records and retries.

An async step function runs on the loop, a plain one in the thread pool (or on
the loop with `inline=True`), `ctx.key()` pointing at the step throughout. The
attempt's outcome is its result encoded as JSON, or its `Failure`; a result
that cannot be recorded (not JSON, over `Config.payload_bytes_max`, nested too
deep, or not read back into its annotated type) is a `CodecError` failure that
is not retried.

Attempts never overlap. An attempt given up on (timed out, or cut off when
the run stopped waiting) is cancelled; a thread cannot be, so its function
runs on until it returns, and its result is dropped. Until then it stays in
`_RUNNING_ON`, and the step's next attempt (after the backoff, a resume, or
an engine reopened in this process) starts only once it has returned
(`after_abandoned`), with a log line while it lags: `ctx.key()` is used by one
attempt at a time. It also still counts in `StepWorkers.attempts`, so a
closing engine gives it its grace period as any attempt in flight; if it runs
past that, the engine closes without it (nothing can stop it) and the next
attempt runs at the next open, after it in this process, and in another
process where it no longer runs.
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
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from fusee_runtime.dsl import StepOptions
from fusee_runtime.engine.limits import Permit
from fusee_runtime.engine.state import Run
from fusee_runtime.errors import CodecError, Failure
from fusee_runtime.journal.records import PAYLOAD_DEPTH_MAX, too_deep
from fusee_runtime.model.payload import RESERVED, reserved
from fusee_runtime.scope import Running, step_var
from fusee_runtime.typed import check, dumps, returns

if TYPE_CHECKING:
    from fusee_runtime.execution import Execution
    from fusee_runtime.host import RunHost
    from fusee_runtime.typed import Shape

log = logging.getLogger("fusee")

_RUNNING_ON: dict[tuple[str, str], tuple[int, concurrent.futures.Future[object]]] = {}
"""Attempts given up on whose function has not returned yet, by (run id, seq): the
attempt's number and a future done when it returns. Process-wide, as threads are."""
_RUNNING_ON_LOCK = threading.Lock()


async def run_attempt(
    execution: Execution,
    seq: str,
    name: str,
    attempt: int,
    fn: Callable[..., object],
    args: tuple[object, ...],
    kwargs: dict[str, object],
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
    thread: concurrent.futures.Future[object] | None = None
    task: asyncio.Future[object] | None = None  # an attempt with a timeout, apart from the run's
    shape = returns(fn)  # None for a result that is plain JSON: the usual path
    try:
        if host.config.step_mock is not None:
            run = execution.run
            fn = host.config.step_mock(run.workflow, run.workflow_id, name, attempt) or fn
        needs = host.routing.needs(opts.labels, execution.run.workflow)
        if needs:  # (run by a worker with them: `engine/routing.py`)
            fn = host.routing.remote(execution.run, seq, name, needs, fn)
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
        _ended(execution, seq, attempt, thread, task, permit)
    return _encoded(host, name, value, shape)


def _ended(
    execution: Execution,
    seq: str,
    attempt: int,
    thread: concurrent.futures.Future[object] | None,
    task: asyncio.Future[object] | None,
    permit: Permit | None,
) -> None:
    """Counts an attempt out, however it ended. If it was given up on while its
    function still runs (a `thread`, or the `task` of an attempt with a timeout),
    that function keeps the `permit` until it returns; otherwise the permit goes back."""
    host = execution.host
    workers = host.workers
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


def _encoded(host: RunHost, name: str, value: object, shape: Shape | None) -> bytes | Failure:
    """The step's result as the JSON to record, or a `CodecError` failure (not retried)
    when it cannot be recorded or read back."""
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
    if encoded.startswith(RESERVED):
        return Failure(reserved(f"the result of step {name!r}"), kind="CodecError", retryable=False)
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


def _starting(
    fn: Callable[..., object], host: RunHost, run: Run, seq: str
) -> Callable[..., object]:
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
    done: concurrent.futures.Future[object],
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

    def returned(_: concurrent.futures.Future[object]) -> None:  # on the thread that ran it
        with _RUNNING_ON_LOCK:
            if _RUNNING_ON.get(key, (0, None))[1] is done:
                del _RUNNING_ON[key]
        with contextlib.suppress(RuntimeError):  # the engine's loop is closed: nothing to tell
            loop.call_soon_threadsafe(settled)

    done.add_done_callback(returned)


def _returns(task: asyncio.Future[object]) -> concurrent.futures.Future[object]:
    """A future done once a cancelled attempt's task has unwound; its outcome is dropped."""
    done: concurrent.futures.Future[object] = concurrent.futures.Future()

    def unwound(t: asyncio.Future[object]) -> None:
        if not t.cancelled():
            t.exception()  # retrieved, so asyncio does not report it: it is dropped
        done.set_result(None)

    task.add_done_callback(unwound)
    return done


def any_running_on() -> bool:
    """Whether an attempt given up on (of any step in this process) still runs its
    function: only then may a next attempt have to wait (`after_abandoned`)."""
    return bool(_RUNNING_ON)


async def after_abandoned(execution: Execution, seq: str, name: str, attempt: int) -> None:
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
    run.live.current = f"{name}: attempt {attempt} waits for attempt {given_up} to return"
    loop = asyncio.get_running_loop()
    returned: asyncio.Future[None] = loop.create_future()

    def wake(_: concurrent.futures.Future[object]) -> None:  # on the thread that ran it
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


def _is_async(fn: Callable[..., object]) -> bool:
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


_ASYNC: dict[Callable[..., object], bool] = {}
"""Whether each step function seen is async (asking `inspect` costs more than a step)."""


async def _ready(value: object) -> Any:
    return value
