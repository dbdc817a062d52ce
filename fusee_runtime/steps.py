"""Running one step live: gate, attempt, retry, pause. Used by `Ctx`.

The order of a live step is the durability contract made code:

1. wait out a recorded backoff (on the engine's clock);
2. wait until every earlier record of the run is durable (the gate;
   skipped for `read_only` steps), so a crash can never take back an input
   the function saw;
3. run one attempt (`fusee_runtime.attempts`): async functions on the loop,
   plain functions in the thread pool (or on the loop with `inline=True`),
   `ctx.key()` pointing at the step throughout;
4. record the outcome and hand it on at once, without waiting for the disk:
   `StepCompleted`, or `AttemptFailed` with the retry instant (jitter drawn
   here, then recorded), or `StepPaused` when retries run out under
   `Exhausted.PAUSE`, or `StepFailed`.

Attempts never overlap: an attempt given up on whose function runs on (a
thread cannot be stopped) is waited for, before the gate, by the step's next
one (`attempts.after_abandoned`), and still counts in `StepWorkers.attempts`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from fusee_runtime.attempts import after_abandoned, any_running_on, run_attempt
from fusee_runtime.completions import Completion
from fusee_runtime.dsl import Exhausted, Rate, RetryPolicy, StepOptions
from fusee_runtime.engine.limits import Permit
from fusee_runtime.engine.state import Run
from fusee_runtime.engine.waits import utc
from fusee_runtime.errors import Failure, StepFailed
from fusee_runtime.model import op_records
from fusee_runtime.model.op_records import (
    AttemptFailed,
    CompletionIssued,
    CompletionSent,
    OpCancelled,
    StepCompleted,
    StepPaused,
)
from fusee_runtime.model.ops import CompletionOp, StepOp
from fusee_runtime.model.payload import Payload

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

    @contextlib.contextmanager
    def holding_no_grace(self, wake: Callable[[], None]) -> Iterator[None]:
        """Around what an attempt awaits that stops with the engine (a call to an object's
        key this engine drives, or a wait for the next life): meanwhile it does not count
        in `attempts`, so a close does not spend its grace waiting for it (`wake` tells the
        close's wait that the count changed)."""
        self.attempts -= 1
        wake()
        try:
            yield
        finally:
            self.attempts += 1

    def in_thread(self, run: Callable[..., Any], *args: object, **kwargs: object) -> Any:
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
    op: StepOp | None,
    name: str,
    fn: Callable[..., object],
    args: tuple[object, ...],
    kwargs: dict[str, object],
    opts: StepOptions,
    kind: type[StepOp] = StepOp,
) -> Any:
    """Runs the step at `seq` from where its journal leaves it; returns its result.

    For a `CompletionOp` (`ctx.await_completion`) `fn` is `send`: each
    attempt first records that it issues a token and waits until that is
    durable, then calls `send(Completion)`; a success records that `send`
    returned (the value comes later, from outside) and returns None.
    """
    host, run = execution.host, execution.run
    if host.replay_only:
        execution.journal_ends(seq, kind.kind, name)  # a step in flight: it would run now
    task = asyncio.current_task(host.loop)  # (given the loop: no `getpid` a step)
    execution.busy += 1
    if task is not None:
        execution.step_tasks[seq] = task
    try:
        return await _run_attempts(execution, seq, op, name, fn, args, kwargs, opts, kind)
    except asyncio.CancelledError:
        if execution.cancel_lands():
            if task is not None:
                task.uncancel()
            raise execution.deliver_cancel(seq, kind.kind, name) from None
        now_op = run.ops.get(seq)
        if (now_op is None or not now_op.done) and execution.retires_on_cancel():
            # A losing race branch or the sibling of a failed ctx.all branch:
            # retire the step, so replay does not run its function again.
            host.append(run, OpCancelled(run.run_id, seq, kind.kind, name))
        raise
    finally:
        execution.busy -= 1
        execution.step_tasks.pop(seq, None)
        execution.schedule_park()


