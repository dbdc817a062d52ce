"""`ctx.on_query`: a run answers from its state, records nothing, and keeps answering
while parked and after a restart (its code registers the handler again on replay)."""

from __future__ import annotations

from typing import Any

import pytest

from fusee_runtime import CodecError, Ctx, NotFound, Rejected, workflow


@workflow(name="queries.counter")
async def counter(ctx: Ctx, _: None) -> int:
    state = {"n": 0}
    ctx.on_query("count", lambda arg: state["n"] + (arg or 0))
    ctx.on_query("broken", lambda arg: 1 / 0)
    ctx.on_query("opaque", lambda arg: object())
    while True:
        got = await ctx.wait_for("add")
        if got is None:
            return state["n"]
        state["n"] += got


async def parked(engine: Any, id: str) -> None:
    await engine.wait_until(lambda: engine.runs.latest(id).live.parked)


async def test_a_query_answers_from_the_state_and_records_nothing(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("queries.counter", None, id="q-1")
        await parked(engine, "q-1")
        assert await h.query("count") == 0
        before = len(await h.history())
        await h.signal("add", 5)
        await engine.wait_until(lambda: engine.runs.latest("q-1").signals == [])
        await parked(engine, "q-1")
        assert await h.query("count") == 5
        assert await h.query("count", 10) == 15
        # The signal, the wait it ended and the next wait: nothing for the queries.
        assert len(await h.history()) == before + 3


async def test_a_reopened_home_answers_after_replay(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("queries.counter", None, id="q-2")
        await h.signal("add", 7)
        await engine.wait_until(lambda: engine.runs.latest("q-2").signals == [])
    async with make_engine() as engine:
        await parked(engine, "q-2")
        assert await engine.handle("q-2").query("count") == 7


async def test_query_errors(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("queries.counter", None, id="q-3")
        await parked(engine, "q-3")
        with pytest.raises(Rejected, match="has no query handler 'nope'; its handlers: broken"):
            await h.query("nope")
        with pytest.raises(Rejected, match="query 'broken' of run 'q-3' failed: ZeroDivision"):
            await h.query("broken")
        with pytest.raises(CodecError, match="the answer to query 'opaque' cannot be encoded"):
            await h.query("opaque")
        with pytest.raises(NotFound):
            await engine.handle("nope").query("count")


async def test_a_passive_open_answers_from_a_replay_in_memory(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("queries.counter", None, id="q-4")
        await h.signal("add", 5)
        await engine.wait_until(lambda: engine.runs.latest("q-4").signals == [])
        await parked(engine, "q-4")
    async with make_engine(drive=False) as passive:
        before = len(await passive.handle("q-4").history())
        assert await passive.handle("q-4").query("count", 1) == 6
        with pytest.raises(Rejected, match="run 'q-4' has no query handler 'nope'"):
            await passive.handle("q-4").query("nope")
        assert len(await passive.handle("q-4").history()) == before  # nothing recorded
