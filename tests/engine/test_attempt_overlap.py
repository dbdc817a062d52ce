"""Attempts never overlap: a plain-def step whose attempt timed out.

A thread cannot be stopped, so the attempt's function runs on after its
timeout; the step's next attempt must start only once it has returned (its
result dropped), after the backoff, after a resume, and after the engine is
closed and reopened in this process. The step here blocks on a
`threading.Event` the test holds, and records when each attempt enters and
leaves, so the tests see any overlap. Time moves on the `FakeClock`; the test
knows the engine holds the next attempt back from the `fusee` log line that
says so, never from a sleep.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fusee_runtime import (
    Ctx,
    Engine,
    Exhausted,
    FakeClock,
    RetryPolicy,
    StepDef,
    WorkflowDef,
    current_ctx,
    step,
    workflow,
)

T0 = 1_700_000_000.0  # the FakeClock's default start
TIMEOUT_S = 5
BACKOFF_S = 1


class Blocking:
    """A plain-def step function: attempt 1 blocks until `release` is set and returns
    "abandoned"; later attempts return "attempt N" at once. It records each attempt's
    entry and exit, the most attempts ever running at once, and each one's `ctx.key()`."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.release = threading.Event()
        self.events: list[tuple[str, int]] = []
        self.keys: list[str] = []
        self.most_at_once = 0
        self.entered: dict[int, asyncio.Event] = {1: asyncio.Event(), 2: asyncio.Event()}
        self._running = 0
        self._lock = threading.Lock()

    def __call__(self) -> str:
        with self._lock:
            n = 1 + sum(1 for what, _ in self.events if what == "enter")
            self.events.append(("enter", n))
            self.keys.append(current_ctx().key())
            self._running += 1
            self.most_at_once = max(self.most_at_once, self._running)
        if n in self.entered:
            self.loop.call_soon_threadsafe(self.entered[n].set)
        try:
            if n == 1:
                self.release.wait()
                return "abandoned"
            return f"attempt {n}"
        finally:
            with self._lock:
                self._running -= 1
                self.events.append(("leave", n))