async def _run_attempts(
    execution: Execution,
    seq: str,
    op: StepOp | None,
    name: str,
    fn: Callable[..., object],
    args: tuple[object, ...],
    kwargs: dict[str, object],
    opts: StepOptions,
    kind: type[StepOp],
) -> Any:
    """The step's attempts, each in the order of the contract above, until one
    completes it, it fails for good, or (`await_completion`) `send` returns."""
    host, run = execution.host, execution.run
    policy = opts.retry or host.config.retry
    # A step that failed before a crash continues with its attempt count,
    # its first failure's time and its recorded backoff.
    attempt = op.attempts_failed + 1 if op else 1
    not_before = op.retry_at if op else None
    first_failed_at = op.first_failed_at if op else None
    # The rate's window, once (`Rejected` at the call: a key function that fails).
    rated = (opts.rate, opts.rate.label(name, args, kwargs)) if opts.rate else None
    if op is not None and op.paused:
        await execution.paused(seq, op)
        attempt, not_before, first_failed_at = 1, None, None
    while True:
        if not_before is not None:
            await _backoff(execution, seq, name, attempt, not_before)
        if any_running_on():
            # Before the gate, which then covers whatever was appended meanwhile.
            await after_abandoned(execution, seq, name, attempt)
        gated = await _gate(execution, seq, name, attempt, opts, kind, args, rated)
        if gated is None:
            return None  # an `await_completion` finished meanwhile: no token goes out
        permit, args = gated
        run.live.current = f"{name} (attempt {attempt})"
        started = host.clock.now()
        tracing = host.tracing
        span = tracing.attempt(run, seq, name, attempt) if tracing is not None else None
        outcome: bytes | Failure | None = None
        try:
            outcome = await run_attempt(
                execution, seq, name, attempt, fn, args, kwargs, opts, permit
            )
        finally:
            if tracing is not None:
                tracing.attempt_ended(span, outcome)
        now = host.clock.now()
        host.workers.attempts_done += 1
        if not isinstance(outcome, bytes):
            host.workers.attempts_failed += 1
        if kind is CompletionOp and _send_ended(execution, seq, outcome, now):
            return None
        if isinstance(outcome, bytes):
            return _completed(execution, seq, name, outcome, started, now)
        if first_failed_at is None:
            first_failed_at = now
        retry_at = await _failed(
            execution, seq, name, policy, outcome, attempt, started, now, first_failed_at
        )
        if retry_at is None:  # it was paused, and is resumed: it starts over
            attempt, not_before, first_failed_at = 1, None, None
        else:
            attempt, not_before = attempt + 1, retry_at


async def _backoff(
    execution: Execution, seq: str, name: str, attempt: int, not_before: float
) -> None:
    """Step 1: waits out the recorded backoff before attempt number `attempt`."""
    run = execution.run
    # The last failure's message, so a follower sees why it retries.
    last = run.ops[seq].failure if seq in run.ops else None
    why = f"; attempt {attempt - 1} failed: {Failure.from_json(last)}" if last else ""
    run.live.current = f"{name}: retry {attempt} at {utc(not_before):%H:%M:%S}{why}"
    execution.backing_off += 1
    try:
        await execution.host.clock.sleep_until(not_before)
    finally:
        execution.backing_off -= 1


