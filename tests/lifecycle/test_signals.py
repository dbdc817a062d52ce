"""Signals: buffered per run in arrival order, taken by `ctx.wait_for`, durable on return.

`engine.signal` returns once the signal is durable; `wait_for` takes the
oldest buffered signal of its name, or returns None when its timeout passes
(leaving later signals for the next wait). A closed run refuses signals
with `Rejected`, an unknown id with `NotFound`.
"""

from __future__ import annotations

from typing import Any

import pytest
from lifecycle_helpers import T0, latest, until_parked

from fusee_runtime import Ctx, NotFound, Rejected, workflow


@workflow(name="life.signal_pair")
async def signal_pair(ctx: Ctx, _: None) -> list[Any]:
    return [await ctx.wait_for("x"), await ctx.wait_for("x")]


async def test_a_signal_wakes_a_parked_wait_and_returns_once_durable(make_engine, records) -> None:
    @workflow(name="life.signal_basic")
    async def wf(ctx: Ctx, _: None) -> Any:
        return await ctx.wait_for("approve")

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="sig-basic")
        run = await until_parked(engine, "sig-basic")
        assert (run.live.task, run.status) == (None, "parked")
        await h.signal("approve", {"by": "ana"})
        (received,) = await records(engine, "sig-basic", "SignalReceived")
        assert engine.counters()["durable_lsn"] >= received["lsn"]
        assert await h.result() == {"by": "ana"}
        (taken,) = await records(engine, "sig-basic", "WaitCompleted")
        assert taken["signal_id"] == received["signal_id"]


async def test_two_signals_of_one_name_are_taken_in_arrival_order(make_engine) -> None:
    async with make_engine() as engine:
        h = await engine.start(signal_pair, None, id="sig-order")
        await until_parked(engine, "sig-order")
        await engine.signal("sig-order", "y", "other name")
        await engine.signal("sig-order", "x", 1)
        await engine.signal("sig-order", "x", 2)
        assert await h.result() == [1, 2]
        # The signal nobody waited for is still buffered, not lost.
        assert [s[1:] for s in latest(engine, "sig-order").signals] == [("y", "other name")]


async def test_wait_for_timeout_returns_none_and_a_later_signal_waits_for_the_next(
    make_engine, clock, records
) -> None:
    @workflow(name="life.signal_timeout")
    async def wf(ctx: Ctx, _: None) -> list[Any]:
        first = await ctx.wait_for("x", timeout=30)
        await ctx.sleep("gap", 100)
        second = await ctx.wait_for("x", timeout=30)
        return [first, second]

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="sig-timeout")
        await until_parked(engine, "sig-timeout")
        await clock.wait_for_sleepers()
        assert clock.next_deadline() == T0 + 30
        clock.set(T0 + 30)
        # Timed out: the run now sleeps in "gap"; a signal arrives meanwhile.
        await engine.wait_until(lambda: "2" in latest(engine, "sig-timeout").pending)
        await until_parked(engine, "sig-timeout")
        await h.signal("x", "late")
        assert [s[1:] for s in latest(engine, "sig-timeout").signals] == [("x", "late")]
        clock.set(T0 + 130)
        assert await h.result() == [None, "late"]
        waits = await records(engine, "sig-timeout", "WaitCompleted")
        assert [(w["seq"], w["signal_id"], w["value"]) for w in waits] == [
            ("1", None, None),
            ("3", 1, "late"),
        ]


async def test_signals_buffered_while_closed_survive_reopen(make_engine) -> None:
    async with make_engine() as engine:
        await engine.start(signal_pair, None, id="sig-reopen")
        await until_parked(engine, "sig-reopen")
        await engine.signal("sig-reopen", "x", "a")
        await engine.wait_until(lambda: latest(engine, "sig-reopen").ops["1"].done)
        await until_parked(engine, "sig-reopen")
    async with make_engine() as engine:
        await until_parked(engine, "sig-reopen")
        await engine.signal("sig-reopen", "x", "b")
        assert await engine.handle("sig-reopen").result() == ["a", "b"]


async def test_signalling_a_closed_run_is_rejected_with_its_status(make_engine) -> None:
    @workflow(name="life.signal_closed")
    async def wf(ctx: Ctx, _: None) -> str:
        return "done"

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="sig-closed")
        await h.result()
        with pytest.raises(Rejected, match="completed"):
            await h.signal("x", 1)
        with pytest.raises(Rejected, match="completed"):
            await engine.signal("sig-closed", "x", 1)


async def test_signalling_an_unknown_id_raises_not_found(make_engine) -> None:
    async with make_engine() as engine:
        with pytest.raises(NotFound, match="nobody"):
            await engine.signal("nobody", "x", 1)
        with pytest.raises(NotFound, match="nobody"):
            await engine.handle("nobody").signal("x", 1)


async def test_signal_with_start_when_the_run_does_not_exist(make_engine, records) -> None:
    async with make_engine() as engine:
        h = await engine.start(signal_pair, None, id="sws-new", signal=("x", "with start"))
        # Both the start and the signal are durable when start returns.
        types = [r["type"] for r in await engine.history("sws-new")]
        assert types[:2] == ["RunStarted", "SignalReceived"]
        assert engine.counters()["durable_lsn"] >= latest(engine, "sws-new").records[1][0]
        await until_parked(engine, "sws-new")
        await h.signal("x", "second")
        assert await h.result() == ["with start", "second"]


async def test_signal_with_start_when_the_run_exists_signals_it(make_engine, records) -> None:
    async with make_engine() as engine:
        first = await engine.start(signal_pair, None, id="sws-old")
        await until_parked(engine, "sws-old")
        run_id = first.run_id
        await engine.start(signal_pair, None, id="sws-old", signal=("x", 1))
        again = await engine.start(signal_pair, None, id="sws-old", signal=("x", 2))
        assert again.run_id == run_id  # the existing run, not a new one
        assert await again.result() == [1, 2]
        assert len(await records(engine, "sws-old", "RunStarted")) == 1


async def test_a_wait_timeout_across_close_and_reopen_keeps_its_deadline(
    make_engine, clock
) -> None:
    @workflow(name="life.signal_timeout_reopen")
    async def wf(ctx: Ctx, _: None) -> Any:
        return await ctx.wait_for("x", timeout=60)

    async with make_engine() as engine:
        await engine.start(wf, None, id="sig-deadline")
        await until_parked(engine, "sig-deadline")
    clock.advance(30)
    async with make_engine() as engine:
        await until_parked(engine, "sig-deadline")
        await clock.wait_for_sleepers()
        assert clock.next_deadline() == T0 + 60
        clock.set(T0 + 60)
        assert await engine.handle("sig-deadline").result() is None


async def test_a_signal_after_a_wait_timed_out_does_not_win_over_the_timeout(
    make_engine, clock
) -> None:
    @workflow(name="life.late_signal")
    async def wf(ctx: Ctx, _: None) -> object:
        return [await ctx.wait_for("go", timeout=10), await ctx.wait_for("go")]

    async with make_engine() as engine:
        await engine.start(wf, None, id="late")
        run = engine.runs.latest("late")
        await engine.wait_until(
            lambda: run.live.parked and engine.durability.durable_lsn >= run.last_lsn
        )
    clock.advance(60)
    async with make_engine(drive=False) as engine:
        await engine.signal("late", "go", "late")
    async with make_engine() as engine:
        assert await engine.handle("late").result() == [None, "late"]
