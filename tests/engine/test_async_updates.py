"""Updates that run steps (issue 20, item 4): `ctx.on_update(name, handler)` with an
`async def` handler that awaits steps, sleeps and waits like workflow code. Temporal's
update scenarios: an update running an activity-like step, deduplication by id, a
validator refusing before anything is recorded, an update replayed after a restart,
and updates accepted while the run sleeps, waits inside `ctx.all`, or runs a step."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from fusee_runtime import Cancelled, Ctx, JournalFailed, Rejected, step, workflow
from fusee_runtime.journal.records import R
from fusee_runtime.journal.storage import Storage
from fusee_runtime.model import codec

CALLS: list[str] = []
GATE = {"main": asyncio.Event(), "handler": asyncio.Event()}
"""What the test lets go on (`main`, `handler`), and what a step tells it started
(`main_in`, `handler_in`): a step entering tells the engine nothing to wait on."""


@pytest.fixture(autouse=True)
def fresh() -> None:
    CALLS.clear()
    for name in ("main", "handler", "main_in", "handler_in"):
        GATE[name] = asyncio.Event()


@step(name="au.reserve")
async def reserve(item: str) -> int:
    CALLS.append(f"reserve {item}")
    return len(item)


@step(name="au.slow_reserve")
async def slow_reserve(item: str) -> int:
    CALLS.append(f"slow {item}")
    GATE["handler_in"].set()
    await GATE["handler"].wait()
    return len(item)


def cart(ctx: Ctx, items: list[str], *, slow: bool = False, nap: float = 0) -> None:
    """Registers the cart's update "add": it reserves the item in a step, then adds it."""

    def check(item: str) -> None:
        if not item:
            raise ValueError("an item has a name")

    async def add(item: str) -> dict[str, Any]:
        reserved = await (slow_reserve if slow else reserve)(item)
        if nap:
            await ctx.sleep("settle", nap)
        items.append(item)
        CALLS.append(f"added {item}")
        return {"items": len(items), "reserved": reserved}

    ctx.on_update("add", add, validate=check)
    ctx.on_query("items", lambda _: list(items))


@workflow(name="au.waits")
async def waits(ctx: Ctx, how: dict[str, Any]) -> list[str]:
    items: list[str] = []
    cart(ctx, items, slow=how.get("slow", False), nap=how.get("nap", 0))
    await ctx.wait_for("checkout")
    return items


def records(engine: Any, id: str, kind: R) -> list[list[Any]]:
    """The run's records of `kind`, each as the JSON array the journal holds."""
    recs = engine.runs.latest(id).records
    return [orjson.loads(codec.encode(rec)) for _, rec in recs if rec.code == kind]