async def _gate(
    execution: Execution,
    seq: str,
    name: str,
    attempt: int,
    opts: StepOptions,
    kind: type[StepOp],
    args: tuple[object, ...],
    rated: tuple[Rate, str] | None = None,
) -> tuple[Permit | None, tuple[Any, ...]] | None:
    """Step 2: a permit of the step's limit, then every earlier record durable, then a
    slot of its rate (`rated`: the rate and its window) durable too (and for
    `await_completion`, this attempt's token). Returns the permit and the attempt's
    arguments (`send`'s: the token), or None if the `await_completion` was finished
    (completed, failed or cancelled) meanwhile."""
    host, run = execution.host, execution.run
    if rated is not None:
        # Until the window has a slot, without a permit: a step waiting for its rate
        # holds none of its limit's from steps whose rate lets them in.
        await _slot(execution, seq, name, *rated, take=False)
    # The permit first: the gate then covers whatever was appended while it waited.
    permit = await _permit(execution, seq, name, opts) if opts.limit else None
    gated = False
    try:
        if not opts.read_only:  # (as `_settled`, inline: every attempt passes here)
            await host.wait_durable(run.last_lsn)
            while run.update_lsn > host.durable_lsn:
                await host.wait_durable(run.update_lsn)
        if rated is not None:
            # A slot, durable before the attempt runs: taken last, so the attempt
            # starts as close to its slot as it can; what came meanwhile settles too.
            await _slot(execution, seq, name, *rated, take=True)
            await _settled(execution, opts)
        execution.check_live()
        if kind is CompletionOp:
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
    return permit, args


async def _settled(execution: Execution, opts: StepOptions) -> None:
    """Every earlier record of the run durable (not waited for when `read_only`)."""
    host, run = execution.host, execution.run
    if not opts.read_only:
        await host.wait_durable(run.last_lsn)
        # An update applied meanwhile changed what the function may see: that too must
        # be durable first.
        while run.update_lsn > host.durable_lsn:
            await host.wait_durable(run.update_lsn)


async def _issue(execution: Execution, seq: str, name: str, attempt: int) -> Completion:
    """The token of this attempt of an `await_completion`, durable before anyone sees it."""
    host, run = execution.host, execution.run
    op = run.ops.get(seq)
    if not isinstance(op, CompletionOp) or op.attempt != attempt:
        now = host.clock.now()
        host.append(run, CompletionIssued(run.run_id, seq, name, attempt, now))
        await host.wait_durable(run.last_lsn)
    return host.completion(run, seq, run.op_of(seq, CompletionOp).issued)


def _finished(run: Run, seq: str) -> bool:
    """Whether an `await_completion` was finished (completed, failed or cancelled)
    while its `send` waited: then no token goes out again."""
    op = run.ops.get(seq)
    return op is not None and op.done


def _pauses(execution: Execution, policy: RetryPolicy) -> bool:
    then = policy.on_exhausted or execution.host.config.on_exhausted
    return then is Exhausted.PAUSE


def _send_ended(
    execution: Execution, seq: str, outcome: bytes | Failure | None, now: float
) -> bool:
    """Step 4 of an `await_completion`: whether this attempt ends it, as it was finished
    from outside while `send` ran, or as `send` returned (which is recorded now)."""
    host, run = execution.host, execution.run
    if run.ops[seq].done:  # finished from outside while `send` ran
        return True
    if isinstance(outcome, bytes):
        host.append(run, CompletionSent(run.run_id, seq, now))
        run.live.current = None
        return True
    return False


def _completed(
    execution: Execution, seq: str, name: str, outcome: bytes, started: float, now: float
) -> Any:
    """Step 4 of a success: records `StepCompleted` (the encoded result as it is) and
    returns the step's value, without waiting for the disk."""
    host, run = execution.host, execution.run
    host.append(run, StepCompleted(run.run_id, seq, name, Payload(outcome), started, now))
    run.live.current = None
    host.workers.steps_done += 1
    return run.ops[seq].value


