"""Following a run from outside without polling: `engine.wait_until(predicate)`.

`wait_until` re-checks its predicate after each durable batch and each change
of a run's state, so a test (or a tool) can wait for any state a run reaches,
closed states included, on the engine's own progress.
"""

from __future__ import annotations

import asyncio

from lifecycle_helpers import until_parked

from fusee_runtime import Ctx, workflow


@workflow(name="life.observe_close")
async def observe_close(ctx: Ctx, _: None) -> str:
    return await ctx.wait_for("go")


async def test_wait_until_sees_a_run_turn_parked(make_engine) -> None:
    async with make_engine() as engine:
        await engine.start(observe_close, None, id="observe-parked")
        run = await until_parked(engine, "observe-parked")
        assert run.status == "parked"


async def test_wait_until_sees_a_run_turn_closed(make_engine) -> None:
    async with make_engine() as engine:
        h = await engine.start(observe_close, None, id="observe-closed")
        run = await until_parked(engine, "observe-closed")
        waiter = asyncio.ensure_future(engine.wait_until(lambda: run.status == "completed"))
        try:
            await h.signal("go", "went")
            assert await h.result() == "went"  # the status is "completed" now
            await asyncio.sleep(0)  # one loop turn for the waiter to see it
            assert waiter.done()
        finally:
            waiter.cancel()
