"""An update sent again with its id gets the first answer, whatever it was, and its
handler does not run again; the checks before a new update say what they refuse.

These pin `Handlers.update` as split into helpers (issue 37, C901): the same
records, the same answers and the same messages as before."""

from __future__ import annotations

from typing import Any

import pytest

from fusee_runtime import Ctx, Rejected, workflow


@workflow(name="updates.again")
async def again(ctx: Ctx, _: None) -> int:
    calls: list[Any] = []

    def add(item: Any) -> Any:
        calls.append(item)
        if item == "boom":
            raise RuntimeError("the handler broke")
        if item == "coroutine":
            return _later()
        if item == "big":
            return "x" * 3000
        return len(calls)

    ctx.on_update("add", add)
    ctx.on_query("calls", lambda _: list(calls))
    await ctx.wait_for("done")
    return len(calls)


async def _later() -> None:
    return None


async def parked(engine: Any, id: str) -> None:
    await engine.wait_until(lambda: engine.runs.latest(id).live.parked)


async def updates_of(engine: Any, id: str) -> list[dict[str, Any]]:
    return [r for r in await engine.history(id) if r["type"] == "UpdateApplied"]


async def test_a_failed_update_sent_again_fails_the_same_and_runs_no_handler(
    make_engine: Any,
) -> None:
    async with make_engine() as engine:
        h = await engine.start("updates.again", None, id="ua-1")
        await parked(engine, "ua-1")
        message = r"^update 'add' of run 'ua-1' failed: .*the handler broke"
        with pytest.raises(Rejected, match=message):
            await h.update("add", "boom", update_id="once")
        with pytest.raises(Rejected, match=message):
            await h.update("add", "boom", update_id="once")
        assert await h.query("calls") == ["boom"]
    async with make_engine() as engine:  # and after a replay, from the record
        h = engine.handle("ua-1")
        await parked(engine, "ua-1")
        with pytest.raises(Rejected, match=message):
            await h.update("add", "other", update_id="once")
        assert await h.query("calls") == ["boom"]
        assert [r["update_id"] for r in await updates_of(engine, "ua-1")] == ["once"]


async def test_an_update_sent_again_after_the_run_closed_gets_its_answer(
    make_engine: Any,
) -> None:
    async with make_engine() as engine:
        h = await engine.start("updates.again", None, id="ua-2")
        await parked(engine, "ua-2")
        assert await h.update("add", "tea", update_id="tea") == 1
        await h.signal("done")
        assert await h.result() == 1
        assert await h.update("add", "tea", update_id="tea") == 1
        with pytest.raises(Rejected, match=r"^run 'ua-2' is completed: it takes no more updates"):
            await h.update("add", "tea", update_id="other")


@pytest.mark.parametrize("update_id", ["", "x" * 1000, 7])
async def test_an_update_id_that_is_no_name_is_refused(make_engine: Any, update_id: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("updates.again", None, id="ua-3")
        await parked(engine, "ua-3")
        with pytest.raises(Rejected, match=r"^an update id is a string of 1 to \d+ characters$"):
            await h.update("add", "tea", update_id=update_id)
        assert await updates_of(engine, "ua-3") == []


async def test_a_plain_handler_that_returns_a_coroutine_records_nothing(
    make_engine: Any,
) -> None:
    async with make_engine() as engine:
        h = await engine.start("updates.again", None, id="ua-4")
        await parked(engine, "ua-4")
        with pytest.raises(
            Rejected, match=r"^update handler 'add' must be a plain function, not async$"
        ):
            await h.update("add", "coroutine")
        assert await updates_of(engine, "ua-4") == []
        assert await h.update("add", "tea") == 2  # the handler's state stays as it left it


async def test_a_result_over_the_limit_with_its_argument_is_a_recorded_failure(
    make_engine: Any,
) -> None:
    async with make_engine(payload_bytes_max=3005) as engine:
        h = await engine.start("updates.again", None, id="ua-5")
        await parked(engine, "ua-5")
        with pytest.raises(Rejected, match=r"its argument and result are 5 \+ 3002 bytes"):
            await h.update("add", "big", update_id="big")
        (recorded,) = await updates_of(engine, "ua-5")
        assert recorded["result"] is None
        assert "Config.payload_bytes_max" in recorded["failure"]["message"]
        with pytest.raises(Rejected, match=r"its argument and result are 5 \+ 3002 bytes"):
            await h.update("add", "big", update_id="big")