async def _failed(
    execution: Execution,
    seq: str,
    name: str,
    policy: RetryPolicy,
    failure: Failure,
    attempt: int,
    started: float,
    now: float,
    first_failed_at: float,
) -> float | None:
    """Step 4 of a failure. Records `AttemptFailed` and returns when the next attempt
    runs; or, with retries run out under `Exhausted.PAUSE`, records `StepPaused` and
    returns None once the step is resumed; or records `StepFailed` and raises it."""
    host, run = execution.host, execution.run
    retry_at = _retry_at(policy, failure, attempt, now, first_failed_at, (run.run_id, seq))
    recorded = failure.to_json()
    if retry_at is not None:
        delay = retry_at - now
        host.append(
            run,
            AttemptFailed(run.run_id, seq, name, attempt, recorded, now, retry_at, delay, started),
        )
        host.log_attempt(run, name, attempt, failure, f"retry in {delay:.3g} s")
        return retry_at
    if _pauses(execution, policy) and policy.retryable(failure, attempt):
        host.append(run, StepPaused(run.run_id, seq, name, attempt, recorded, started, now))
        host.log_attempt(run, name, attempt, failure, "paused: waits for resume")
        await execution.paused(seq, run.ops[seq])
        return None
    host.append(run, op_records.StepFailed(run.run_id, seq, name, recorded, started, now))
    host.log_attempt(run, name, attempt, failure, "the step failed")
    run.live.current = None
    host.workers.steps_done += 1
    host.workers.steps_failed += 1
    raise StepFailed(name, Failure.from_json(recorded))


async def _permit(execution: Execution, seq: str, name: str, opts: StepOptions) -> Permit:
    """A permit of the step's limit for its next attempt, waited for in the open."""
    run, limits = execution.run, execution.host.limits
    assert opts.limit is not None
    label = opts.limit if opts.limit_key is None else f"{opts.limit}/{opts.limit_key}"
    run.live.permit_waits[seq] = (name, label)
    run.live.current = f"{name}: waiting for a permit of limit {label!r}"
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
        del run.live.permit_waits[seq]


async def _slot(
    execution: Execution, seq: str, name: str, rate: Rate, label: str, take: bool
) -> None:
    """A slot of the step's rate for its next attempt (`take`), or only the wait until
    its window has one, waited for in the open."""
    run = execution.run
    clock = execution.host.clock
    rates = execution.host.limits.rates

    def waits(at: float) -> None:
        run.live.rate_waits[seq] = (name, label, at)
        wait = max(at - clock.now(), 0.0)
        run.live.current = f"{name}: waiting for rate {label!r}: next slot in {wait:.1f} s"

    try:
        if take:
            await rates.take(label, rate.n, rate.per_s, waits)
        else:
            await rates.until_free(label, rate.n, rate.per_s, waits)
    finally:
        run.live.rate_waits.pop(seq, None)
        run.live.current = None


def _retry_at(
    policy: RetryPolicy,
    failure: Failure,
    attempt: int,
    now: float,
    first_failed_at: float,
    where: tuple[str, str],
) -> float | None:
    """When to run the next attempt, or None when the failure is final or retries ran out.
    `where`: the run and the step's seq, which with the attempt and `now` draw the
    jitter (`jitter_fraction`)."""
    if attempt >= policy.attempts or not policy.retryable(failure, attempt):
        return None
    delay = policy.backoff(attempt)
    if policy.jitter:
        delay = delay / 2 + jitter_fraction(*where, attempt, now) * delay / 2
    at = now + delay
    if policy.max_elapsed is not None and at - first_failed_at > policy.max_elapsed:
        return None
    return at


def jitter_fraction(run_id: str, seq: str, attempt: int, now: float) -> float:
    """A number in [0, 1) that spreads a retry's delay: a hash of the run, the step, the
    attempt and the time, not a random draw, so that a run driven again on the same
    clock (a simulation on a `FakeClock`, a test) waits the same delays. Runs failing
    together still spread: each run and step hashes apart."""
    seed = f"{run_id}/{seq}/{attempt}/{now!r}".encode()
    return int.from_bytes(hashlib.blake2b(seed, digest_size=8).digest(), "big") / 2**64


async def abandoned() -> None:
    """Where replay leaves an operation its group gave up on (a race loser, the sibling
    of a failed `ctx.all` branch): pending, as it was then, until the group gives up on
    it again. Raising here instead could change which branch the group sees first."""
    await asyncio.get_running_loop().create_future()
