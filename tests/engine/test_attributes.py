"""`ctx.set_attributes` (issue 19, search attributes, first step): recorded once,
merged, shown in `RunInfo.attributes` open and closed (from the history store too),
kept by a reset run for the operations it keeps; bad values are clear errors that
record nothing. Listing runs by them (`list(where=)`) is the next step."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from fusee_runtime import Ctx, Rejected, workflow
from fusee_runtime.journal.records import R


@workflow(name="attributes.order")
async def order(ctx: Ctx, customer: str) -> str:
    ctx.set_attributes({"customer": customer, "amount": 120, "express": True})  # 1
    await ctx.wait_for("paid")  # 2
    ctx.set_attributes(  # 3
        {"amount": 99.5, "express": None, "paid_at": datetime(2026, 12, 4, 9, tzinfo=UTC)}
    )
    await ctx.wait_for("shipped")  # 4
    return "done"


async def test_attributes_are_recorded_once_merged_and_shown(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("attributes.order", "c-7", id="o-1")
        await engine.wait_until(lambda: engine.runs.latest("o-1").live.parked)
        info = await h.describe()
        assert info.attributes == {"customer": "c-7", "amount": 120, "express": True}
        await h.signal("paid")
        await engine.wait_until(lambda: "4" in engine.runs.latest("o-1").ops)
        want = {"customer": "c-7", "amount": 99.5, "paid_at": "2026-12-04T09:00:00+00:00"}
        assert (await h.describe()).attributes == want
    async with make_engine() as engine:  # rebuilt from the journal, and replayed
        h = engine.handle("o-1")
        await engine.wait_until(lambda: engine.runs.latest("o-1").live.parked)
        assert (await h.describe()).attributes == want
        await h.signal("shipped")
        assert await h.result(timeout=10) == "done"
        recs = [r for r in await h.history() if r["type"] == "AttributesSet"]
        assert [r["seq"] for r in recs] == ["1", "3"]  # the replays recorded nothing more
        await engine.checkpoints.flush_history()
        run_id = engine.runs.latest("o-1").run_id
        engine.runs.evict([run_id])
        assert run_id not in engine.runs.by_run_id
        (listed,) = [i for i in await engine.list() if i.id == "o-1"]
        assert listed.attributes == want  # read back from the history store


async def test_a_reset_run_keeps_the_attributes_of_the_operations_it_keeps(
    make_engine: Any,
) -> None:
    async with make_engine() as engine:
        h = await engine.start("attributes.order", "c-8", id="o-2")
        await h.signal("paid")
        await engine.wait_until(lambda: "4" in engine.runs.latest("o-2").ops)
        # Kept: operations 1 and 2; the second set (3) runs again. Its attributes
        # come on top of those the kept operation 1 set (the customer).
        new = await engine.reset("o-2", 3)
        await engine.wait_until(lambda: engine.runs.latest("o-2").live.parked)
        assert (await new.describe()).attributes == {
            "customer": "c-8",
            "amount": 99.5,
            "paid_at": "2026-12-04T09:00:00+00:00",
        }
    async with make_engine() as engine:  # a reset run rebuilt from a checkpoint
        assert (await engine.handle("o-2").describe()).attributes["amount"] == 99.5


@workflow(name="attributes.bad")
async def bad(ctx: Ctx, how: str) -> str:
    values: dict[str, Any] = {
        "type": {"tags": ["a"]},
        "naive": {"at": datetime(2026, 1, 1)},
        "nan": {"score": float("nan")},
        "huge": {"n": 2**64},
        "name": {"": 1},
        "long": {"note": "x" * 1001},
        "nul": {"note": "a\x00b"},  # SQLite's JSON functions would cut it at the NUL
    }
    try:
        ctx.set_attributes(values[how] if how != "mapping" else ["not", "a", "mapping"])
    except Rejected as e:
        return str(e)
    return "accepted"


@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("type", "search attribute 'tags' is a str, int, float, bool, aware datetime or None"),
        ("naive", "search attribute 'at': the datetime must be timezone-aware"),
        ("nan", "search attribute 'score' is nan: a number must be finite"),
        ("huge", "search attribute 'n' is an integer out of the 64-bit range"),
        ("name", "a search attribute's name is a string of 1 to 200 characters"),
        ("long", "search attribute 'note' is a string of 1001 characters, over 1000"),
        ("nul", "search attribute 'note' holds a NUL character"),
        ("mapping", "ctx.set_attributes takes a mapping of names to values, not list"),
    ],
)
async def test_bad_attributes_are_clear_errors_that_record_nothing(
    make_engine: Any, how: str, said: str
) -> None:
    async with make_engine() as engine:
        h = await engine.start("attributes.bad", how, id=f"b-{how}")
        assert (await h.result(timeout=10)).startswith(said)
        assert R.AttributesSet.name not in {r["type"] for r in await h.history()}


def test_an_aware_datetime_is_kept_in_utc() -> None:
    from fusee_runtime.attributes import checked

    east = timezone(timedelta(hours=2))
    assert checked({"at": datetime(2026, 12, 4, 11, tzinfo=east)}) == {
        "at": "2026-12-04T09:00:00+00:00"
    }


@workflow(name="attributes.rounds")
async def rounds(ctx: Ctx, n: int) -> int:
    if n == 0:
        ctx.set_attributes({"customer": "c-9", "round": 0})
    elif n == 2:
        ctx.set_attributes({"round": 2})
    if n < 2:
        await ctx.continue_as_new(n + 1)
    await ctx.wait_for("stop")
    return n


async def test_a_run_that_continues_as_new_keeps_its_attributes(make_engine: Any) -> None:
    async with make_engine() as engine:
        await engine.start("attributes.rounds", 0, id="r-1")
        await engine.wait_until(lambda: engine.runs.latest("r-1").live.parked)
        want = {"customer": "c-9", "round": 2}
        assert (await engine.handle("r-1").describe()).attributes == want
        assert [i.run_id for i in await engine.list(where={"customer": "c-9"})] == [
            i.run_id for i in await engine.list(workflow="attributes.rounds")
        ]
    async with make_engine() as engine:  # the continued runs rebuilt from the journal
        assert (await engine.handle("r-1").describe()).attributes == want
        await engine.signal("r-1", "stop")
        assert await engine.handle("r-1").result(timeout=10) == 2
        listed = await engine.list(where={"customer": "c-9"}, status="completed")
        assert [i.attributes for i in listed] == [want]


async def test_a_reset_of_a_continued_run_keeps_what_it_carried(make_engine: Any) -> None:
    async with make_engine() as engine:
        await engine.start("attributes.rounds", 0, id="r-2")
        await engine.wait_until(lambda: engine.runs.latest("r-2").live.parked)
        want = {"customer": "c-9", "round": 2}
        # The third run set round at #1 and waits at #2: reset to #2 keeps both.
        await engine.reset("r-2", 2)
        await engine.wait_until(lambda: engine.runs.latest("r-2").live.parked)
        assert (await engine.handle("r-2").describe()).attributes == want
        # To #1: the round it set is gone, what the run was carried over stays.
        await engine.reset("r-2", 1)
        await engine.wait_until(lambda: engine.runs.latest("r-2").live.parked)
        assert (await engine.handle("r-2").describe()).attributes == want
    async with make_engine() as engine:  # rebuilt from its creation
        assert (await engine.handle("r-2").describe()).attributes == want
