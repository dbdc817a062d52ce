"""Why a run failed and what it waits for (issue 17, items 1 and 2).

A failed attempt records the traceback of the exception that failed it
(the user's frames, bounded); a failed run's `RunInfo.failure` carries it
with its cause chain; `RunInfo.waiting` says what an open run waits for:
a signal and its timeout, a timer and its instant, a step's next attempt
or its resume, a completion, a cancel not acted on yet. Each holds after
a reopen too: it is folded from the journal, not kept in memory.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fusee_runtime import (
    Ctx,
    Exhausted,
    RetryPolicy,
    Status,
    step,
    workflow,
)
from fusee_runtime.control.api import run_info, run_json
from fusee_runtime.errors import TRACEBACK_CHARS_MAX, Failure

NOW = 1_700_000_000.0


def _raise_deep(n: int) -> None:
    if n == 0:
        raise ValueError("too deep to go on")
    _raise_deep(n - 1)


@step(retry=RetryPolicy(attempts=2, initial=60, max=3600))
def why_flaky(order: str) -> None:
    raise ConnectionError(f"backend said no to {order}")


@step(retry=RetryPolicy(attempts=1))
def why_deep() -> None:
    _raise_deep(20)


@workflow(name="why.retrying")
async def why_retrying(ctx: Ctx, order: str) -> None:
    await why_flaky(order)


@workflow(name="why.failing")
async def why_failing(ctx: Ctx, _: Any) -> None:
    await why_deep()


@workflow(name="why.waiting")
async def why_waiting(ctx: Ctx, _: Any) -> None:
    await ctx.wait_for("approve", timeout=3600)
    await ctx.sleep("cool-off", 7200)


@step(retry=RetryPolicy(attempts=1, on_exhausted=Exhausted.PAUSE))
def why_down() -> None:
    raise ConnectionError("rates service down")


@workflow(name="why.pausing")
async def why_pausing(ctx: Ctx, _: Any) -> None:
    await why_down()


async def parked(engine: Any, id: str, status: Status = Status.PARKED) -> None:
    await engine.wait_until(lambda: engine.runs.latest(id).status == status)


async def test_a_failed_attempt_records_the_traceback_of_the_users_code(make_engine) -> None:
    async with make_engine() as engine:
        await engine.start(why_retrying, "o-7", id="r-1")
        await engine.wait_until(lambda: engine.runs.latest("r-1").ops.get("1") is not None)
        history = await engine.history("r-1")
        info = await engine.handle("r-1").describe()
    failed = [r for r in history if r["type"] == "AttemptFailed"]
    assert len(failed) == 1
    tb = failed[0]["failure"]["traceback"]
    assert tb.startswith("Traceback (most recent call last):\n")
    assert "in why_flaky\n" in tb
    assert 'raise ConnectionError(f"backend said no to {order}")' in tb
    assert tb.endswith("ConnectionError: backend said no to o-7\n")
    assert "fusee_runtime" not in tb  # the engine's own frames are left out
    # What the run waits for: the step's next attempt, with the failure that put it off.
    (w,) = info.waiting
    assert (w.kind, w.name) == ("retry", "why_flaky")
    assert w.until == datetime.fromtimestamp(failed[0]["retry_at"], UTC)
    assert w.detail == "ConnectionError: backend said no to o-7"


async def test_a_run_waiting_out_a_backoff_shows_parked_driven_or_not(make_engine) -> None:
    # (Issue 42: it showed running while only the clock ran for it; then, found by a new
    # user, still running in a home opened by a command, once its driver had gone.)
    async with make_engine() as engine:
        await engine.start(why_retrying, "o-8", id="r-2")
        await engine.wait_until(lambda: engine.runs.latest("r-2").ops.get("1") is not None)
        assert (await engine.handle("r-2").describe()).status == Status.PARKED
    async with make_engine(drive=False) as passive:
        shown = await passive.handle("r-2").describe()
    assert shown.status == Status.PARKED
    assert [(w.kind, w.name) for w in shown.waiting] == [("retry", "why_flaky")]


async def test_a_failed_run_carries_its_failure_and_traceback_after_a_reopen(
    make_engine,
) -> None:
    async with make_engine() as engine:
        h = await engine.start(why_failing, None, id="f-1")
        await engine.wait_until(lambda: engine.runs.latest("f-1").status == Status.FAILED)
        live = (await h.describe()).failure
    async with make_engine() as engine:
        info = await engine.handle("f-1").describe()
    assert info.failure == live
    assert info.failure is not None
    assert info.failure["kind"] == "StepFailed"
    cause = info.failure["cause"]
    assert cause["kind"] == "ValueError"
    # The step's traceback, down to the frame that raised, through the recursion.
    assert "in _raise_deep\n" in cause["traceback"]
    assert "[Previous line repeated 17 more times]" in cause["traceback"]
    assert cause["traceback"].endswith("ValueError: too deep to go on\n")
    # The run's own: where the workflow code awaited the step.
    assert "in why_failing\n" in info.failure["traceback"]
    assert info.waiting == ()
    # The JSON that the socket and HTTP send carries both, and reads back the same.
    assert run_info(run_json(info)) == info


def test_a_traceback_is_bounded_and_keeps_its_end() -> None:
    # 400 frames of distinct functions, so Python does not fold them as repeats.
    space: dict[str, Any] = {}
    for n in range(400):
        call = "raise RuntimeError('the bottom')" if n == 0 else f"frame_{n - 1}()"
        exec(f"def frame_{n}():\n    {call}\n", space)
    try:
        space["frame_399"]()
    except RuntimeError as e:
        recorded = Failure.of(e).to_json()
    tb = recorded["traceback"]
    assert len(tb) < TRACEBACK_CHARS_MAX + 100
    assert tb.startswith("(") and "characters cut)" in tb.splitlines()[0]
    assert tb.endswith("RuntimeError: the bottom\n")
    # A failure that was never raised has no traceback to record.
    assert "traceback" not in Failure("said, not raised").to_json()


class _NoNotes(Exception):
    @property
    def __notes__(self) -> list[str]:  # the traceback module reads it, and it raises
        raise RuntimeError("notes are broken")


def test_a_traceback_that_cannot_be_formatted_still_records_the_failure() -> None:
    try:
        raise _NoNotes("odd")
    except _NoNotes as e:
        recorded = Failure.of(e).to_json()
    assert (recorded["kind"], recorded["message"]) == ("_NoNotes", "odd")
    assert recorded["traceback"] == "(the traceback could not be formatted: RuntimeError)"


async def test_waiting_for_a_signal_then_a_timer(make_engine, clock, run_clock) -> None:
    async with make_engine() as engine:
        await engine.start(why_waiting, None, id="w-1")
        await parked(engine, "w-1")
        (w,) = (await engine.handle("w-1").describe()).waiting
        assert (w.kind, w.name, w.detail) == ("signal", "approve", None)
        assert w.until == datetime.fromtimestamp(NOW + 3600, UTC)

        await engine.signal("w-1", "approve", True)
        await engine.wait_until(lambda: engine.runs.latest("w-1").pending.keys() == {"2"})
        await parked(engine, "w-1")
    async with make_engine() as engine:  # folded from the journal alone
        (w,) = (await engine.handle("w-1").describe()).waiting
    assert (w.kind, w.name) == ("timer", "cool-off")
    assert w.until == datetime.fromtimestamp(NOW + 7200, UTC)


async def test_a_paused_step_waits_for_resume(make_engine) -> None:
    async with make_engine() as engine:
        await engine.start(why_pausing, None, id="p-1")
        await parked(engine, "p-1", Status.PAUSED)
        (w,) = (await engine.handle("p-1").describe()).waiting
    assert (w.kind, w.name) == ("resume", "why_down")
    assert w.detail == "ConnectionError: rates service down"


async def test_a_cancel_not_acted_on_yet_says_so(make_engine) -> None:
    async with make_engine() as engine:
        await engine.start(why_waiting, None, id="c-1")
        await parked(engine, "c-1")
    # A process that does not drive runs records the cancel; no code takes it yet.
    async with make_engine(drive=False) as engine:
        await engine.cancel("c-1", "customer changed their mind")
        cancel = (await engine.handle("c-1").describe()).waiting[0]
    assert (cancel.kind, cancel.detail) == ("cancel", "customer changed their mind")
    async with make_engine() as engine:  # the driver delivers it: nothing waits any more
        await engine.wait_until(lambda: engine.runs.latest("c-1").status == Status.CANCELLED)
        info = await engine.handle("c-1").describe()
    assert info.waiting == ()
    assert info.error == "cancelled: customer changed their mind"