async def test_an_async_update_runs_a_step_and_answers_once_durable(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("au.waits", {}, id="c-1")
        await engine.wait_until(lambda: engine.runs.latest("c-1").live.parked)
        said = await h.update("add", "book")
        assert said == {"items": 1, "reserved": 4}
        # durable when it answers: the step's result and the update's outcome
        assert (
            engine.durability.durable_lsn
            >= engine.runs.latest("c-1").updates_done[
                next(iter(engine.runs.latest("c-1").updates_done))
            ][0]
        )
        (step_done,) = records(engine, "c-1", R.StepCompleted)
        assert step_done[2] == "1.u1.1"  # numbered apart from the code's operations
        assert await h.query("items") == ["book"]
        await h.signal("checkout")
        assert await h.result(timeout=10) == ["book"]
    # the step ran once; the handler ran again when the signal woke the parked run
    assert CALLS == ["reserve book", "added book", "added book"]


async def test_an_update_sent_again_with_its_id_is_applied_once(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("au.waits", {"slow": True}, id="c-2")
        await engine.wait_until(lambda: engine.runs.latest("c-2").live.parked)
        first = asyncio.ensure_future(h.update("add", "pen", update_id="u-1"))
        await GATE["handler_in"].wait()
        again = asyncio.ensure_future(h.update("add", "pen", update_id="u-1"))  # in flight
        GATE["handler"].set()
        assert await first == await again == {"items": 1, "reserved": 3}
        assert await h.update("add", "pen", update_id="u-1") == {"items": 1, "reserved": 3}
        assert await h.query("items") == ["pen"]
        assert len(records(engine, "c-2", R.UpdateAccepted)) == 1
    assert CALLS == ["slow pen", "added pen"]


async def test_a_validator_refuses_before_anything_is_recorded(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("au.waits", {}, id="c-3")
        await engine.wait_until(lambda: engine.runs.latest("c-3").live.parked)
        before = len(engine.runs.latest("c-3").records)
        with pytest.raises(Rejected, match="update 'add' of run 'c-3' was refused: an item"):
            await h.update("add", "")
        assert len(engine.runs.latest("c-3").records) == before
    assert CALLS == []


async def test_an_applied_update_is_replayed_after_a_restart(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("au.waits", {}, id="c-4")
        await engine.wait_until(lambda: engine.runs.latest("c-4").live.parked)
        await h.update("add", "lamp", update_id="u-4")
    async with make_engine() as engine:
        h = engine.handle("c-4")
        await h.signal("checkout")  # its code replays: the update is applied again
        assert await h.result(timeout=10) == ["lamp"]
        assert await h.update("add", "lamp", update_id="u-4") == {"items": 1, "reserved": 4}
    assert CALLS == ["reserve lamp", "added lamp", "added lamp"]  # the step ran once


async def test_an_update_cut_off_by_a_crash_finishes_after_the_restart(make_engine: Any) -> None:
    engine = make_engine()
    await engine.open()
    h = await engine.start("au.waits", {"slow": True}, id="c-5")
    await engine.wait_until(lambda: engine.runs.latest("c-5").live.parked)
    sent = asyncio.ensure_future(h.update("add", "desk", update_id="u-5"))
    await GATE["handler_in"].wait()
    await engine.close(crash=True)
    with pytest.raises(Rejected, match="send it again with update id 'u-5'"):
        await sent
    GATE["handler"].set()
    async with make_engine() as engine:  # its handler runs again from its start
        h = engine.handle("c-5")
        assert await h.update("add", "desk", update_id="u-5") == {"items": 1, "reserved": 4}
        await h.signal("checkout")
        assert await h.result(timeout=10) == ["desk"]
    # the step cut off ran again; then the handler replayed when the signal woke the run
    assert CALLS == ["slow desk", "slow desk", "added desk", "added desk"]


# -- accepted wherever the code waits -------------------------------------------------------


@workflow(name="au.sleeps")
async def sleeps(ctx: Ctx, _: None) -> list[str]:
    items: list[str] = []
    cart(ctx, items)
    await ctx.sleep("nap", 3600)
    CALLS.append("woke")
    return items


async def test_an_update_is_accepted_while_the_run_sleeps(make_engine: Any, clock: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("au.sleeps", None, id="s-1")
        await engine.wait_until(lambda: engine.runs.latest("s-1").live.parked)
        assert await h.update("add", "tea") == {"items": 1, "reserved": 3}
        assert engine.runs.latest("s-1").live.parked  # sleeping still
        clock.advance(3600)
        assert await h.result(timeout=10) == ["tea"]
    assert CALLS == ["reserve tea", "added tea", "added tea", "woke"]


@workflow(name="au.group")
async def group(ctx: Ctx, _: None) -> list[Any]:
    items: list[str] = []
    cart(ctx, items)
    got = await ctx.all([ctx.wait_for("a"), ctx.wait_for("b")])
    return [got, items]


async def test_an_update_is_accepted_inside_ctx_all(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("au.group", None, id="g-1")
        await engine.wait_until(lambda: len(engine.runs.latest("g-1").live.waiters) == 2)
        await h.signal("a", 1)
        assert await h.update("add", "mug") == {"items": 1, "reserved": 3}
        await h.signal("b", 2)
        assert await h.result(timeout=10) == [[1, 2], ["mug"]]


@step(name="au.main_step")
async def main_step() -> str:
    GATE["main_in"].set()
    await GATE["main"].wait()
    CALLS.append("main step returned")
    return "main"


@workflow(name="au.busy")
async def busy(ctx: Ctx, _: None) -> list[Any]:
    items: list[str] = []
    cart(ctx, items, slow=True)
    done = await main_step()
    CALLS.append(f"code saw {list(items)}")
    return [done, items]


async def test_an_update_runs_as_a_unit_while_a_step_of_the_code_is_in_flight(
    make_engine: Any,
) -> None:
    async with make_engine() as engine:
        h = await engine.start("au.busy", None, id="b-1")
        await GATE["main_in"].wait()
        sent = asyncio.ensure_future(h.update("add", "ink"))
        await GATE["handler_in"].wait()
        GATE["main"].set()  # the code's step returns while the handler runs
        await engine.wait_until(lambda: "main step returned" in CALLS)
        GATE["handler"].set()
        assert await sent == {"items": 1, "reserved": 3}
        assert await h.result(timeout=10) == ["main", ["ink"]]
    # the code went on from its step only once the update was applied
    assert CALLS == ["slow ink", "main step returned", "added ink", "code saw ['ink']"]


async def test_an_update_that_sleeps_parks_with_the_run_and_goes_on(
    make_engine: Any, clock: Any
) -> None:
    async with make_engine() as engine:
        h = await engine.start("au.waits", {"nap": 60}, id="n-1")
        await engine.wait_until(lambda: engine.runs.latest("n-1").live.parked)
        sent = asyncio.ensure_future(h.update("add", "cup"))
        await engine.wait_until(
            lambda: CALLS == ["reserve cup"] and engine.runs.latest("n-1").live.parked
        )
        clock.advance(60)
        assert await sent == {"items": 1, "reserved": 3}
        await h.signal("checkout")
        assert await h.result(timeout=10) == ["cup"]
    assert CALLS == ["reserve cup", "added cup", "added cup"]


async def test_plain_handlers_still_apply_at_once(make_engine: Any) -> None:
    @workflow(name="au.plain")
    async def plain(ctx: Ctx, _: None) -> list[int]:
        seen: list[int] = []
        ctx.on_update("push", lambda n: seen.append(n) or len(seen))
        await ctx.wait_for("done")
        return seen

    async with make_engine() as engine:
        h = await engine.start("au.plain", None, id="p-1")
        await engine.wait_until(lambda: engine.runs.latest("p-1").live.parked)
        assert await h.update("push", 7) == 1
        assert records(engine, "p-1", R.UpdateAccepted) == []
        await h.signal("done")
        assert await h.result(timeout=10) == [7]


async def test_an_update_applied_beside_a_step_in_flight_replays_after_a_restart(
    make_engine: Any,
) -> None:
    async with make_engine() as engine:
        h = await engine.start("au.busy", None, id="b-2")
        await GATE["main_in"].wait()
        GATE["handler"].set()
        assert await h.update("add", "nib") == {"items": 1, "reserved": 3}
    # The code's step (#1) has no record yet; the update's ("1.u1.1") does.
    GATE["main"].set()
    async with make_engine() as engine:
        assert await engine.handle("b-2").result(timeout=10) == ["main", ["nib"]]
    assert CALLS == ["slow nib", "added nib", "main step returned", "added nib", "code saw ['nib']"]


# -- in turn, as replay applies them (found by a review of item 4) -------------------------


@workflow(name="au.mixed")
async def mixed(ctx: Ctx, _: None) -> list[str]:
    items: list[str] = []
    cart(ctx, items, slow=True)
    ctx.on_update("push", lambda item: items.append(item) or len(items))
    await ctx.wait_for("checkout")
    await ctx.wait_for("really")
    return items


async def test_updates_apply_in_turn_live_and_on_replay(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("au.mixed", None, id="m-1")
        run = engine.runs.latest("m-1")
        await engine.wait_until(lambda: run.live.parked)
        first = asyncio.ensure_future(h.update("add", "slow"))
        await GATE["handler_in"].wait()
        second = asyncio.ensure_future(h.update("add", "next"))  # waits its turn
        with pytest.raises(Rejected, match="is applying an earlier update; send update 'push'"):
            await h.update("push", "plain")
        GATE["handler"].set()
        assert (await first, await second) == (
            {"items": 1, "reserved": 4},
            {"items": 2, "reserved": 4},
        )
        assert await h.update("push", "plain") == 3
        live = await h.query("items")
        await h.signal("checkout")  # the parked run's code replays: every update again
        await engine.wait_until(lambda: run.live.parked and run.live.position == 2)
        assert await h.query("items") == live == ["slow", "next", "plain"]
    # then replayed: the handlers again, not their steps
    assert CALLS == [
        "slow slow",
        "added slow",
        "slow next",
        "added next",
        "added slow",
        "added next",
    ]


@workflow(name="au.cancelled")
async def cancelled(ctx: Ctx, _: None) -> list[str]:
    items: list[str] = []

    async def hold(item: str) -> str:
        await ctx.wait_for("ok")
        items.append(item)
        return item

    ctx.on_update("hold", hold)
    await main_step()
    return items


async def test_the_runs_cancel_lands_in_the_code_not_in_a_waiting_handler(
    make_engine: Any,
) -> None:
    async with make_engine() as engine:
        h = await engine.start("au.cancelled", None, id="x-2")
        await GATE["main_in"].wait()
        sent = asyncio.ensure_future(h.update("hold", "x"))
        run = engine.runs.latest("x-2")
        await engine.wait_until(lambda: any(".u" in s for s in run.live.waiters))
        await h.cancel("stop")
        with pytest.raises(Cancelled, match="stop"):
            await h.result(timeout=10)
        with pytest.raises(Rejected, match="closed before update 'hold' was applied"):
            await sent
        cancels = [rec[2] for rec in records(engine, "x-2", R.OpCancelled)]
    assert cancels == ["1"]  # the code's step, not the handler's wait


@workflow(name="au.then")
async def then(ctx: Ctx, _: None) -> list[str]:
    items: list[str] = []
    cart(ctx, items)
    await main_step()
    CALLS.append(f"code saw {list(items)}")
    await ctx.wait_for("checkout")
    return items


async def test_an_update_takes_the_position_it_was_recorded_at(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("au.then", None, id="t-1")
        await GATE["main_in"].wait()
        sent = asyncio.ensure_future(h.update("add", "ink"))
        await asyncio.sleep(0)  # accepted, not durable yet; the code's step returns now
        GATE["main"].set()
        assert await sent == {"items": 1, "reserved": 3}
        await engine.wait_until(lambda: engine.runs.latest("t-1").live.parked)
        (accepted,) = records(engine, "t-1", R.UpdateAccepted)
        steps = [rec[2] for rec in records(engine, "t-1", R.StepCompleted)]
    assert accepted[5] == 1 and "1.u1.1" in steps
    async with make_engine() as engine:
        await engine.handle("t-1").signal("checkout")
        assert await engine.handle("t-1").result(timeout=10) == ["ink"]
    assert CALLS.count("reserve ink") == 1
    assert CALLS.count("code saw ['ink']") == 2 and "code saw []" not in CALLS


@step(name="au.early")
async def early() -> str:
    return "early"


@workflow(name="au.branches")
async def branches(ctx: Ctx, _: None) -> list[Any]:
    items: list[str] = []
    cart(ctx, items)

    async def first() -> str:
        await early()
        CALLS.append(f"branch saw {list(items)}")
        return await ctx.wait_for("x")

    return [await ctx.all([first(), ctx.wait_for("y")]), items]


async def test_in_a_group_replay_starts_the_handler_after_what_came_before_it(
    make_engine: Any,
) -> None:
    async with make_engine() as engine:
        h = await engine.start("au.branches", None, id="br-1")
        run = engine.runs.latest("br-1")
        await engine.wait_until(lambda: len(run.live.waiters) == 2)  # both branches wait
        assert await h.update("add", "ink") == {"items": 1, "reserved": 3}
    async with make_engine() as engine:  # replayed: the branch went on before the update
        h = engine.handle("br-1")
        await h.signal("x", 1)
        await h.signal("y", 2)
        assert await h.result(timeout=10) == [[1, 2], ["ink"]]
    assert CALLS.count("branch saw []") == 2 and "branch saw ['ink']" not in CALLS


class FailingSync(Storage):
    """Fails every `fdatasync` once armed (by the handler's step)."""

    armed = False

    def sync(self, fd: int) -> None:
        if FailingSync.armed:
            raise OSError(5, "Input/output error")
        super().sync(fd)


@step(name="au.arm")
async def arm() -> int:
    FailingSync.armed = True
    return 1


@workflow(name="au.fails")
async def fails(ctx: Ctx, _: None) -> None:
    async def bump(_: None) -> int:
        await arm()
        return await reserve("never")  # waits for arm's result, which cannot be durable

    ctx.on_update("bump", bump)
    await ctx.wait_for("never")


async def test_an_update_the_journal_failed_under_says_so(make_engine: Any) -> None:
    """Its handler stopped, as its step's result could not be made durable: the caller
    gets the journal's failure, not an invitation to send the update again."""
    FailingSync.armed = False
    async with make_engine(storage=FailingSync()) as engine:
        h = await engine.start("au.fails", None, id="f-1")
        await engine.wait_until(lambda: engine.runs.latest("f-1").live.parked)
        with pytest.raises(JournalFailed, match="Input/output error"):
            await h.update("bump", None, update_id="u-f")
    assert CALLS == []


@workflow(name="au.between")
async def between(ctx: Ctx, _: None) -> list[str]:
    items: list[str] = []

    async def add(item: str) -> int:
        GATE["handler_in"].set()
        await GATE["handler"].wait()  # between two operations: not a wait that parks
        items.append(item)
        return await reserve(item)

    ctx.on_update("add", add)
    await ctx.wait_for("checkout")
    return items


async def test_a_run_does_not_park_under_a_handler_between_two_operations(
    make_engine: Any,
) -> None:
    """The code waits for a signal, and the handler of an update is running: parked
    now, the run would drop the handler, and the update would never be applied."""
    async with make_engine() as engine:
        h = await engine.start("au.between", None, id="bt-1")
        run = engine.runs.latest("bt-1")
        await engine.wait_until(lambda: run.live.parked)
        sent = asyncio.ensure_future(h.update("add", "cup", update_id="u-bt"))
        await GATE["handler_in"].wait()
        for _ in range(5):  # the loop runs what is ready: a park would be decided now
            await asyncio.sleep(0)
        assert not run.live.parked
        GATE["handler"].set()
        assert await sent == 3
        await engine.wait_until(lambda: run.live.parked)  # then it parks, the handler done
        await h.signal("checkout")
        assert await h.result(timeout=10) == ["cup"]
