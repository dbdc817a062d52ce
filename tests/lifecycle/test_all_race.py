"""`ctx.all` and `ctx.race`: concurrent branches numbered under their group's operation.

`all` returns results in argument order whatever order the branches finish
in, and the legs of a fan-out share `fdatasync`s. `race` records its winner
(`RaceWon`) and retires the losers (`OpCancelled`), so replay, even after a
reopen, takes the same path. A branch that asks for another operation than
its journal holds makes the run stuck, as at the top level.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from lifecycle_helpers import T0, latest, until_parked, until_status, until_waiting

from fusee_runtime import Cancelled, Ctx, RetryPolicy, StepFailed, step, workflow

IN_FLIGHT = {"now": 0, "max": 0}


@step
async def life_fan_leg(i: int) -> int:
    IN_FLIGHT["now"] += 1
    IN_FLIGHT["max"] = max(IN_FLIGHT["max"], IN_FLIGHT["now"])
    await asyncio.sleep(0)  # one loop turn, so the other legs get to start
    IN_FLIGHT["now"] -= 1
    return i * i


@workflow(name="life.all_fan_out")
async def all_fan_out(ctx: Ctx, n: int) -> list[int]:
    return await ctx.all([life_fan_leg(i) for i in range(n)])


async def test_all_of_a_hundred_steps_runs_them_concurrently_on_few_syncs(make_engine) -> None:
    async with make_engine() as engine:
        IN_FLIGHT.update(now=0, max=0)
        h = await engine.start(all_fan_out, 100, id="fan")
        syncs = engine.counters()["syncs"]  # the start is durable: the fan-out begins here
        assert await h.result() == [i * i for i in range(100)]
        # The legs pass their gate on one sync and their results share the next ones.
        assert engine.counters()["syncs"] - syncs <= 3
        assert IN_FLIGHT["max"] > 1
        seqs = [r["seq"] for r in await engine.history("fan") if r["type"] == "StepCompleted"]
        assert sorted(seqs) == sorted(f"1.{i}.1" for i in range(100))


async def test_all_returns_results_in_argument_order_not_finishing_order(make_engine) -> None:
    gates = [asyncio.Event() for _ in range(3)]
    order: list[int] = []

    @step
    async def leg(i: int) -> str:
        await gates[i].wait()
        order.append(i)
        return f"leg{i}"

    @workflow(name="life.all_order")
    async def wf(ctx: Ctx, _: None) -> list[str]:
        return await ctx.all([leg(0), leg(1), leg(2)])

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="all-order")
        for i in (2, 0, 1):
            gates[i].set()
            await engine.wait_until(lambda i=i: i in order)
        assert await h.result() == ["leg0", "leg1", "leg2"]
        assert order == [2, 0, 1]


async def test_all_mixes_steps_sleeps_and_waits(make_engine, clock, records) -> None:
    @step
    async def fetch() -> str:
        return "fetched"

    @workflow(name="life.all_mixed")
    async def wf(ctx: Ctx, _: None) -> list[Any]:
        return await ctx.all([fetch(), ctx.sleep("pause", 30), ctx.wait_for("go", timeout=600)])

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="all-mixed")
        run = await until_waiting(engine, "all-mixed", "1.1.1", "1.2.1")
        # A run waiting inside ctx.all keeps its coroutine: it is not parked.
        assert (run.live.parked, run.live.task is not None) == (False, True)
        await h.signal("go", "green")
        await engine.wait_until(
            lambda: all(s in run.ops and run.ops[s].done for s in ("1.0.1", "1.2.1"))
        )
        await clock.wait_for_sleepers()
        assert clock.next_deadline() == T0 + 30
        clock.set(T0 + 30)
        assert await h.result() == ["fetched", None, "green"]
        kinds = {r["seq"]: r["type"] for r in await engine.history("all-mixed") if "seq" in r}
        assert kinds["1.0.1"] == "StepCompleted"
        assert kinds["1.1.1"] == "TimerFired"
        assert kinds["1.2.1"] == "WaitCompleted"


@workflow(name="life.race_sleep_signal")
async def race_sleep_signal(ctx: Ctx, _: None) -> list[Any]:
    index, value = await ctx.race([ctx.sleep("timeout", 60), ctx.wait_for("answer")])
    await ctx.sleep("after", 1000)
    late = await ctx.wait_for("answer", timeout=1)
    return [index, value, late]


async def test_race_a_signal_beats_a_sleep(make_engine, run_clock, records) -> None:
    async with make_engine() as engine:
        h = await engine.start(race_sleep_signal, None, id="race-signal")
        await until_waiting(engine, "race-signal", "1.0.1", "1.1.1")
        await h.signal("answer", 42)
        assert await run_clock(h.result()) == [1, 42, None]
        (won,) = await records(engine, "race-signal", "RaceWon")
        assert (won["seq"], won["index"]) == ("1", 1)
        (lost,) = await records(engine, "race-signal", "OpCancelled")
        assert (lost["seq"], lost["kind"], lost["name"]) == ("1.0.1", "timer", "timeout")
        # The loser's timer never fires, though the clock passed it.
        fired = [r["seq"] for r in await records(engine, "race-signal", "TimerFired")]
        assert fired == ["2"]


async def test_race_a_sleep_beats_a_signal_and_the_loser_takes_no_later_signal(
    make_engine, clock, run_clock, records
) -> None:
    async with make_engine() as engine:
        h = await engine.start(race_sleep_signal, None, id="race-sleep")
        await until_waiting(engine, "race-sleep", "1.0.1", "1.1.1")
        clock.set(T0 + 60)
        await engine.wait_until(lambda: "2" in latest(engine, "race-sleep").pending)
        await until_parked(engine, "race-sleep")
        # The losing wait was retired: this signal waits for the wait after "after".
        await h.signal("answer", "late")
        assert await run_clock(h.result()) == [0, None, "late"]
        (won,) = await records(engine, "race-sleep", "RaceWon")
        assert won["index"] == 0
        (lost,) = await records(engine, "race-sleep", "OpCancelled")
        assert (lost["seq"], lost["kind"], lost["name"]) == ("1.1.1", "wait", "answer")


async def test_race_replays_its_recorded_winner_after_reopen(
    make_engine, clock, run_clock, records
) -> None:
    async with make_engine() as engine:
        h = await engine.start(race_sleep_signal, None, id="race-reopen")
        await until_waiting(engine, "race-reopen", "1.0.1", "1.1.1")
        await h.signal("answer", "first")
        await engine.wait_until(lambda: "2" in latest(engine, "race-reopen").pending)
        await until_parked(engine, "race-reopen")  # RaceWon recorded; sleeping in "after"
        run_id = h.run_id
    # While closed, the losing sleep's time passes too: replay must still pick index 1.
    clock.advance(120)
    async with make_engine() as engine:
        h = engine.handle("race-reopen")
        assert await run_clock(h.result()) == [1, "first", None]
        assert h.run_id == run_id
        assert len(await records(engine, "race-reopen", "RaceWon")) == 1
        (lost,) = await records(engine, "race-reopen", "OpCancelled")
        assert lost["seq"] == "1.0.1"
        assert [r["seq"] for r in await records(engine, "race-reopen", "TimerFired")] == ["2"]


async def test_race_cancels_a_losing_step(make_engine) -> None:
    started = asyncio.Event()
    cancelled: list[str] = []

    @step
    async def slow() -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append("slow")
            raise
        return "slow"

    @step
    async def quick() -> str:
        await started.wait()
        return "quick"

    @workflow(name="life.race_steps")
    async def wf(ctx: Ctx, _: None) -> list[Any]:
        return list(await ctx.race([slow(), quick()]))

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="race-steps")
        assert await h.result() == [1, "quick"]
        assert cancelled == ["slow"]


BRANCH_CODE = {"second": "sleep"}


@workflow(name="life.all_branch_mismatch")
async def all_branch_mismatch(ctx: Ctx, _: None) -> list[Any]:
    second = (
        ctx.sleep("nap", 60) if BRANCH_CODE["second"] == "sleep" else ctx.step("nap", lambda: 1)
    )
    return await ctx.all([life_fan_leg(3), second])


async def test_a_replay_mismatch_inside_a_branch_makes_the_run_stuck(make_engine) -> None:
    BRANCH_CODE["second"] = "sleep"
    async with make_engine() as engine:
        await engine.start(all_branch_mismatch, None, id="branch-stuck")
        run = await until_waiting(engine, "branch-stuck", "1.1.1")
        await engine.wait_until(lambda: "1.0.1" in run.ops)
        history = await engine.history("branch-stuck")
    BRANCH_CODE["second"] = "step"  # the code changed under the parked run
    try:
        async with make_engine() as engine:
            run = await until_status(engine, "branch-stuck", "stuck")
            info = await engine.handle("branch-stuck").describe()
            assert info.status == "stuck"
            assert "#1.1.1" in (info.error or "")
            assert "timer 'nap'" in (info.error or "") and "step 'nap'" in (info.error or "")
            if run.live.task is not None:
                await run.live.task  # the run's code stops; it does not go on past the mismatch
            assert (await engine.handle("branch-stuck").describe()).status == "stuck"
            # Nothing ran past the mismatch: the one record more says why it stopped.
            after = await engine.history("branch-stuck")
            assert after[: len(history)] == history
            assert [(r["type"], r["message"]) for r in after[len(history) :]] == [
                ("RunStuck", info.error)
            ]
    finally:
        BRANCH_CODE["second"] = "sleep"


# -- branches a group gave up on ----------------------------------------------------------------

LOSER_CALLS: list[str] = []


@step
async def life_race_loser() -> str:
    LOSER_CALLS.append("loser")
    await asyncio.Event().wait()
    return "never"


@workflow(name="life.race_step_loser")
async def race_step_loser(ctx: Ctx, _: None) -> int:
    index, _ = await ctx.race([life_race_loser(), ctx.sleep("quick", 10)])
    await ctx.sleep("after", 100)
    return index


async def test_a_losing_step_is_retired_and_does_not_run_again_on_replay(
    make_engine, clock, run_clock, records
) -> None:
    LOSER_CALLS.clear()
    async with make_engine() as engine:
        await engine.start(race_step_loser, None, id="race-loser")
        await until_waiting(engine, "race-loser", "1.1.1")
        clock.set(T0 + 10)
        await engine.wait_until(lambda: "2" in latest(engine, "race-loser").pending)
        await until_parked(engine, "race-loser")
        assert LOSER_CALLS == ["loser"]
        (lost,) = await records(engine, "race-loser", "OpCancelled")
        assert (lost["seq"], lost["kind"]) == ("1.0.1", "step")
    async with make_engine() as engine:
        # Replay takes the recorded winner; the losing step's function does not start again.
        assert await run_clock(engine.handle("race-loser").result()) == 1
        assert LOSER_CALLS == ["loser"]


@step(retry=RetryPolicy.none())
async def life_all_fails() -> None:
    raise ValueError("no")


@workflow(name="life.all_sibling_fails")
async def all_sibling_fails(ctx: Ctx, _: None) -> str:
    try:
        await ctx.all([ctx.sleep("long", 1000), life_all_fails()])
    except StepFailed as e:
        caught = e.name
    await ctx.sleep("after", 10)  # parks: the run is rebuilt by replay on wake
    return caught


async def test_a_sibling_retired_by_a_failing_branch_replays_as_it_ran(
    make_engine, clock, records
) -> None:
    async with make_engine() as engine:
        h = await engine.start(all_sibling_fails, None, id="all-retired")
        await until_parked(engine, "all-retired")
        (retired,) = await records(engine, "all-retired", "OpCancelled")
        assert retired["seq"] == "1.0.1"
        clock.set(T0 + 10)
        # Replay must see the step's failure again, not a cancel nobody asked for.
        assert await h.result() == "life_all_fails"


async def test_cancel_still_lands_after_a_race_retired_a_loser(make_engine, clock) -> None:
    started = asyncio.Event()

    @step
    async def blocks() -> None:
        started.set()
        await asyncio.Event().wait()

    @workflow(name="life.race_then_cancel")
    async def wf(ctx: Ctx, _: None) -> None:
        await ctx.race([ctx.sleep("quick", 1), ctx.wait_for("x")])
        await blocks()

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="race-cancel")
        await until_waiting(engine, "race-cancel", "1.0.1")
        clock.set(T0 + 1)
        await started.wait()
        await h.cancel("stop")
        with pytest.raises(Cancelled, match="stop"):
            await h.result()


async def test_a_branch_the_new_code_no_longer_runs_makes_the_run_stuck(make_engine) -> None:
    gate = asyncio.Event()

    @step(name="fewer.a")
    async def fewer_a() -> str:
        return "a"

    @step(name="fewer.b")
    async def fewer_b() -> str:
        return "b"

    @step(name="fewer.block")
    async def fewer_block() -> None:
        await gate.wait()

    @workflow(name="life.fewer_branches")
    async def v1(ctx: Ctx, _: None) -> list[str]:
        got = await ctx.all([fewer_a(), fewer_b()])
        await fewer_block()
        return got

    async with make_engine() as engine:
        await engine.start(v1, None, id="fewer")
        run = engine.runs.latest("fewer")
        await engine.wait_until(
            lambda: len(run.ops) == 2 and engine.durability.durable_lsn >= run.last_lsn
        )

    @workflow(name="life.fewer_branches")
    async def v2(ctx: Ctx, _: None) -> list[str]:
        got = await ctx.all([fewer_a()])
        await fewer_block()
        return got

    async with make_engine() as engine:
        run = engine.runs.latest("fewer")
        await engine.wait_until(lambda: run.status == "stuck")
        assert "fewer.b" in (run.error or "") and "did not ask for it" in (run.error or "")
