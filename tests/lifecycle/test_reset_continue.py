"""Reset, continue-as-new and run deadlines: ways a run closes and (maybe) a successor starts.

`reset(to=)` closes the run as "reset" and starts a new run of the same id
that keeps the journal before that point, so only the later steps run
again. `continue_as_new(input)` closes the run and starts its successor in
one record; `engine.handle(id)` follows the id to its newest run, while a
handle from `start` stays on its run (and that run's continue-as-new chain). A run
started with `timeout=` closes as "timed_out" at its deadline.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from lifecycle_helpers import T0, latest, until_parked

from fusee_runtime import Ctx, NotFound, Rejected, Terminated, TimedOut, step, workflow

CALLS: Counter[str] = Counter()


@step
async def life_reset_a() -> str:
    CALLS["a"] += 1
    return f"a{CALLS['a']}"


@step
async def life_reset_b() -> str:
    CALLS["b"] += 1
    return f"b{CALLS['b']}"


@step
async def life_reset_c() -> str:
    CALLS["c"] += 1
    return f"c{CALLS['c']}"


@workflow(name="life.reset_abc")
async def reset_abc(ctx: Ctx, _: None) -> list[Any]:
    a = await life_reset_a()  # op 1
    b = await life_reset_b()  # op 2
    c = await life_reset_c()  # op 3
    go = await ctx.wait_for("finish")  # op 4
    return [a, b, c, go]


@pytest.fixture(autouse=True)
def _fresh_calls() -> None:
    CALLS.clear()


async def _reset_and_finish(engine: Any, id: str, to: int | str) -> list[Any]:
    h = await engine.start(reset_abc, None, id=id)
    old = await until_parked(engine, id)
    assert dict(CALLS) == {"a": 1, "b": 1, "c": 1}
    again = await h.reset(to=to)
    assert again.run_id != old.run_id
    assert (await engine.handle(id).describe()).run_id == again.run_id
    await until_parked(engine, id)
    await again.signal("finish", "done")
    result = await engine.handle(id).result()  # the id's newest run: the reset one
    assert result == await again.result()
    with pytest.raises(Terminated, match="was reset"):
        await h.result()  # the first handle stays on its run, which was reset
    assert old.status == "reset"
    return result


async def test_reset_to_a_step_name_runs_that_step_and_the_later_ones_again(
    make_engine, records
) -> None:
    async with make_engine() as engine:
        assert await _reset_and_finish(engine, "reset-name", "life_reset_b") == [
            "a1",
            "b2",
            "c2",
            "done",
        ]
        assert dict(CALLS) == {"a": 1, "b": 2, "c": 2}
        kinds = [r["type"] for r in await engine.history("reset-name")]
        assert kinds.count("RunStarted") == 2
        assert kinds.index("RunReset") < [i for i, k in enumerate(kinds) if k == "RunStarted"][1]
        first, second = await records(engine, "reset-name", "RunStarted")
        assert first["origin"] is None
        assert second["origin"] == {"reset": first["run_id"], "before": 2}
        (closed,) = await records(engine, "reset-name", "RunReset")
        assert closed["run_id"] == first["run_id"]
        runs = await engine.list(workflow="life.reset_abc")
        assert [(r.id, r.status) for r in runs if r.id == "reset-name"] == [
            ("reset-name", "completed"),
            ("reset-name", "reset"),
        ]


async def test_reset_to_an_operation_number_keeps_everything_before_it(make_engine) -> None:
    async with make_engine() as engine:
        assert await _reset_and_finish(engine, "reset-num", 3) == ["a1", "b1", "c2", "done"]
        assert dict(CALLS) == {"a": 1, "b": 1, "c": 2}
    CALLS.clear()
    async with make_engine() as engine:
        # The digits of a number, as the CLI passes them.
        assert await _reset_and_finish(engine, "reset-str", "2") == ["a1", "b2", "c2", "done"]


async def test_a_reset_run_replays_its_kept_journal_after_reopen(make_engine) -> None:
    async with make_engine() as engine:
        h = await engine.start(reset_abc, None, id="reset-reopen")
        await until_parked(engine, "reset-reopen")
        await h.reset(to="life_reset_c")
        await until_parked(engine, "reset-reopen")
    async with make_engine() as engine:
        await until_parked(engine, "reset-reopen")
        await engine.signal("reset-reopen", "finish", 1)
        assert await engine.handle("reset-reopen").result() == ["a1", "b1", "c2", 1]
        assert dict(CALLS) == {"a": 1, "b": 1, "c": 2}


async def test_reset_to_an_unknown_step_or_bad_number_is_refused(make_engine) -> None:
    async with make_engine() as engine:
        h = await engine.start(reset_abc, None, id="reset-bad")
        await until_parked(engine, "reset-bad")
        with pytest.raises(NotFound, match="no operation named 'nope'"):
            await h.reset(to="nope")
        with pytest.raises(Rejected, match="start at 1"):
            await h.reset(to=0)
        assert latest(engine, "reset-bad").is_open


# -- continue-as-new -------------------------------------------------------------------------


@step
async def life_can_note(n: int) -> int:
    CALLS[f"note{n}"] += 1
    return n


@workflow(name="life.can_chain")
async def can_chain(ctx: Ctx, state: dict[str, Any]) -> dict[str, Any]:
    n = state["n"]
    await life_can_note(n)
    size = ctx.journal_size
    if n == 0:
        await ctx.continue_as_new({"n": 1, "sizes": [size]})
    if n == 1:
        hello = await ctx.wait_for("hello")
        await ctx.continue_as_new({"n": 2, "sizes": [*state["sizes"], size], "hello": hello})
    return {**state, "sizes": [*state["sizes"], size], "end": ctx.journal_size}


async def test_continue_as_new_chain_of_three_with_result_following(make_engine, records) -> None:
    async with make_engine() as engine:
        h = await engine.start(can_chain, {"n": 0}, id="can")
        first_run_id = h.run_id
        waiting = asyncio.ensure_future(h.result())  # waits from the first run on
        second = await until_parked(engine, "can")  # run 2 waits for "hello"
        assert second.run_id != first_run_id
        # Sent after the first continue-as-new: it reaches the new run.
        await engine.signal("can", "hello", "world")
        expected = {"n": 2, "sizes": [1, 1, 1], "hello": "world", "end": 1}
        assert await waiting == expected
        assert await h.result() == expected
        assert dict(CALLS) == {"note0": 1, "note1": 1, "note2": 1}
        runs = [r for r in await engine.list() if r.id == "can"]
        assert [r.status for r in runs] == ["completed", "continued_as_new", "continued_as_new"]
        assert runs[-1].run_id == first_run_id
        closes = await records(engine, "can", "RunContinuedAsNew")
        assert [c["input"]["n"] for c in closes] == [1, 2]
        assert closes[0]["run_id"] == first_run_id
        assert closes[1]["run_id"] == closes[0]["new_run_id"]
        (received,) = await records(engine, "can", "SignalReceived")
        assert received["run_id"] == closes[0]["new_run_id"]


async def test_signals_buffered_but_not_taken_carry_over_to_the_new_run(make_engine) -> None:
    async with make_engine() as engine:
        h = await engine.start(can_chain, {"n": 0}, id="can-carry", signal=("hello", "early"))
        result = await h.result()
        assert result["hello"] == "early"


async def test_a_continued_chain_resumes_at_its_newest_run_after_reopen(make_engine) -> None:
    async with make_engine() as engine:
        await engine.start(can_chain, {"n": 0}, id="can-reopen")
        await until_parked(engine, "can-reopen")
    async with make_engine() as engine:
        await until_parked(engine, "can-reopen")
        await engine.signal("can-reopen", "hello", "again")
        result = await engine.handle("can-reopen").result()
        assert result["hello"] == "again"
        assert dict(CALLS) == {"note0": 1, "note1": 1, "note2": 1}


# -- run deadlines ---------------------------------------------------------------------------


@workflow(name="life.deadline_sleeper")
async def deadline_sleeper(ctx: Ctx, seconds: float) -> str:
    await ctx.sleep("nap", seconds)
    return "woke"


async def test_a_run_past_its_deadline_closes_as_timed_out(make_engine, clock, records) -> None:
    async with make_engine() as engine:
        h = await engine.start(deadline_sleeper, 1000, id="deadline", timeout=60)
        await until_parked(engine, "deadline")
        await clock.wait_for_sleepers()
        assert clock.next_deadline() == T0 + 60
        clock.set(T0 + 60)
        with pytest.raises(TimedOut, match="deadline"):
            await h.result()
        assert (await h.describe()).status == "timed_out"
        assert len(await records(engine, "deadline", "RunTimedOut")) == 1
        assert await records(engine, "deadline", "TimerFired") == []


async def test_a_run_within_its_deadline_completes(make_engine, run_clock) -> None:
    async with make_engine() as engine:
        h = await engine.start(deadline_sleeper, 10, id="deadline-ok", timeout=60)
        assert await run_clock(h.result()) == "woke"


async def test_a_deadline_passed_while_closed_times_the_run_out_at_open(make_engine, clock) -> None:
    async with make_engine() as engine:
        await engine.start(deadline_sleeper, 1000, id="deadline-closed", timeout=60)
        await until_parked(engine, "deadline-closed")
    clock.advance(120)
    async with make_engine() as engine:
        with pytest.raises(TimedOut):
            await engine.handle("deadline-closed").result()


@workflow(name="life.reset_signals")
async def reset_signals(ctx: Ctx, _: None) -> list[Any]:
    a = await life_reset_a()  # op 1
    x = await ctx.wait_for("x")  # op 2
    y = await ctx.wait_for("y")  # op 3
    return [a, x, y]


async def test_a_signal_taken_after_the_reset_point_is_offered_again(make_engine) -> None:
    async with make_engine() as engine:
        h = await engine.start(reset_signals, None, id="reset-signals")
        run = await until_parked(engine, "reset-signals")
        await h.signal("x", "first x")
        await engine.wait_until(lambda: "3" in run.pending)
        h = await h.reset(to=2)
        # The new run's wait at #2 takes the same signal again; #3 waits for a new one.
        new = await until_parked(engine, "reset-signals")
        assert list(new.pending) == ["3"]
        await h.signal("y", "y")
        assert await h.result() == ["a1", "first x", "y"]
        assert CALLS["a"] == 1
