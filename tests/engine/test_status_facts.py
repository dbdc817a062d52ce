"""A run's status is read from facts, not assigned (issue 37): memory and a reopen
tell the same status."""

from __future__ import annotations

from typing import Any

from fusee_runtime import Ctx, Status, workflow
from fusee_runtime.errors import Failure
from fusee_runtime.model.op_records import StepPaused

STORES = ("local", "postgresql")
"""Each test that opens an engine runs on the local journal and on PostgreSQL."""


@workflow(name="facts.waiting")
async def facts_waiting(ctx: Ctx, _: Any) -> None:
    await ctx.wait_for("go")


async def test_a_step_paused_after_a_recorded_stop_shows_stuck_as_a_reopen_does(
    make_engine: Any,
) -> None:
    async with make_engine() as engine:
        await engine.start(facts_waiting, None, id="f-1")
        run = engine.runs.latest("f-1")
        await engine.wait_until(lambda: run.status == Status.PARKED)
        engine.driver.mark_stuck(run, "replay mismatch at operation #2")
        # A step's thread given up on pauses after the stop (its branch's step ran out
        # of attempts): the code is still stopped where it was.
        now = engine.clock.now()
        failure = Failure.of(ConnectionError("rates service down")).to_json()
        engine.driver.append(run, StepPaused(run.run_id, "9", "charge", 1, failure, now, now))
        live = run.status
        await engine.durability.wait(run.last_lsn)
    async with make_engine(drive=False) as passive:
        reopened = passive.runs.latest("f-1")
        assert (live, reopened.status) == (Status.STUCK, Status.STUCK)
        assert reopened.paused_ops() == ["9"]  # and the paused step is there to resume


async def test_a_close_shows_once_durable_and_nothing_undoes_it(make_engine: Any) -> None:
    async with make_engine() as engine:
        await engine.start(facts_waiting, None, id="f-2")
        run = engine.runs.latest("f-2")
        await engine.wait_until(lambda: run.status == Status.PARKED)
        await engine.handle("f-2").terminate("done with it")
        assert run.status == Status.TERMINATED
        engine.driver.mark_stuck(run, "late")  # a stop after the close changes nothing
        assert run.status == Status.TERMINATED
    async with make_engine(drive=False) as passive:
        assert passive.runs.latest("f-2").status == Status.TERMINATED
