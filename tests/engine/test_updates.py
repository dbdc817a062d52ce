"""`ctx.on_update`: validated, recorded with an id, answered once durable, and applied
again by a replay at the same point of the code, so the code sees the same state."""

from __future__ import annotations

from typing import Any

import pytest

from fusee_runtime import Ctx, NotFound, Rejected, step, workflow
from fusee_runtime.engine.state import Status


def _must_be_text(item: Any) -> None:
    if not isinstance(item, str):
        raise ValueError(f"an item is a string, not {item!r}")


@step
async def updates_total(items: list[str]) -> list[str]:
    return sorted(items)


@workflow(name="updates.cart")
async def cart(ctx: Ctx, _: None) -> dict[str, Any]:
    items: list[str] = []

    def add(item: str) -> int:
        if item == "boom":
            items.append("half-done")
            raise RuntimeError("the handler broke")
        items.append(item)
        return len(items)

    ctx.on_update("add", add, validate=_must_be_text)
    ctx.on_query("items", lambda _: list(items))
    await ctx.wait_for("checkout")
    if len(items) > 1:
        # The path the code takes depends on the updates: a replay that did not
        # apply them where they were applied would not match the journal.
        await ctx.sleep("bulk", 0)
    return {"total": await updates_total(items), "n": len(items)}


@workflow(name="updates.group")
async def in_group(ctx: Ctx, _: None) -> Any:
    ctx.on_update("poke", lambda arg: arg)
    return await ctx.all([ctx.wait_for("a"), ctx.wait_for("b")])


async def parked(engine: Any, id: str) -> None:
    await engine.wait_until(lambda: engine._latest_run(id).parked)


async def updates_of(engine: Any, id: str) -> list[dict[str, Any]]:
    return [r for r in await engine.history(id) if r["type"] == "UpdateApplied"]


async def test_an_update_changes_the_state_and_answers_once_durable(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("updates.cart", None, id="u-1")
        await parked(engine, "u-1")
        assert await h.update("add", "tea") == 1
        assert engine._durable_lsn >= engine._latest_run("u-1").last_lsn
        assert await h.update("add", "milk") == 2
        assert await h.query("items") == ["tea", "milk"]
        await h.signal("checkout")
        assert await h.result() == {"total": ["milk", "tea"], "n": 2}
        recorded = await updates_of(engine, "u-1")
        assert [(r["name"], r["arg"], r["result"], r["position"]) for r in recorded] == [
            ("add", "tea", 1, 1),
            ("add", "milk", 2, 1),
        ]


async def test_a_replay_applies_the_updates_again_where_they_were(make_engine: Any) -> None:
    async with make_engine() as engine:
        await engine.start("updates.cart", None, id="u-2")
        await parked(engine, "u-2")
        await engine.handle("u-2").update("add", "tea")
        await engine.handle("u-2").update("add", "milk")
    async with make_engine() as engine:  # the code runs again from the top
        h = engine.handle("u-2")
        await parked(engine, "u-2")
        assert await h.query("items") == ["tea", "milk"]
        await h.signal("checkout")
        assert await h.result() == {"total": ["milk", "tea"], "n": 2}
        assert engine._latest_run("u-2").status == Status.COMPLETED  # not stuck


async def test_the_same_update_id_is_applied_once(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("updates.cart", None, id="u-3")
        await parked(engine, "u-3")
        assert await h.update("add", "tea", update_id="add-tea") == 1
        assert await h.update("add", "tea", update_id="add-tea") == 1
        assert await h.query("items") == ["tea"]
    async with make_engine() as engine:  # and after a restart too
        await parked(engine, "u-3")
        assert await engine.handle("u-3").update("add", "tea", update_id="add-tea") == 1
        assert len(await updates_of(engine, "u-3")) == 1


async def test_a_validator_refuses_and_nothing_is_recorded(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("updates.cart", None, id="u-4")
        await parked(engine, "u-4")
        with pytest.raises(Rejected, match="was refused: an item is a string, not 7"):
            await h.update("add", 7)
        assert await updates_of(engine, "u-4") == []
        assert await h.query("items") == []


async def test_a_handler_that_raises_is_recorded_and_replays_the_same(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("updates.cart", None, id="u-5")
        await parked(engine, "u-5")
        with pytest.raises(
            Rejected, match=r"update 'add' of run 'u-5' failed: .*the handler broke"
        ):
            await h.update("add", "boom")
        assert await h.query("items") == ["half-done"]
    async with make_engine() as engine:
        await parked(engine, "u-5")
        assert await engine.handle("u-5").query("items") == ["half-done"]


async def test_refusals(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("updates.cart", None, id="u-6")
        await parked(engine, "u-6")
        with pytest.raises(Rejected, match="has no update handler 'nope'; its handlers: add"):
            await h.update("nope", 1)
        with pytest.raises(NotFound):
            await engine.handle("nobody").update("add", "x")
        g = await engine.start("updates.group", None, id="u-7")
        await engine.wait_until(lambda: len(engine._latest_run("u-7").pending) == 2)
        with pytest.raises(Rejected, match=r"inside ctx\.all or ctx\.race"):
            await g.update("poke", 1)
        await h.signal("checkout")
        await h.result()
        with pytest.raises(Rejected, match="is completed: it takes no more updates"):
            await h.update("add", "late")
    async with make_engine(drive=False) as passive:
        await passive.start("updates.cart", None, id="u-8")
        with pytest.raises(Rejected, match="no process runs the code of 'u-8'"):
            await passive.handle("u-8").update("add", "x")


async def test_a_reset_keeps_the_updates_before_its_point(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("updates.cart", None, id="u-9")
        await parked(engine, "u-9")
        await h.update("add", "tea")
        await h.update("add", "milk")
        await h.signal("checkout")
        await h.result()
        await h.reset(to="updates_total")
        assert await engine.handle("u-9").result() == {"total": ["milk", "tea"], "n": 2}
