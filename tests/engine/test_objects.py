"""Virtual objects (issue 39, item 1, first part), on both stores: calls from workflows
and from outside reach a key exactly once, in order, one exclusive handler at a time;
shared handlers answer while an exclusive one waits; state holds across a reopen and
a crash of the caller."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import Any

import pytest

from fusee_runtime import (
    Ctx,
    NotFound,
    Rejected,
    RunFailed,
    UpdatePending,
    handler,
    object,
    step,
    workflow,
)

STORES = ("local", "postgresql")

GATE: dict[str, asyncio.Event] = {}
STARTED: dict[str, asyncio.Event] = {}
SEEN: list[str] = []


@step(name="obj.slow")
async def slow(item: str) -> str:
    SEEN.append(f"start {item}")
    if item in STARTED:
        STARTED[item].set()
    gate = GATE.get(item)
    if gate is not None:
        await gate.wait()
    SEEN.append(f"end {item}")
    return item


@object(name="cart")
class Cart:
    def __init__(self) -> None:
        self.items: list[str] = []

    @handler
    async def add(self, ctx: Ctx, item: str) -> int:
        self.items.append(await slow(item))
        return len(self.items)

    @handler
    def clear(self, ctx: Ctx) -> None:
        self.items = []

    @handler(shared=True)
    def count(self, ctx: Ctx) -> int:
        return len(self.items)


@object(name="napper")
class Napper:
    def __init__(self) -> None:
        self.naps = 0

    @handler
    async def nap(self, ctx: Ctx) -> int:
        await ctx.sleep("nap", 3600)
        self.naps += 1
        return self.naps


@workflow(name="obj.sleepy")
async def sleepy(ctx: Ctx, _: Any) -> int:
    answer: int = await ctx.object("napper", "n").call("nap")
    return answer


@object(name="purse")
class Purse:
    def __init__(self) -> None:
        self.total = "0"

    @handler
    async def put(self, ctx: Ctx, amount: Decimal) -> str:
        assert isinstance(amount, Decimal)  # read back into its annotation, live and replayed
        self.total = str(Decimal(self.total) + amount)
        return self.total


@workflow(name="obj.in_step")
async def in_step(ctx: Ctx, _: Any) -> Any:
    async def inside() -> Any:
        return await ctx.object("cart", "x").call("add", "y")

    return await ctx.step("inside", inside)


@workflow(name="obj.shopper")
async def shopper(ctx: Ctx, items: list[str]) -> list[int]:
    return [await ctx.object("cart", "alice").call("add", item) for item in items]


async def test_calls_from_workflows_and_outside_reach_a_key_once_in_order(
    make_engine: Any,
) -> None:
    SEEN.clear()
    async with make_engine() as engine:
        cart = engine.object("cart", "alice")
        assert await cart.call("add", "tea") == 1
        h = await engine.start(shopper, ["pen", "ink"], id="s-1")
        assert await h.result(timeout=30) == [2, 3]
        assert await cart.get() == {"items": ["tea", "pen", "ink"]}
        assert await cart.call("count") == 3
        assert await engine.object("cart", "bob").call("count") == 0  # its own key
    async with make_engine() as engine:  # held across a reopen, and replayed the same
        cart = engine.object("cart", "alice")
        assert await cart.get() == {"items": ["tea", "pen", "ink"]}
        await cart.call("clear")
        assert await cart.call("add", "cup") == 1
    assert SEEN.count("end pen") == 1 and SEEN.count("end cup") == 1


async def test_one_exclusive_handler_at_a_time_while_shared_ones_answer(
    make_engine: Any,
) -> None:
    SEEN.clear()
    GATE["slow-1"], STARTED["slow-1"] = asyncio.Event(), asyncio.Event()
    async with make_engine() as engine:
        cart = engine.object("cart", "carol")
        first = asyncio.ensure_future(cart.call("add", "slow-1"))
        await STARTED["slow-1"].wait()
        second = asyncio.ensure_future(cart.call("add", "next"))
        # The second waits its turn, and a shared handler answers meanwhile.
        assert await cart.call("count") == 0
        assert "start next" not in SEEN
        GATE["slow-1"].set()
        assert (await first, await second) == (1, 2)
        assert SEEN == ["start slow-1", "end slow-1", "start next", "end next"]
    GATE.clear()


async def test_a_call_sent_again_with_its_id_is_applied_once(make_engine: Any) -> None:
    async with make_engine() as engine:
        cart = engine.object("cart", "dave")
        assert await cart.call("add", "one", update_id="u-1") == 1
        assert await cart.call("add", "one", update_id="u-1") == 1  # its recorded outcome
        assert await cart.get() == {"items": ["one"]}


async def test_a_caller_crashed_mid_call_calls_once(make_engine: Any) -> None:
    """The caller's engine crashes after the object applied the call but before the
    caller's step recorded it: the step runs again with the same key, and the object
    answers with what it recorded."""
    SEEN.clear()
    GATE["held"], STARTED["held"] = asyncio.Event(), asyncio.Event()
    engine = make_engine()
    await engine.open()
    await engine.start(shopper, ["held"], id="s-2")
    await STARTED["held"].wait()
    await engine.close(crash=True)  # (mid-handler: nothing applied yet)
    GATE.clear()
    async with make_engine() as engine:
        assert await engine.handle("s-2").result(timeout=30) == [1]
        assert await engine.object("cart", "alice").get() == {"items": ["held"]}
    assert SEEN.count("end held") == 1


async def test_a_close_does_not_spend_its_grace_on_a_call_to_its_own_key(
    make_engine: Any, clock: Any
) -> None:
    """Found by the torture's counter (seed 8032): a caller's step waiting for a key of
    the same engine counted as a step function running, so a close waited its whole
    grace for a handler that the close itself had stopped. Now the close does not wait
    for it (this test would hang for an hour otherwise); the call is made again in the
    next life with its id, and the key applies it once."""
    engine = make_engine()
    await engine.open()
    await engine.start(sleepy, None, id="z-1")
    key = engine.runs.latest
    await engine.wait_until(
        lambda: (
            (run := engine.runs.find_latest("object:napper:n")) is not None
            and bool(run.updates_accepted)
            and run.live.parked
        )
    )
    assert engine.driver.workers.attempts == 0  # the caller's step holds no grace
    await engine.close(grace=3600)
    assert key("z-1").status.is_open
    clock.advance(3600)
    async with make_engine() as engine:
        assert await engine.handle("z-1").result(timeout=30) == 1
        assert await engine.object("napper", "n").get() == {"naps": 1}


async def test_typed_arguments_long_caller_ids_and_what_describe_shows(
    make_engine: Any,
) -> None:
    """Review findings: a handler's annotated argument is typed as a workflow's update
    handler's is; a caller whose id is long still makes its call
    (its call id, its step's key, is hashed to fit); a call from inside a step function
    is refused (it would share its step's key with any other); `describe` of a closed
    key lists no queue, and of a run that is not the object's key says so."""
    SEEN.clear()
    long_id = "c" * 250
    async with make_engine() as engine:
        purse = engine.object("purse", "p")
        assert await purse.call("put", Decimal("1.10")) == "1.10"
        assert await purse.call("put", Decimal("2.25")) == "3.35"
        h = await engine.start(shopper, ["long"], id=long_id)
        assert await h.result(timeout=30) == [1]
        failing = await engine.start(in_step, None, id="in-step")
        with pytest.raises(RunFailed, match="inside a step function"):
            await failing.result(timeout=30)
        await engine.handle("object:purse:p").terminate("closed for the test")
        doc = await purse.describe()
        assert (doc["status"], doc["queue"], doc["state"]) == ("terminated", [], None)
        await engine.start(shopper, [], id="object:cart:squatter")
        with pytest.raises(NotFound, match="not a key of 'cart'"):
            await engine.object("cart", "squatter").describe()
    async with make_engine() as engine:  # replayed: the same typed state
        state = await engine.object("cart", "alice").get()
        assert state == {"items": ["long"]}


async def test_a_signal_sent_to_a_key_by_hand_does_not_close_it(make_engine: Any) -> None:
    """Found by a new user: `describe` of a key says it waits for signal 'fusee.never';
    sending it closed the key for good. The key takes it and waits again."""
    async with make_engine() as engine:
        cart = engine.object("cart", "frank")
        assert await cart.call("add", "one") == 1
        await engine.signal("object:cart:frank", "fusee.never", True)
        assert await cart.call("add", "two") == 2
        assert (await cart.describe())["status"] in ("running", "parked")
    with pytest.raises(TypeError, match="without ':', '#' or '/'"):

        @object(name="a/b")
        class Slashed:
            @handler
            def h(self, ctx: Ctx) -> None: ...


async def test_a_caller_outside_is_told_when_its_call_is_accepted_and_not_applied(
    make_engine: Any,
) -> None:
    """An engine closing under an accepted call says `UpdatePending` (not a plain
    refusal): sent again with its id to the next engine, it is applied once."""
    SEEN.clear()
    GATE["pending"], STARTED["pending"] = asyncio.Event(), asyncio.Event()
    engine = make_engine()
    await engine.open()
    call = asyncio.ensure_future(
        engine.object("cart", "erin").call("add", "pending", update_id="p-1")
    )
    await STARTED["pending"].wait()
    await engine.close()  # (no grace: the handler's step is cut off)
    with pytest.raises(UpdatePending, match="update id 'p-1'"):
        await call
    GATE["pending"].set()
    async with make_engine() as engine:
        assert await engine.object("cart", "erin").call("add", "pending", update_id="p-1") == 1
        assert await engine.object("cart", "erin").get() == {"items": ["pending"]}
    GATE.clear()


async def test_calls_to_what_is_not_there_are_clear(make_engine: Any) -> None:
    async with make_engine() as engine:
        with pytest.raises(NotFound, match=r"no object 'nope'; objects: .*cart"):
            await engine.object("nope", "k").call("add", 1)
        with pytest.raises(NotFound, match="has no handler 'pay'; its handlers: add, clear"):
            await engine.object("cart", "k").call("pay")
        with pytest.raises(NotFound):
            await engine.object("cart", "never-called").get()
    with pytest.raises(TypeError, match="has no @handler"):

        @object
        class Empty:
            pass

    with pytest.raises(TypeError, match="plain def"):

        class Bad:
            @handler(shared=True)
            async def read(self, ctx: Ctx) -> None: ...

    assert Rejected  # (a key calling itself is refused: see ObjectRef.call)


async def test_calls_queued_behind_one_cut_by_a_crash_are_all_applied_after(
    make_engine: Any,
) -> None:
    """Found by the torture's counter: a crash while one call was in its handler and
    others waited their turn (accepted, recorded) left the key parked with the waiting
    ones never applied after the reopen; their callers waited for ever."""
    SEEN.clear()
    GATE["first"], STARTED["first"] = asyncio.Event(), asyncio.Event()
    engine = make_engine()
    await engine.open()
    await engine.start(shopper, ["first"], id="q-1")
    await STARTED["first"].wait()
    await engine.start(shopper, ["second"], id="q-2")
    await engine.start(shopper, ["third"], id="q-3")
    run = engine.runs.latest("object:cart:alice")
    await engine.wait_until(lambda: len(run.updates_accepted) == 3)
    await engine.close(crash=True)
    GATE.clear()
    async with make_engine() as engine:
        results = [await engine.handle(f"q-{i}").result(timeout=30) for i in (1, 2, 3)]
        assert sorted(r[0] for r in results) == [1, 2, 3]
        state = await engine.object("cart", "alice").get()
        assert state == {"items": ["first", "second", "third"]}
