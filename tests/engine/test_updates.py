"""`ctx.on_update`: validated, recorded with an id, answered once durable, and applied
again by a replay at the same point of the code, so the code sees the same state."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from fusee_runtime import Cancelled, Ctx, NotFound, Rejected, step, workflow
from fusee_runtime.model.run import Status


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
    await engine.wait_until(lambda: engine.runs.latest(id).live.parked)


async def updates_of(engine: Any, id: str) -> list[dict[str, Any]]:
    return [r for r in await engine.history(id) if r["type"] == "UpdateApplied"]


async def test_an_update_changes_the_state_and_answers_once_durable(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("updates.cart", None, id="u-1")
        await parked(engine, "u-1")
        assert await h.update("add", "tea") == 1
        assert engine.durability.durable_lsn >= engine.runs.latest("u-1").last_lsn
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
        assert engine.runs.latest("u-2").status == Status.COMPLETED  # not stuck


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
        await engine.wait_until(lambda: len(engine.runs.latest("u-7").pending) == 2)
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


# -- found in review: each failed before its fix -------------------------------------------


@workflow(name="updates.cancelled")
async def cancelled_step(ctx: Ctx, _: None) -> Any:
    state = {"limit": 0}
    ctx.on_update("limit", lambda v: state.update(limit=v) or v)
    ctx.on_query("limit", lambda _: state["limit"])
    with contextlib.suppress(Cancelled):
        await ctx.step("block", _blocks)  # op 1: the update lands while it runs
    await ctx.wait_for("never")  # op 2: parks
    return state


async def _blocks() -> None:
    await asyncio.get_running_loop().create_future()


async def test_an_update_then_a_cancel_replay_in_that_order(make_engine: Any) -> None:
    async with make_engine() as engine:
        await engine.start("updates.cancelled", None, id="x-1")
        await engine.wait_until(lambda: "1" in engine.runs.latest("x-1").live.execution.step_tasks)
        assert await engine.update("x-1", "limit", 500) == 500
        await engine.cancel("x-1")
        await parked(engine, "x-1")
        assert await engine.query("x-1", "limit") == 500
    async with make_engine() as engine:
        await parked(engine, "x-1")
        assert await engine.query("x-1", "limit") == 500


@workflow(name="updates.clock")
async def reads_the_clock(ctx: Ctx, _: None) -> Any:
    deadline = ctx.now().timestamp() + 60
    ctx.on_query("left", lambda _: deadline - ctx.now().timestamp())
    ctx.on_query("appends", lambda _: ctx.stream("s").append(1))
    ctx.on_query("sleeps", lambda _: ctx.sleep("nap", 1))
    ctx.on_update("bump", lambda _: ctx.random() >= 0)
    await ctx.wait_for("a")
    await ctx.wait_for("b")
    return "done"


async def test_handlers_that_use_ctx_record_nothing(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("updates.clock", None, id="x-2")
        await parked(engine, "x-2")
        before = len(await h.history())
        assert await h.query("left") == 60  # ctx.now() in a handler: the clock, unrecorded
        with pytest.raises(Rejected, match=r"append\(\) is only available in the workflow code"):
            await h.query("appends")
        with pytest.raises(Rejected, match="must be a plain function, not async"):
            await h.query("sleeps")
        assert await h.update("bump") is True
        await h.signal("a")
        await h.signal("b")
        assert await h.result() == "done"  # not stuck: nothing went into its numbering
        types = [r["type"] for r in (await h.history())[before:]]
        assert "ValueRecorded" not in types


@workflow(name="updates.big")
async def echoes(ctx: Ctx, _: None) -> Any:
    state = {"doc": ""}

    def put(doc: str) -> str:
        state["doc"] = doc
        return doc

    ctx.on_update("put", put)
    ctx.on_query("size", lambda _: len(state["doc"]))
    await ctx.wait_for("never")


async def test_an_update_too_large_to_record_with_its_result_fails_recorded(
    make_engine: Any,
) -> None:
    async with make_engine(payload_bytes_max=1 << 20) as engine:
        await engine.start("updates.big", None, id="x-3")
        await parked(engine, "x-3")
        with pytest.raises(Rejected, match="its argument and result are"):
            await engine.update("x-3", "put", "x" * 600_000)
        # The handler changed the state, and the journal says so: a replay agrees.
        assert await engine.query("x-3", "size") == 600_000
        assert len(await updates_of(engine, "x-3")) == 1
    async with make_engine(payload_bytes_max=1 << 20) as engine:
        await parked(engine, "x-3")
        assert await engine.query("x-3", "size") == 600_000


async def test_code_without_the_handler_of_a_recorded_update_is_stuck(
    make_engine: Any,
) -> None:
    async with make_engine() as engine:
        h = await engine.start("updates.cart", None, id="x-4")
        await parked(engine, "x-4")
        await h.update("add", "tea")
    original = cart.fn

    async def without_handler(ctx: Ctx, _: None) -> Any:
        await ctx.wait_for("checkout")
        return {}

    cart.fn = without_handler  # as a reload with new code would
    try:
        async with make_engine() as engine:
            await engine.wait_until(lambda: engine.runs.latest("x-4").status == Status.STUCK)
            assert "the journal holds update 'add'" in (engine.runs.latest("x-4").error or "")
    finally:
        cart.fn = original


@workflow(name="updates.continues")
async def continues(ctx: Ctx, n: int) -> Any:
    state = {"n": n}
    ctx.on_update("add", lambda k: state.update(n=state["n"] + k) or state["n"])
    await ctx.wait_for("next")
    await ctx.continue_as_new(state["n"])


async def test_an_update_id_holds_across_continue_as_new(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("updates.continues", 0, id="x-5")
        await parked(engine, "x-5")
        assert await h.update("add", 100, update_id="once") == 100
        first_run = h.run_id
        await h.signal("next")
        newest = engine.handle("x-5")  # the id's newest run (`h` stays on the first)
        await engine.wait_until(
            lambda: newest.run_id != first_run and engine.runs.latest("x-5").live.parked
        )
        assert await h.update("add", 100, update_id="once") == 100  # the first answer
        assert await h.update("add", 1) == 101


async def test_a_closed_run_answers_no_query(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("updates.cart", None, id="x-6")
        await parked(engine, "x-6")
        await h.signal("checkout")
        await h.result()
        with pytest.raises(Rejected, match="is completed: only open runs answer queries"):
            await h.query("items")


@workflow(name="updates.half")
async def half_done(ctx: Ctx, _: None) -> Any:
    items: list[str] = []

    def add(item: str) -> None:
        items.append(item)
        if item == "bad":
            ctx.key()  # raises Rejected here: a handler is not a step

    ctx.on_update("add", add)
    ctx.on_query("items", lambda _: list(items))
    await ctx.wait_for("never")


async def test_a_handler_that_raises_rejected_after_a_change_is_recorded(
    make_engine: Any,
) -> None:
    """Found in re-review: a Rejected raised by the handler itself skipped the record."""
    async with make_engine() as engine:
        h = await engine.start("updates.half", None, id="y-1")
        await parked(engine, "y-1")
        await h.update("add", "ok")
        with pytest.raises(Rejected, match="update 'add' of run 'y-1' failed"):
            await h.update("add", "bad")
        assert await h.query("items") == ["ok", "bad"]
    async with make_engine() as engine:
        await parked(engine, "y-1")
        assert await engine.handle("y-1").query("items") == ["ok", "bad"]


@workflow(name="updates.loud")
async def loud(ctx: Ctx, _: None) -> Any:
    sizes: list[int] = []

    def put(doc: str) -> None:
        sizes.append(len(doc))
        raise ValueError("x" * 10_000)  # a failure as large as it gets

    ctx.on_update("put", put)
    ctx.on_query("sizes", lambda _: list(sizes))
    await ctx.wait_for("never")


async def test_a_failed_update_with_a_large_argument_is_still_recorded(
    make_engine: Any,
) -> None:
    """Found in re-review: argument + failure went over the record limit, unrecorded."""
    async with make_engine(payload_bytes_max=20_000) as engine:
        h = await engine.start("updates.loud", None, id="y-2")
        await parked(engine, "y-2")
        with pytest.raises(Rejected, match=r"failed: .*ValueError"):
            await h.update("put", "d" * 19_000)
        assert len(await updates_of(engine, "y-2")) == 1
    async with make_engine(payload_bytes_max=20_000) as engine:
        await parked(engine, "y-2")
        assert await engine.handle("y-2").query("sizes") == [19_000]
