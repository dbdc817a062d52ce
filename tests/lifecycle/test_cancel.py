"""Cancel and terminate.

`cancel` raises `Cancelled` in the run's code wherever it waits (a signal, a
timer, a step's retry backoff, a paused step, a running step); the code may
catch it to clean up; registered compensations then run as steps, newest
first, one that fails being logged while the rest still run; the run closes
as "cancelled". `terminate` closes the run at once and runs nothing more.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from lifecycle_helpers import T0, until_parked, until_status

from fusee_runtime import (
    Cancelled,
    Ctx,
    Exhausted,
    Rejected,
    RetryPolicy,
    Terminated,
    step,
    workflow,
)
from fusee_runtime.model.records import CancelRequested

UNDONE: list[str] = []


def undo(what: str) -> str:
    UNDONE.append(what)
    if what == "broken":
        raise RuntimeError("the undo of 'broken' fails")
    return what


@step(retry=RetryPolicy(attempts=3, initial=100, max=1000, jitter=False))
async def life_cancel_down() -> None:
    UNDONE.append("attempt")
    raise ConnectionError("down")


@step(retry=RetryPolicy(attempts=1, on_exhausted=Exhausted.PAUSE))
async def life_cancel_pauses() -> None:
    raise ConnectionError("down")


@workflow(name="life.cancel_with_compensations")
async def cancel_with_compensations(ctx: Ctx, where: str) -> Any:
    ctx.compensate("undo_first", undo, "first")
    ctx.compensate("undo_broken", undo, "broken")
    ctx.compensate("undo_last", undo, "last")
    if where == "signal":
        return await ctx.wait_for("never")
    if where == "sleep":
        return await ctx.sleep("long", 3600)
    if where == "backoff":
        return await life_cancel_down()
    if where == "paused":
        return await life_cancel_pauses()
    raise AssertionError(where)


@pytest.fixture(autouse=True)
def _fresh_undone() -> None:
    UNDONE.clear()


async def _cancelled_after_compensations(engine: Any, h: Any, run_clock: Any, records: Any) -> None:
    await h.cancel("customer asked")
    with pytest.raises(Cancelled, match="customer asked"):
        await run_clock(h.result())
    info = await h.describe()
    assert info.status == "cancelled"
    # Newest first; the failing one is retried, then given up on, and the rest still run.
    done = [u for u in UNDONE if u != "attempt"]
    assert done[0] == "last" and done[-1] == "first"
    assert set(done[1:-1]) == {"broken"}
    kinds = [r["type"] for r in await engine.history(h.id)]
    assert kinds.index("CancelRequested") < kinds.index("OpCancelled") < kinds.index("RunCancelled")
    steps = await records(engine, h.id, "StepCompleted")
    assert [s["name"] for s in steps][-2:] == ["undo_last", "undo_first"]
    (failed,) = await records(engine, h.id, "StepFailed")
    assert failed["name"] == "undo_broken"


async def test_cancel_while_waiting_for_a_signal(make_engine, run_clock, records) -> None:
    async with make_engine() as engine:
        h = await engine.start(cancel_with_compensations, "signal", id="cancel-signal")
        await until_parked(engine, "cancel-signal")
        await _cancelled_after_compensations(engine, h, run_clock, records)
        (op,) = await records(engine, "cancel-signal", "OpCancelled")
        assert (op["seq"], op["kind"], op["name"]) == ("1", "wait", "never")


async def test_cancel_while_sleeping(make_engine, run_clock, records) -> None:
    async with make_engine() as engine:
        h = await engine.start(cancel_with_compensations, "sleep", id="cancel-sleep")
        await until_parked(engine, "cancel-sleep")
        await _cancelled_after_compensations(engine, h, run_clock, records)
        (op,) = await records(engine, "cancel-sleep", "OpCancelled")
        assert (op["kind"], op["name"]) == ("timer", "long")
        assert await records(engine, "cancel-sleep", "TimerFired") == []


async def test_cancel_inside_a_retry_backoff(make_engine, clock, run_clock, records) -> None:
    async with make_engine() as engine:
        h = await engine.start(cancel_with_compensations, "backoff", id="cancel-backoff")
        await engine.wait_until(lambda: UNDONE == ["attempt"])
        await clock.wait_for_sleepers()  # the step's backoff
        assert clock.next_deadline() == T0 + 100
        await _cancelled_after_compensations(engine, h, run_clock, records)
        assert UNDONE.count("attempt") == 1  # the backoff never ran out into another attempt
        (op,) = await records(engine, "cancel-backoff", "OpCancelled")
        assert (op["seq"], op["kind"], op["name"]) == ("1", "step", "life_cancel_down")


async def test_cancelling_a_paused_run(make_engine, run_clock, records) -> None:
    async with make_engine() as engine:
        h = await engine.start(cancel_with_compensations, "paused", id="cancel-paused")
        await until_status(engine, "cancel-paused", "paused")
        await until_parked(engine, "cancel-paused")
        await _cancelled_after_compensations(engine, h, run_clock, records)


async def test_cancel_while_a_step_runs(make_engine, run_clock) -> None:
    started = asyncio.Event()
    seen: list[str] = []

    @step
    async def slow() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen.append("step function cancelled")
            raise

    @workflow(name="life.cancel_running_step")
    async def wf(ctx: Ctx, _: None) -> None:
        ctx.compensate("undo_only", undo, "only")
        await slow()

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="cancel-running")
        await started.wait()
        await h.cancel()
        with pytest.raises(Cancelled):
            await run_clock(h.result())
        assert seen == ["step function cancelled"]
        assert UNDONE == ["only"]


async def test_workflow_code_may_catch_cancelled_to_clean_up(make_engine, records) -> None:
    cleaned: list[str] = []

    @step
    async def clean_up(why: str) -> str:
        cleaned.append(why)
        return why

    @workflow(name="life.cancel_caught")
    async def wf(ctx: Ctx, _: None) -> None:
        ctx.compensate("undo_reg", undo, "registered")
        try:
            await ctx.wait_for("never")
        except Cancelled as e:
            await clean_up(str(e))
            raise

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="cancel-caught")
        await until_parked(engine, "cancel-caught")
        await h.cancel("stop it")
        with pytest.raises(Cancelled, match="stop it"):
            await h.result()
        assert len(cleaned) == 1 and "stop it" in cleaned[0]
        assert UNDONE == ["registered"]
        names = [r["name"] for r in await records(engine, "cancel-caught", "StepCompleted")]
        assert names == ["clean_up", "undo_reg"]  # the clean-up, then the compensation


async def test_a_cancelled_run_stays_cancelled_after_reopen(make_engine, run_clock) -> None:
    async with make_engine() as engine:
        h = await engine.start(cancel_with_compensations, "signal", id="cancel-reopen")
        await until_parked(engine, "cancel-reopen")
        await h.cancel()
        with pytest.raises(Cancelled):
            await run_clock(h.result())
    compensated = list(UNDONE)
    async with make_engine() as engine:
        assert (await engine.handle("cancel-reopen").describe()).status == "cancelled"
        with pytest.raises(Cancelled):
            await engine.handle("cancel-reopen").result()
    assert compensated == UNDONE  # nothing ran again


async def test_cancel_and_terminate_refuse_a_closed_run(make_engine, run_clock) -> None:
    async with make_engine() as engine:
        h = await engine.start(cancel_with_compensations, "signal", id="cancel-closed")
        await until_parked(engine, "cancel-closed")
        await h.cancel()
        with pytest.raises(Cancelled):
            await run_clock(h.result())
        with pytest.raises(Rejected, match="cancelled"):
            await h.cancel()
        with pytest.raises(Rejected, match="cancelled"):
            await h.terminate()


async def test_terminate_closes_at_once_without_compensations(make_engine, records) -> None:
    async with make_engine() as engine:
        h = await engine.start(cancel_with_compensations, "sleep", id="terminate")
        await until_parked(engine, "terminate")
        await h.terminate("operator")
        assert (await h.describe()).status == "terminated"
        with pytest.raises(Terminated, match="operator"):
            await h.result()
        assert UNDONE == []
        kinds = [r["type"] for r in await engine.history("terminate")]
        assert kinds[-1] == "RunTerminated"
        assert "StepCompleted" not in kinds


@pytest.mark.parametrize("where", ["signal", "backoff", "paused"])
async def test_a_cancel_acknowledged_just_before_a_crash_lands_on_reopen(
    make_engine, clock, run_clock, where
) -> None:
    """`cancel()` returns once CancelRequested is durable; the record that delivers
    it (OpCancelled) may be appended later, for a step only when its task sees
    the cancellation. A crash between the two leaves just the request on disk:
    the next open must still deliver it, not run the step again or wait forever."""
    id = f"cancel-crash-{where}"
    async with make_engine() as engine:
        await engine.start(cancel_with_compensations, where, id=id)
        if where == "backoff":
            await engine.wait_until(lambda: UNDONE == ["attempt"])
            await clock.wait_for_sleepers()
        else:
            await until_parked(engine, id)
        run = engine.runs.latest(id)
        # The journal as a SIGKILL right after the request became durable leaves it.
        engine.driver.append(run, CancelRequested(run.run_id, "acknowledged", 0.0))
        await engine.durability.wait(run.last_lsn)
    async with make_engine() as engine:
        with pytest.raises(Cancelled, match="acknowledged"):
            await run_clock(engine.handle(id).result())
    assert UNDONE.count("attempt") == (1 if where == "backoff" else 0)
    assert next(u for u in UNDONE if u != "attempt") == "last"


CANCEL_STUCK_CODE = {"first": "undo_a"}


@workflow(name="life.cancel_stuck")
async def cancel_stuck(ctx: Ctx, _: None) -> None:
    ctx.compensate("undo_stuck", undo, "stuck")
    await ctx.step(CANCEL_STUCK_CODE["first"], lambda: 1)
    await ctx.wait_for("never")


async def test_cancelling_a_stuck_run_closes_it_without_running_code(make_engine) -> None:
    CANCEL_STUCK_CODE["first"] = "undo_a"
    async with make_engine() as engine:
        await engine.start(cancel_stuck, None, id="cancel-stuck")
        await until_parked(engine, "cancel-stuck")
    CANCEL_STUCK_CODE["first"] = "undo_b"  # the code no longer matches the journal
    try:
        async with make_engine() as engine:
            h = engine.handle("cancel-stuck")
            await until_status(engine, "cancel-stuck", "stuck")
            await h.cancel("give up")
            with pytest.raises(Cancelled, match="give up"):
                await h.result()
            assert (await h.describe()).status == "cancelled"
            assert UNDONE == []  # no code ran: not even the compensations
    finally:
        CANCEL_STUCK_CODE["first"] = "undo_a"


async def test_a_cancel_requested_just_before_close_finishes_after_reopen(
    make_engine, run_clock
) -> None:
    async with make_engine() as engine:
        h = await engine.start(cancel_with_compensations, "sleep", id="cancel-close")
        await until_parked(engine, "cancel-close")
        await h.cancel("closing time")
    # Closed before the woken run got to its compensations: they run on the next open.
    async with make_engine() as engine:
        with pytest.raises(Cancelled, match="closing time"):
            await run_clock(engine.handle("cancel-close").result())
    assert UNDONE[0] == "last" and UNDONE[-1] == "first"


async def test_cancel_inside_ctx_all_interrupts_every_branch(make_engine, records) -> None:
    started: list[int] = []
    both_started = asyncio.Event()

    @step
    async def blocks(i: int) -> None:
        started.append(i)
        if len(started) == 2:
            both_started.set()
        await asyncio.Event().wait()

    @workflow(name="life.cancel_in_all")
    async def wf(ctx: Ctx, _: None) -> None:
        ctx.compensate("undo_all", undo, "all")
        await ctx.all([blocks(0), blocks(1), ctx.wait_for("never")])

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="cancel-all")
        await both_started.wait()
        await h.cancel("enough")
        with pytest.raises(Cancelled, match="enough"):
            await h.result()
        assert UNDONE == ["all"]
        cancelled = await records(engine, "cancel-all", "OpCancelled")
        assert sorted(r["seq"] for r in cancelled) == ["1.0.1", "1.1.1", "1.2.1"]
