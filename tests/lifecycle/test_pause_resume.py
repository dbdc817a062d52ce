"""Pause and resume: exhausted retries under `Exhausted.PAUSE`, and stuck replays.

A paused run is open: `result()` keeps waiting, `describe()` says "paused",
and `resume()` runs the paused step again with a fresh retry budget. A
stuck run (its code no longer matches its journal) resumes by replaying
again with the code loaded now.
"""

from __future__ import annotations

import asyncio

import pytest
from lifecycle_helpers import until_parked, until_status

from fusee_runtime import Ctx, Exhausted, Rejected, RetryPolicy, step, workflow

PAUSING = RetryPolicy(attempts=2, initial=1, jitter=False, on_exhausted=Exhausted.PAUSE)

FLAKY: dict[str, int] = {"calls": 0, "fail_until": 0}


@step(retry=PAUSING)
async def life_pause_flaky() -> str:
    FLAKY["calls"] += 1
    if FLAKY["calls"] <= FLAKY["fail_until"]:
        raise ConnectionError(f"down #{FLAKY['calls']}")
    return f"up after {FLAKY['calls']}"


@workflow(name="life.pause_flaky")
async def pause_flaky(ctx: Ctx, _: None) -> str:
    return await life_pause_flaky()


@pytest.fixture(autouse=True)
def _fresh_flaky() -> None:
    FLAKY.update(calls=0, fail_until=0)


async def test_exhausted_retries_pause_the_run_and_callers_keep_waiting(
    make_engine, run_clock, records
) -> None:
    FLAKY["fail_until"] = 2
    async with make_engine() as engine:
        h = await engine.start(pause_flaky, None, id="pause")
        waiting = asyncio.ensure_future(h.result())
        run = await run_clock(until_status(engine, "pause", "paused"))
        await until_parked(engine, "pause")
        assert run.live.task is None
        info = await h.describe()
        assert info.status == "paused"
        # describe() says why it stopped, so an operator knows what to fix before resuming.
        assert "life_pause_flaky" in (info.error or "") and "down #2" in (info.error or "")
        assert FLAKY["calls"] == 2
        assert not waiting.done()
        (paused,) = await records(engine, "pause", "StepPaused")
        assert (paused["seq"], paused["attempt"]) == ("1", 2)
        await h.resume()
        assert (await h.describe()).error is None
        assert await waiting == "up after 3"
        assert [r["seq"] for r in await records(engine, "pause", "StepResumed")] == ["1"]


async def test_resume_gives_a_fresh_budget_that_can_pause_again(
    make_engine, run_clock, records
) -> None:
    FLAKY["fail_until"] = 4  # two attempts, pause, two more, pause, then up
    async with make_engine() as engine:
        h = await engine.start(pause_flaky, None, id="pause-twice")
        await run_clock(until_status(engine, "pause-twice", "paused"))
        await h.resume()
        assert (await h.describe()).status == "running"
        await run_clock(until_status(engine, "pause-twice", "paused"))
        assert FLAKY["calls"] == 4
        attempts = [r["attempt"] for r in await records(engine, "pause-twice", "StepPaused")]
        assert attempts == [2, 2]  # each budget is two attempts
        await h.resume()
        assert await h.result() == "up after 5"


async def test_engine_config_on_exhausted_pauses_steps_without_a_policy_of_their_own(
    make_engine, run_clock
) -> None:
    calls: list[int] = []

    @step(retry=RetryPolicy(attempts=1))
    async def down() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("down")
        return "up"

    @workflow(name="life.pause_config")
    async def wf(ctx: Ctx, _: None) -> str:
        return await down()

    async with make_engine(on_exhausted=Exhausted.PAUSE) as engine:
        h = await engine.start(wf, None, id="pause-config")
        await run_clock(until_parked(engine, "pause-config"))
        assert (await h.describe()).status == "paused"
        await h.resume()
        assert await h.result() == "up"


async def test_a_paused_run_stays_paused_across_reopen(make_engine, run_clock) -> None:
    FLAKY["fail_until"] = 2
    async with make_engine() as engine:
        await engine.start(pause_flaky, None, id="pause-reopen")
        await run_clock(until_parked(engine, "pause-reopen"))
    async with make_engine() as engine:
        run = await until_parked(engine, "pause-reopen")
        assert (run.status, run.live.task) == ("paused", None)
        assert "down #2" in ((await engine.handle("pause-reopen").describe()).error or "")
        assert FLAKY["calls"] == 2  # reopening does not run the paused step
        await engine.resume("pause-reopen")
        assert await engine.handle("pause-reopen").result() == "up after 3"


async def test_resume_of_a_run_neither_paused_nor_stuck_is_rejected(make_engine) -> None:
    @workflow(name="life.pause_not_paused")
    async def wf(ctx: Ctx, _: None) -> None:
        await ctx.wait_for("never")

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="not-paused")
        await until_parked(engine, "not-paused")
        with pytest.raises(Rejected, match="parked"):
            await h.resume()
        await h.terminate()
        with pytest.raises(Rejected, match="closed"):
            await h.resume()


STUCK_CODE = {"first": "life_stuck_a"}


@workflow(name="life.stuck_resume")
async def stuck_resume(ctx: Ctx, _: None) -> str:
    first = await ctx.step(STUCK_CODE["first"], lambda: "one")
    await ctx.wait_for("go")
    return first


async def test_resume_retries_a_stuck_replay_with_the_code_loaded_now(make_engine) -> None:
    STUCK_CODE["first"] = "life_stuck_a"
    async with make_engine() as engine:
        await engine.start(stuck_resume, None, id="stuck")
        await until_parked(engine, "stuck")
    STUCK_CODE["first"] = "life_stuck_b"  # a deploy changed the code under the run
    async with make_engine() as engine:
        run = await until_status(engine, "stuck", "stuck")
        info = await engine.handle("stuck").describe()
        assert info.status == "stuck"
        assert "life_stuck_a" in (info.error or "") and "life_stuck_b" in (info.error or "")
        waiting = asyncio.ensure_future(engine.handle("stuck").result())
        await asyncio.sleep(0)  # one loop turn: a stuck run is still open
        assert not waiting.done()
        await engine.resume("stuck")  # nothing fixed yet: the replay stops at the same place
        await until_status(engine, "stuck", "stuck")
        assert "life_stuck_b" in (run.error or "")
        STUCK_CODE["first"] = "life_stuck_a"  # the fix is deployed
        await engine.resume("stuck")
        await until_parked(engine, "stuck")
        assert run.error is None
        await engine.signal("stuck", "go")
        assert await waiting == "one"
