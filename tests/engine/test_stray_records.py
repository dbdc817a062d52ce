"""A step's thread that the run's code gave up on runs on (a thread cannot be stopped):
it may beat or stream after the code moved on and uses that operation's number for
something else (a timer, say, after a stuck run was fixed and resumed). What it
records there must not stop the home from opening: the record is written before it
is folded. Found in review of the typed operations (issue 37)."""

from __future__ import annotations

from typing import Any

from fusee_runtime import Ctx, workflow
from fusee_runtime.model.op_records import StepHeartbeat
from fusee_runtime.model.ops import TimerOp
from fusee_runtime.model.payload import Payload

STORES = ("local", "postgresql")


@workflow(name="stray.sleeps")
async def sleeps(ctx: Ctx, _: None) -> str:
    await ctx.sleep("nap", 3600)
    return "woke"


async def _parked(engine: Any) -> Any:
    await engine.start(sleeps, None, id="s")
    await engine.wait_until(
        lambda: (
            engine.runs.latest("s").live.parked
            and engine.durability.durable_lsn == engine.durability.writer.next_lsn - 1
        )
    )
    return engine.runs.latest("s")


async def test_a_stray_heartbeat_on_a_timer_s_number_leaves_the_home_openable(
    make_engine: Any,
) -> None:
    async with make_engine() as engine:
        run = await _parked(engine)
        # As a given-up step's thread left it (the version before this one wrote it):
        stray = StepHeartbeat(run.run_id, "1", "gone", 1, Payload.of({"row": 1}), 0.0, 1)
        await engine.durability.wait(engine.driver.append(run, stray))
        assert isinstance(run.ops["1"], TimerOp)
    async with make_engine() as engine:  # it opens, and the run waits on its timer still
        run = engine.runs.latest("s")
        assert isinstance(run.ops["1"], TimerOp)
        assert [w.kind for w in (await engine.handle("s").describe()).waiting] == ["timer"]


async def test_a_given_up_thread_s_heartbeat_is_not_recorded_on_another_operation(
    make_engine: Any,
) -> None:
    async with make_engine() as engine:
        run = await _parked(engine)
        engine.driver.beats.beat(run, "1", "gone", 1, {"row": 2})
        engine.driver.beats.flush_now()
        await engine.durability.wait(engine.durability.writer.next_lsn - 1)
        assert [r["type"] for r in await engine.history("s")] == ["RunStarted", "TimerStarted"]