class LagLog(logging.Handler):
    """Sets `seen` when the engine logs that an attempt waits for an earlier one."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen = asyncio.Event()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "starts once it returns" in message:
            self.messages.append(message)
            self.seen.set()


@pytest.fixture
def lag_log() -> Iterator[LagLog]:
    handler = LagLog()
    logger = logging.getLogger("fusee")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


@pytest.fixture
async def blocking() -> Any:
    fn = Blocking(asyncio.get_running_loop())
    yield fn
    fn.release.set()  # never leave a pool thread behind


def flow(fn: Blocking, name: str, **retry: Any) -> WorkflowDef:
    """A workflow of one plain-def step with a timeout, running `fn`."""
    retry = {"attempts": 3, "initial": BACKOFF_S, "factor": 1, "jitter": False, **retry}
    policy = RetryPolicy(**retry)
    blocking_step: StepDef = step(name="blocking", retry=policy, timeout=TIMEOUT_S)(fn)

    @workflow(name=name)
    async def wf(ctx: Ctx, _: None) -> str:
        return str(await blocking_step())

    return wf


async def first_attempt_times_out(clock: FakeClock, fn: Blocking) -> None:
    """Attempt 1 runs in its thread; its timeout passes on the clock, then its backoff."""
    await fn.entered[1].wait()
    await clock.wait_for_sleepers()
    assert clock.next_deadline() == T0 + TIMEOUT_S
    clock.advance(TIMEOUT_S)  # attempt 1 times out; its thread runs on
    await clock.wait_for_sleepers()
    assert clock.next_deadline() == T0 + TIMEOUT_S + BACKOFF_S
    clock.advance(BACKOFF_S)  # the backoff is over: attempt 2 is due


async def held_back(fn: Blocking, lag_log: LagLog) -> None:
    """Waits until attempt 2 either started (the overlap) or is held back (logged)."""
    started = asyncio.ensure_future(fn.entered[2].wait())
    logged = asyncio.ensure_future(lag_log.seen.wait())
    try:
        await asyncio.wait({started, logged}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        started.cancel()
        logged.cancel()
    assert fn.events == [("enter", 1)], "attempt 2 started while attempt 1's thread ran"
    assert lag_log.messages == [
        "fusee: ov step 'blocking': attempt 1 was given up on but its function has not "
        "returned (a thread cannot be stopped); attempt 2 starts once it returns"
    ]


def ran_one_at_a_time(fn: Blocking) -> None:
    assert fn.events == [("enter", 1), ("leave", 1), ("enter", 2), ("leave", 2)]
    assert fn.most_at_once == 1
    assert len(set(fn.keys)) == 1  # the same ctx.key(), used by one attempt at a time


async def test_the_retry_of_a_timed_out_thread_waits_for_it_to_return(
    make_engine: Callable[..., Engine],
    clock: FakeClock,
    blocking: Blocking,
    lag_log: LagLog,
    records: Any,
) -> None:
    wf = flow(blocking, "overlap.retry")
    async with make_engine() as engine:
        h = await engine.start(wf, None, id="ov")
        await first_attempt_times_out(clock, blocking)
        await held_back(blocking, lag_log)
        assert (await h.describe()).status == "running"
        blocking.release.set()  # attempt 1's thread returns; attempt 2 may start
        assert await h.result() == "attempt 2"  # attempt 1's "abandoned" was dropped
        ran_one_at_a_time(blocking)
        failed = await records(engine, "ov", "AttemptFailed")
        assert [(r["attempt"], r["failure"]["kind"]) for r in failed] == [(1, "TimedOut")]
        done = await records(engine, "ov", "StepCompleted")
        assert [r["value"] for r in done] == ["attempt 2"]
        assert engine.driver.workers.attempts == 0


async def test_a_closing_engine_gives_a_timed_out_thread_its_grace(
    make_engine: Callable[..., Engine],
    clock: FakeClock,
    blocking: Blocking,
    lag_log: LagLog,
) -> None:
    # The thread still counts as an attempt in flight: close(grace) waits for it
    # as for any, and starts no attempt after it.
    wf = flow(blocking, "overlap.close")
    engine = make_engine()
    await engine.open()
    try:
        await engine.start(wf, None, id="ov")
        await first_attempt_times_out(clock, blocking)
        await held_back(blocking, lag_log)
        assert engine.driver.workers.attempts == 1
        closing = asyncio.ensure_future(engine.close(grace=3600))
        for _ in range(20):  # turns of the loop, no wall-clock time
            await asyncio.sleep(0)
        assert not closing.done()
        blocking.release.set()
        await closing
    finally:
        await engine.close()
    assert blocking.events == [("enter", 1), ("leave", 1)]  # no attempt once closing
    assert engine.driver.workers.threads_busy == 0


async def test_an_engine_reopened_in_this_process_waits_for_the_thread_left_running(
    make_engine: Callable[..., Engine],
    clock: FakeClock,
    blocking: Blocking,
    lag_log: LagLog,
) -> None:
    # Closed without grace while attempt 1's thread runs: the engine cannot stop
    # it. Reopened in this process, the step's next attempt waits for it.
    wf = flow(blocking, "overlap.reopen")
    async with make_engine() as engine:
        await engine.start(wf, None, id="ov")
        await first_attempt_times_out(clock, blocking)
        await held_back(blocking, lag_log)
    lag_log.messages.clear()
    lag_log.seen.clear()
    async with make_engine() as engine:
        h = engine.handle("ov")
        await held_back(blocking, lag_log)
        blocking.release.set()
        assert await h.result() == "attempt 2"
    ran_one_at_a_time(blocking)


async def test_a_resumed_step_waits_for_the_thread_of_its_paused_attempt(
    make_engine: Callable[..., Engine],
    clock: FakeClock,
    blocking: Blocking,
    lag_log: LagLog,
) -> None:
    # One attempt, then the step pauses and the run parks (its code is dropped);
    # the resume runs the code again, and the fresh attempt 1 (the function's
    # second call) waits for the first call's thread.
    wf = flow(blocking, "overlap.resume", attempts=1, on_exhausted=Exhausted.PAUSE)
    async with make_engine() as engine:
        h = await engine.start(wf, None, id="ov")
        await blocking.entered[1].wait()
        await clock.wait_for_sleepers()
        clock.advance(TIMEOUT_S)
        await engine.wait_until(lambda: engine.runs.latest("ov").live.parked)
        assert (await h.describe()).status == "paused"
        await h.resume()
        started = asyncio.ensure_future(blocking.entered[2].wait())
        logged = asyncio.ensure_future(lag_log.seen.wait())
        await asyncio.wait({started, logged}, return_when=asyncio.FIRST_COMPLETED)
        started.cancel()
        logged.cancel()
        assert blocking.events == [("enter", 1)], "the resumed attempt overlapped"
        assert "attempt 1 starts once it returns" in lag_log.messages[0]
        blocking.release.set()
        assert await h.result() == "attempt 2"
    ran_one_at_a_time(blocking)
