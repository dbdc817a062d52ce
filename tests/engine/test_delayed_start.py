"""Starts users ask for (issue 38): a run recorded now that begins later
(`start_delay`, `start_at`), and an update with its start (`start(update=...)`)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from fusee_runtime import Cancelled, Ctx, FakeClock, Rejected, Status, step, workflow
from fusee_runtime.model.run import WaitKind

STORES = ("local", "postgresql")
"""Each test that opens an engine runs on the local journal and on PostgreSQL."""

RAN: list[str] = []


@step
def ds_mark(what: str) -> str:
    RAN.append(what)
    return what


@workflow(name="ds.job")
async def ds_job(ctx: Ctx, what: str) -> str:
    return await ds_mark(what)


@workflow(name="ds.cart")
async def ds_cart(ctx: Ctx, _: Any) -> list[str]:
    """A cart: update "add" puts an item in, signal "checkout" ends it."""
    items: list[str] = []

    def add(item: str) -> int:
        items.append(item)
        return len(items)

    ctx.on_update("add", add)
    await ctx.wait_for("checkout")
    return items


@pytest.fixture(autouse=True)
def _fresh() -> None:
    RAN.clear()


async def test_a_delayed_run_is_scheduled_runs_no_code_then_begins_once(
    make_engine: Any, clock: FakeClock
) -> None:
    async with make_engine() as engine:
        handle = await engine.start(ds_job, "late", id="d-1", start_delay=timedelta(minutes=5))
        info = await handle.describe()
        assert info.status == Status.SCHEDULED
        (begin,) = info.waiting
        assert (begin.kind, begin.until) == (WaitKind.BEGIN, _at(clock.now() + 300))
        assert [i.id for i in await engine.list(status="open")] == ["d-1"]
        clock.advance(299)
        await clock.wait_for_sleepers()  # the timer task sleeps again: until the begin
        assert clock.next_deadline() == clock.now() + 1
        assert RAN == [] and (await handle.describe()).status == Status.SCHEDULED
    async with make_engine() as engine:  # recorded: a reopen keeps it scheduled
        handle = engine.handle("d-1")
        assert (await handle.describe()).status == Status.SCHEDULED
        clock.advance(1)
        assert await handle.result() == "late"
    async with make_engine() as engine:  # begun and done: it never begins again
        assert await engine.handle("d-1").result() == "late"
    assert RAN == ["late"]


async def test_a_run_whose_begin_passed_while_no_engine_ran_begins_on_open(
    make_engine: Any, clock: FakeClock
) -> None:
    begin = datetime.fromtimestamp(clock.now(), UTC) + timedelta(hours=1)
    async with make_engine() as engine:
        await engine.start(ds_job, "at", id="d-2", start_at=begin)
        assert (await engine.handle("d-2").describe()).status == Status.SCHEDULED
    clock.advance(7200)
    async with make_engine() as engine:
        assert await engine.handle("d-2").result() == "at"
    assert RAN == ["at"]


async def test_a_cancel_before_the_begin_closes_the_run_at_once(
    make_engine: Any, clock: FakeClock
) -> None:
    async with make_engine() as engine:
        handle = await engine.start(ds_job, "never", id="d-3", start_delay=60)
        await handle.cancel("not needed after all")
        with pytest.raises(Cancelled):
            await handle.result()
        clock.advance(120)
        await clock.run_until_idle()
        assert (await handle.describe()).status == Status.CANCELLED
    assert RAN == []


async def test_a_scheduled_run_takes_signals_for_later_and_refuses_handlers(
    make_engine: Any, clock: FakeClock
) -> None:
    async with make_engine() as engine:
        handle = await engine.start(ds_cart, None, id="d-4", start_delay=30)
        await handle.signal("checkout")  # kept for its code, which takes it once begun
        with pytest.raises(Rejected, match="scheduled to begin at"):
            await handle.update("add", "tea")
        with pytest.raises(Rejected, match="scheduled to begin at"):
            await handle.query("items")
        clock.advance(30)
        assert await handle.result() == []


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"start_delay": 5, "start_at": datetime(2030, 1, 1, tzinfo=UTC)}, "not both"),
        ({"start_delay": -1}, "0 or more"),
        ({"start_at": datetime(2030, 1, 1)}, "aware datetime"),  # naive: the mistake
        ({"update": ("add", "x"), "start_delay": 5}, "no start_delay"),
    ],
)
async def test_bad_start_options_are_refused_and_record_nothing(
    make_engine: Any, options: dict[str, Any], said: str
) -> None:
    async with make_engine() as engine:
        with pytest.raises(Rejected, match=said):
            await engine.start(ds_cart, None, id="bad", **options)
        assert await engine.list() == []


async def test_an_update_with_its_start_makes_one_run_and_applies_every_update(
    make_engine: Any,
) -> None:
    async with make_engine() as engine:
        handles = await asyncio.gather(
            *(
                engine.start(ds_cart, None, id="cart-1", update=("add", f"i{n}", f"u{n}"))
                for n in range(10)
            )
        )
        assert len({h.run_id for h in handles}) == 1
        assert sorted(h.update_result for h in handles) == list(range(1, 11))
        again = await engine.start(ds_cart, None, id="cart-1", update=("add", "i0", "u0"))
        assert again.update_result == handles[0].update_result  # the same id: applied once
        await handles[0].signal("checkout")
        assert sorted(await handles[0].result()) == sorted(f"i{n}" for n in range(10))
        # Its run closed: the next update with its start makes a new run.
        fresh = await engine.start(ds_cart, None, id="cart-1", update=("add", "tea"))
        assert fresh.run_id != handles[0].run_id and fresh.update_result == 1
        assert len(await engine.list()) == 2


def _at(instant: float) -> datetime:
    return datetime.fromtimestamp(instant, UTC)


# -- found in review ---------------------------------------------------------------------


@pytest.mark.parametrize("delay", [timedelta.max, float("inf"), float("nan")])
async def test_a_delay_past_any_instant_is_refused_and_records_nothing(
    make_engine: Any, delay: Any
) -> None:
    async with make_engine() as engine:
        with pytest.raises(Rejected):
            await engine.start(ds_job, "never", id="far", start_delay=delay)
        assert await engine.list() == []


async def test_a_run_not_begun_does_not_reset(make_engine: Any, clock: FakeClock) -> None:
    async with make_engine() as engine:
        handle = await engine.start(ds_job, "late", id="d-5", start_delay=60)
        with pytest.raises(Rejected, match="has not begun"):
            await handle.reset(1)
        clock.advance(60)
        assert await handle.result() == "late"
    assert RAN == ["late"]


async def test_a_begun_run_is_not_scheduled_again_by_a_clock_behind(
    make_engine: Any, clock: FakeClock
) -> None:
    async with make_engine() as engine:
        await engine.start(ds_cart, None, id="d-6", start_delay=10)
        clock.advance(10)
        await engine.wait_until(lambda: engine.runs.latest("d-6").status == Status.PARKED)
    behind = FakeClock(clock.now() - 5)  # the next driver's clock (a takeover, an NTP step)
    async with make_engine(clock=behind) as engine:
        await engine.wait_until(lambda: engine.runs.latest("d-6").status == Status.PARKED)
        assert await engine.handle("d-6").update("add", "tea") == 1
        await engine.signal("d-6", "checkout")
        assert await engine.handle("d-6").result() == ["tea"]


async def test_an_engine_that_runs_no_code_refuses_an_update_with_its_start_first(
    make_engine: Any,
) -> None:
    async with make_engine(drive=False) as engine:
        with pytest.raises(Rejected, match="needs the process that runs the code"):
            await engine.start(ds_cart, None, id="cart-9", update=("add", "tea"))
        assert await engine.list() == []


async def test_an_update_with_its_start_sent_again_after_its_run_closed_is_not_applied_again(
    make_engine: Any,
) -> None:
    """Found in review: the dedupe by update id is per run, and a closed run let a retry
    start a new run that applied it again."""
    async with make_engine() as engine:
        first = await engine.start(ds_cart, None, id="cart-2", update=("add", "tea", "u-1"))
        await first.signal("checkout")
        assert await first.result() == ["tea"]
        again = await engine.start(ds_cart, None, id="cart-2", update=("add", "tea", "u-1"))
        assert (again.run_id, again.update_result) == (first.run_id, 1)
        assert len(await engine.list()) == 1
