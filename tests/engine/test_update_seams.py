"""The seams of queries and updates with parking, reopening and each other (issue 35,
items 1 to 4), on both stores: a run answers through its handlers whether or not its
code ran in this process; a second async update to a parked run is applied; a plain
update applied after an async one is applied again on replay; an update id sent twice
at once runs its handler once, and another id after it runs it again."""

from __future__ import annotations

import asyncio
from typing import Any

from fusee_runtime import Ctx, step, workflow

STORES = ("local", "postgresql")

RESERVED: list[str] = []


@step(name="seam.reserve")
async def reserve(item: str) -> str:
    RESERVED.append(item)
    return f"hold-{item}"


@workflow(name="seam.box")
async def box(ctx: Ctx, _: Any) -> list[str]:
    """A box of items: `put` adds one at once, `add` reserves it in a step first."""
    items: list[str] = []

    def put(item: str) -> int:
        items.append(item)
        return len(items)

    async def add(item: str) -> str:
        hold = await reserve(item)
        items.append(item)
        return hold

    ctx.on_query("items", lambda _: list(items))
    ctx.on_update("put", put)
    ctx.on_update("add", add)
    await ctx.wait_for("finish")
    return items


async def parked(engine: Any, id: str) -> None:
    await engine.wait_until(lambda: engine.runs.latest(id).live.parked)


async def test_a_parked_run_answers_its_handlers_at_once_after_a_reopen(make_engine: Any) -> None:
    async with make_engine() as engine:
        await engine.start("seam.box", None, id="b-1")
        await parked(engine, "b-1")
        await engine.handle("b-1").update("put", "pen")
    async with make_engine() as engine:
        h = engine.handle("b-1")
        # Asked before the code ran again here: it replays to its wait first.
        assert await h.query("items") == ["pen"]
        assert await h.update("put", "ink") == 2
        assert await h.update("add", "cup") == "hold-cup"
        assert await h.query("items") == ["pen", "ink", "cup"]
    engine = make_engine()
    await engine.open()
    await engine.close(crash=True)  # its code never ran in this life
    async with make_engine() as engine:
        h = engine.handle("b-1")
        assert await h.query("items") == ["pen", "ink", "cup"]
        await h.signal("finish")
        assert await h.result(timeout=30) == ["pen", "ink", "cup"]


async def test_a_home_opened_passively_answers_a_query_by_replaying(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("seam.box", None, id="b-3")
        await parked(engine, "b-3")
        await h.update("add", "a1")
        await h.update("put", "p1")
    RESERVED.clear()
    async with make_engine(drive=False) as engine:
        assert await engine.handle("b-3").query("items") == ["a1", "p1"]
        assert engine.runs.latest("b-3").live.queries == {}  # a copy replayed, not the run
    assert RESERVED == []  # no step ran


async def test_a_second_async_update_to_a_parked_run_is_applied(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("seam.box", None, id="b-4")
        await parked(engine, "b-4")
        assert await h.update("add", "a1", update_id="u-1") == "hold-a1"
        await parked(engine, "b-4")
        assert await h.update("add", "a2", update_id="u-2") == "hold-a2"
        assert await h.update("add", "a3") == "hold-a3"
        await h.signal("finish")
        assert await h.result(timeout=30) == ["a1", "a2", "a3"]


async def test_a_plain_update_after_an_async_one_is_applied_again_on_replay(
    make_engine: Any,
) -> None:
    async with make_engine() as engine:
        h = await engine.start("seam.box", None, id="b-5")
        await parked(engine, "b-5")
        assert await h.update("add", "a1") == "hold-a1"
        await parked(engine, "b-5")
        assert await h.update("put", "p1") == 2
        assert await h.query("items") == ["a1", "p1"]
        await h.signal("finish")  # the parked run replays both
        assert await h.result(timeout=30) == ["a1", "p1"]
    async with make_engine() as engine:  # and so does a reopen
        h2 = await engine.start("seam.box", None, id="b-6")
        await parked(engine, "b-6")
        await h2.update("put", "p0")
        await h2.update("add", "a1")
        await h2.update("put", "p1")
        await h2.update("add", "a2")
    async with make_engine() as engine:
        h2 = engine.handle("b-6")
        assert await h2.query("items") == ["p0", "a1", "p1", "a2"]
        await h2.signal("finish")
        assert await h2.result(timeout=30) == ["p0", "a1", "p1", "a2"]


async def test_one_update_id_sent_twice_at_once_runs_once_and_another_id_again(
    make_engine: Any,
) -> None:
    RESERVED.clear()
    async with make_engine() as engine:
        h = await engine.start("seam.box", None, id="b-7")
        await parked(engine, "b-7")
        first = asyncio.ensure_future(h.update("add", "x", update_id="same"))
        again = asyncio.ensure_future(h.update("add", "x", update_id="same"))
        assert await asyncio.gather(first, again) == ["hold-x", "hold-x"]
        assert await h.update("add", "y", update_id="other") == "hold-y"
        assert await h.update("add", "x", update_id="same") == "hold-x"
        await h.signal("finish")
        assert await h.result(timeout=30) == ["x", "y"]
    assert RESERVED == ["x", "y"]
