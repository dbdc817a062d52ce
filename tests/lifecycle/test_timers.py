"""Durable timers and parking: `ctx.sleep`, `ctx.sleep_until`, across close and reopen.

The wake-up instant is recorded when a timer starts, so a restart neither
resets it nor loses it; a sleeping run is parked (no task, no coroutine)
and rebuilt by replay when its timer fires.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from lifecycle_helpers import T0, latest, until_parked

from fusee_runtime import Ctx, RunFailed, step, workflow

SLEEP_CALLS: list[str] = []


@step
async def life_timer_note(what: str) -> str:
    SLEEP_CALLS.append(what)
    return what


@workflow(name="life.sleep_across_reopen")
async def sleep_across_reopen(ctx: Ctx, seconds: float) -> float:
    await life_timer_note("before")
    await ctx.sleep("nap", seconds)
    await life_timer_note("after")
    return ctx.now().timestamp()


@pytest.fixture(autouse=True)
def _fresh_calls() -> None:
    SLEEP_CALLS.clear()


async def test_sleep_parks_the_run_and_wakes_it_at_the_recorded_time(
    make_engine, clock, records
) -> None:
    @workflow(name="life.sleep_basic")
    async def wf(ctx: Ctx, _: None) -> float:
        await ctx.sleep("nap", 60)
        return ctx.now().timestamp()

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="sleep-basic")
        run = await until_parked(engine, "sleep-basic")
        assert (run.live.task, run.live.parked, run.status) == (None, True, "parked")
        assert (await h.describe()).status == "parked"
        (started,) = await records(engine, "sleep-basic", "TimerStarted")
        assert (started["name"], started["fire_at"]) == ("nap", T0 + 60)
        await clock.wait_for_sleepers()
        assert clock.next_deadline() == T0 + 60
        clock.set(T0 + 60)
        assert await h.result() == T0 + 60
        assert [r["seq"] for r in await records(engine, "sleep-basic", "TimerFired")] == ["1"]


async def test_a_sleep_across_close_and_reopen_keeps_its_wake_up_time(
    make_engine, clock, records
) -> None:
    async with make_engine() as engine:
        await engine.start(sleep_across_reopen, 100, id="across")
        await until_parked(engine, "across")
    clock.advance(30)  # closed for a while, not long enough

    async with make_engine() as engine:
        run = await until_parked(engine, "across")
        assert run.live.task is None
        await clock.wait_for_sleepers()
        # The recorded instant, not 100 s from the reopen.
        assert clock.next_deadline() == T0 + 100
        clock.set(T0 + 100)
        assert await engine.handle("across").result() == T0 + 100
        assert len(await records(engine, "across", "TimerStarted")) == 1
    assert SLEEP_CALLS == ["before", "after"]  # "before" was not run again on wake


async def test_a_timer_due_while_no_engine_ran_fires_at_open(make_engine, clock, records) -> None:
    async with make_engine() as engine:
        await engine.start(sleep_across_reopen, 10, id="due-closed")
        await until_parked(engine, "due-closed")
    clock.advance(3600)  # the timer came due while the home was closed

    async with make_engine() as engine:
        # Nothing moves the clock here: the open itself fires the due timer.
        assert await engine.handle("due-closed").result() == T0 + 3600
        assert len(await records(engine, "due-closed", "TimerFired")) == 1
    assert SLEEP_CALLS == ["before", "after"]


async def test_sleep_until_takes_aware_datetimes_and_unix_seconds(
    make_engine, run_clock, records
) -> None:
    @workflow(name="life.sleep_until")
    async def wf(ctx: Ctx, _: None) -> list[float]:
        seen = []
        await ctx.sleep_until("dt", datetime.fromtimestamp(T0 + 50, UTC))
        seen.append(ctx.now().timestamp())
        await ctx.sleep_until("unix", T0 + 80)
        seen.append(ctx.now().timestamp())
        await ctx.sleep_until("past", T0 - 1000)  # already due: fires at once
        seen.append(ctx.now().timestamp())
        await ctx.sleep("delta", timedelta(seconds=5))
        seen.append(ctx.now().timestamp())
        return seen

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="until")
        assert await run_clock(h.result()) == [T0 + 50, T0 + 80, T0 + 80, T0 + 85]
        started = await records(engine, "until", "TimerStarted")
        assert [(r["name"], r["fire_at"]) for r in started] == [
            ("dt", T0 + 50),
            ("unix", T0 + 80),
            ("past", T0 - 1000),
            ("delta", T0 + 85),
        ]


async def test_bad_sleeps_fail_the_run_with_a_clear_message(make_engine) -> None:
    @workflow(name="life.sleep_bad")
    async def wf(ctx: Ctx, kind: str) -> None:
        if kind == "negative":
            await ctx.sleep("nap", -1)
        else:
            await ctx.sleep_until("nap", datetime(2030, 1, 1))  # naive

    async with make_engine() as engine:
        neg = await engine.start(wf, "negative", id="sleep-neg")
        naive = await engine.start(wf, "naive", id="sleep-naive")
        with pytest.raises(RunFailed, match="must not be negative"):
            await neg.result()
        with pytest.raises(RunFailed, match="timezone-aware"):
            await naive.result()


async def test_a_thousand_sleeping_runs_hold_no_tasks(make_engine, clock) -> None:
    n = 1000

    @workflow(name="life.sleep_many")
    async def wf(ctx: Ctx, i: int) -> int:
        await ctx.sleep("nap", 60)
        return i

    async with make_engine() as engine:
        before = len(asyncio.all_tasks())
        handles = await asyncio.gather(*(engine.start(wf, i, id=f"many-{i}") for i in range(n)))
        runs = [latest(engine, f"many-{i}") for i in range(n)]
        await engine.wait_until(lambda: all(r.live.parked for r in runs))
        assert sum(r.live.task is None for r in runs) == n
        assert {r.status for r in runs} == {"parked"}
        # No coroutine per run is left on the loop: only the engine's own few tasks.
        assert len(asyncio.all_tasks()) <= before + 5
        clock.set(T0 + 60)
        assert await asyncio.gather(*(h.result() for h in handles)) == list(range(n))
