"""Durable streams: `ctx.stream(name)` writes, `handle.stream(name)` follows.

Readers must see only durable items, in order, each once, and end when the
stream or its run closes. Nothing here waits on wall-clock time: tests wait
on results, on engine progress (`wait_until`), or on events the workflow
code sets itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from fusee_runtime import (
    Cancelled,
    CodecError,
    Ctx,
    NotFound,
    Rejected,
    StreamWriter,
    step,
    workflow,
)
from fusee_runtime.model.records import CancelRequested
from fusee_runtime.model.run import Status


async def collect(engine: Any, id: str, name: str) -> list[Any]:
    return await drain(engine.handle(id).stream(name))


async def drain(items: AsyncIterator[Any]) -> list[Any]:
    return [item async for item in items]


def follow(engine: Any, id: str, name: str) -> asyncio.Future[list[Any]]:
    """A reader in the background, on the run that is the newest of `id` now."""
    return asyncio.ensure_future(drain(engine.handle(id).stream(name)))


async def until_parked(engine: Any, id: str) -> None:
    await engine.wait_until(lambda: id in engine.runs.newest and engine.runs.latest(id).live.parked)


# -- writing and reading ---------------------------------------------------------------


@step
async def streams_double(x: int) -> int:
    return x * 2


@workflow(name="streams.basic")
async def basic(ctx: Ctx, n: int) -> int:
    out = ctx.stream("out")
    assert isinstance(out, StreamWriter)
    for i in range(n):
        out.append({"i": i, "double": await streams_double(i)})
    out.close()
    return n


async def test_a_reader_gets_every_item_in_order_and_ends_at_the_close(
    make_engine, records
) -> None:
    async with make_engine() as engine:
        h = await engine.start(basic, 4, id="basic")
        assert await h.result() == 4
        want = [{"i": i, "double": 2 * i} for i in range(4)]
        assert await collect(engine, "basic", "out") == want
        appended = await records(engine, "basic", "StreamAppended")
        assert [(r["name"], r["item"]) for r in appended] == [("out", w) for w in want]
        assert len(await records(engine, "basic", "StreamClosed")) == 1
    # After reopening, the stream is rebuilt from the journal.
    async with make_engine() as engine:
        assert await collect(engine, "basic", "out") == want


async def test_a_reader_that_starts_first_follows_the_stream_live(make_engine) -> None:
    go = asyncio.Event()
    appended = asyncio.Event()

    @step
    async def streams_gate() -> None:
        await go.wait()

    @workflow(name="streams.live")
    async def live(ctx: Ctx, _: None) -> str:
        out = ctx.stream("out")
        out.append("first")
        appended.set()
        await streams_gate()
        out.append("second")
        out.close()
        return "done"

    async with make_engine() as engine:
        h = await engine.start(live, None, id="live")
        items = h.stream("out")
        assert await anext(items) == "first"
        await appended.wait()
        go.set()
        assert await anext(items) == "second"
        with pytest.raises(StopAsyncIteration):
            await anext(items)
        assert await h.result() == "done"


async def test_a_reader_never_sees_an_item_before_it_is_durable(
    make_engine, holding_storage
) -> None:
    storage = holding_storage
    appended = asyncio.Event()

    @step
    async def streams_arm() -> None:
        storage.armed.set()  # from here on the disk holds every write

    @workflow(name="streams.durable")
    async def durable(ctx: Ctx, _: None) -> str:
        out = ctx.stream("out")
        out.append(1)
        await streams_arm()  # runs once item 1 is durable
        out.append(2)
        appended.set()
        return "done"

    async with make_engine(storage=storage) as engine:
        h = await engine.start(durable, None, id="durable")
        await appended.wait()
        run = engine.runs.latest("durable")
        assert [item for _, item in run.streams["out"].items] == [1, 2]
        await asyncio.to_thread(storage.holding.wait)
        items = h.stream("out")
        assert await anext(items) == 1
        second = asyncio.ensure_future(anext(items))
        for _ in range(50):
            await asyncio.sleep(0)  # let the loop run: nothing may reach the reader
        assert not second.done()
        assert engine.durability.durable_lsn < run.streams["out"].items[1][0]
        storage.release.set()
        assert await second == 2
        # The run's close (durable with item 2's batch or after it) ends the stream.
        with pytest.raises(StopAsyncIteration):
            await anext(items)
        assert await h.result() == "done"


async def test_a_stream_never_written_waits_and_ends_with_the_run(make_engine) -> None:
    @workflow(name="streams.silent")
    async def silent(ctx: Ctx, _: None) -> str:
        ctx.stream("unused")
        return await ctx.wait_for("stop")

    async with make_engine() as engine:
        h = await engine.start(silent, None, id="silent")
        reader = follow(engine, "silent", "nothing")
        await until_parked(engine, "silent")
        assert not reader.done()
        await h.signal("stop", "stopped")
        assert await reader == []
        assert await h.result() == "stopped"


async def test_a_run_that_closes_without_closing_its_stream_ends_it(make_engine) -> None:
    @workflow(name="streams.unclosed")
    async def unclosed(ctx: Ctx, _: None) -> None:
        out = ctx.stream("out")
        out.append("a")
        out.append("b")
        await ctx.wait_for("never")

    async with make_engine() as engine:
        h = await engine.start(unclosed, None, id="unclosed")
        reader = follow(engine, "unclosed", "out")
        await until_parked(engine, "unclosed")
        await h.terminate("enough")
        assert await reader == ["a", "b"]


async def test_an_unknown_id_raises_not_found_before_iterating(make_engine) -> None:
    async with make_engine() as engine:
        with pytest.raises(NotFound, match="nope"):
            engine.handle("nope").stream("out")


async def test_closing_the_engine_ends_a_waiting_reader_with_rejected(make_engine) -> None:
    @workflow(name="streams.forever")
    async def forever(ctx: Ctx, _: None) -> None:
        ctx.stream("out").append("only")
        await ctx.wait_for("never")

    engine = make_engine()
    await engine.open()
    try:
        h = await engine.start(forever, None, id="forever")
        items = h.stream("out")
        assert await anext(items) == "only"
        waiting = asyncio.ensure_future(anext(items))
        await until_parked(engine, "forever")
    finally:
        await engine.close()
    with pytest.raises(Rejected, match="engine closed while following stream 'out'"):
        await waiting


# -- replay ----------------------------------------------------------------------------


@workflow(name="streams.parks")
async def parks(ctx: Ctx, _: None) -> list[Any]:
    out = ctx.stream("out")
    out.append(1)
    out.append(2)
    more = await ctx.wait_for("more")  # parked: replay runs the appends again
    out.append(more)
    out.close()
    return [ctx.journal_size]


async def test_replay_does_not_append_again(make_engine, records) -> None:
    async with make_engine() as engine:
        await engine.start(parks, None, id="parks")
        await until_parked(engine, "parks")
    async with make_engine() as engine:  # the reopen replays the run
        h = engine.handle("parks")
        await until_parked(engine, "parks")
        await h.signal("more", 3)  # wakes the parked run: replayed again
        assert await h.result() == [5]
        assert await collect(engine, "parks", "out") == [1, 2, 3]
        assert [r["item"] for r in await records(engine, "parks", "StreamAppended")] == [1, 2, 3]
        assert [r["seq"] for r in await records(engine, "parks", "StreamClosed")] == ["5"]


STREAMS_VARIANT = {"first": "append"}


@workflow(name="streams.variant")
async def variant(ctx: Ctx, _: None) -> None:
    if STREAMS_VARIANT["first"] == "append":
        ctx.stream("out").append("x")
    else:
        await ctx.step("out", lambda: "x")
    await ctx.wait_for("never")


async def test_replay_that_asks_for_another_operation_than_an_append_is_stuck(
    make_engine,
) -> None:
    STREAMS_VARIANT["first"] = "append"
    async with make_engine() as engine:
        await engine.start(variant, None, id="variant")
        await until_parked(engine, "variant")
    STREAMS_VARIANT["first"] = "step"
    try:
        async with make_engine() as engine:
            await engine.wait_until(lambda: engine.runs.latest("variant").status == Status.STUCK)
            info = await engine.handle("variant").describe()
            assert info.error is not None
            assert "the journal holds stream.append 'out'" in info.error
            assert "the code asks for step 'out'" in info.error
    finally:
        STREAMS_VARIANT["first"] = "append"


async def test_a_cancel_that_lands_on_an_append_lands_there_on_replay_too(
    make_engine, records
) -> None:
    @workflow(name="streams.cancel")
    async def cancel(ctx: Ctx, _: None) -> str:
        out = ctx.stream("out")
        await ctx.wait_for("go")
        try:
            out.append("after go")
        except Cancelled:
            out.append("cancelled")  # the cancel is delivered: this one records
            await ctx.wait_for("bye")  # parks; the wake replays the same path
        out.close()
        return "done"

    # The journal as a crash leaves it between a signal that woke the run and the
    # run's next operation, with a cancel acknowledged meanwhile.
    async with make_engine() as engine:
        await engine.start(cancel, None, id="cancel")
        await until_parked(engine, "cancel")
    async with make_engine(drive=False) as engine:
        await engine.signal("cancel", "go", None)
        run = engine.runs.latest("cancel")
        engine.driver.append(run, CancelRequested(run.run_id, "operator", 0.0))
        await engine.durability.wait(run.last_lsn)
    async with make_engine() as engine:
        h = engine.handle("cancel")
        await until_parked(engine, "cancel")
        await h.signal("bye")
        assert await h.result() == "done"
        assert await collect(engine, "cancel", "out") == ["cancelled"]
        cancelled = await records(engine, "cancel", "OpCancelled")
        assert [(r["kind"], r["name"]) for r in cancelled] == [("stream.append", "out")]


# -- refusals ----------------------------------------------------------------------------


async def test_bad_items_late_appends_and_step_code_are_refused(make_engine, records) -> None:
    @step
    async def streams_in_step() -> str:
        out = streams_writer[0]
        try:
            out.append("from a step")
        except Rejected as e:
            return str(e)
        return "appended"

    streams_writer: list[Any] = []

    @workflow(name="streams.refusals")
    async def refusals(ctx: Ctx, _: None) -> dict[str, str]:
        out = ctx.stream("out")
        streams_writer.append(out)
        seen: dict[str, str] = {}
        try:
            out.append({1, 2})
        except CodecError as e:
            seen["codec"] = str(e)
        try:
            out.append("x" * 2000)
        except CodecError as e:
            seen["size"] = str(e)
        seen["step"] = await streams_in_step()
        out.append("kept")
        out.close()
        out.close()  # a second close does nothing
        try:
            ctx.stream("out").append("late")
        except Rejected as e:
            seen["closed"] = str(e)
        return seen

    async with make_engine(payload_bytes_max=1024) as engine:
        h = await engine.start(refusals, None, id="refusals")
        seen = await h.result()
        assert "an item of stream 'out' cannot be encoded as JSON" in seen["codec"]
        assert "an item of stream 'out' is 2002 bytes, over the limit of 1024" in seen["size"]
        assert "Config.payload_bytes_max" in seen["size"]
        assert "this writer is workflow code's; in a step function use" in seen["step"]
        assert seen["closed"] == "stream 'out' is closed: it takes no more items"
        assert await collect(engine, "refusals", "out") == ["kept"]
        # Refused calls take no operation number: the step is #1, "kept" #2.
        appended = await records(engine, "refusals", "StreamAppended")
        assert [(r["seq"], r["item"]) for r in appended] == [("2", "kept")]
        assert len(await records(engine, "refusals", "StreamClosed")) == 1


async def test_a_stream_name_must_be_a_short_string(make_engine) -> None:
    @workflow(name="streams.names")
    async def names(ctx: Ctx, _: None) -> list[str]:
        errors = []
        for bad in ("", "n" * 201, 7):
            try:
                ctx.stream(bad)
            except Rejected as e:
                errors.append(str(e))
        return errors

    async with make_engine() as engine:
        h = await engine.start(names, None, id="names")
        assert await h.result() == ["a stream name is a string of 1 to 200 characters"] * 3
        with pytest.raises(Rejected, match="a stream name"):
            h.stream("")


# -- runs that follow runs -----------------------------------------------------------------


async def test_a_stream_belongs_to_its_run_across_continue_as_new(make_engine) -> None:
    @workflow(name="streams.generations")
    async def generations(ctx: Ctx, n: int) -> int:
        ctx.stream("out").append(f"gen {n}")
        if n < 2:
            await ctx.wait_for(f"next {n}")
            await ctx.continue_as_new(n + 1)
        ctx.stream("out").close()
        return n

    async with make_engine() as engine:
        h = await engine.start(generations, 0, id="gens")
        first = follow(engine, "gens", "out")
        await until_parked(engine, "gens")
        await h.signal("next 0")
        assert await first == ["gen 0"]  # ends when its run continues as new
        await engine.wait_until(lambda: engine.runs.latest("gens").live.parked)
        second = follow(engine, "gens", "out")
        await h.signal("next 1")
        assert await h.result() == 2
        assert await second == ["gen 1"]
        assert await collect(engine, "gens", "out") == ["gen 2"]


async def test_a_reset_run_keeps_the_items_of_the_operations_it_keeps(make_engine, records) -> None:
    @step
    async def streams_middle() -> str:
        return "middle"

    @workflow(name="streams.reset")
    async def reset(ctx: Ctx, _: None) -> str:
        out = ctx.stream("out")
        out.append("before")
        out.append(await streams_middle())
        await ctx.wait_for("finish")
        out.close()
        return "done"

    async with make_engine() as engine:
        h = await engine.start(reset, None, id="reset")
        await until_parked(engine, "reset")
        old = follow(engine, "reset", "out")
        h = await h.reset("streams_middle")
        assert await old == ["before", "middle"]  # ends with the reset run
        await until_parked(engine, "reset")
        await h.signal("finish")
        assert await h.result() == "done"
        assert await collect(engine, "reset", "out") == ["before", "middle"]
        new_run = engine.runs.latest("reset").run_id
        appended = await records(engine, "reset", "StreamAppended")
        assert [r["item"] for r in appended if r["run_id"] == new_run] == ["middle"]
    async with make_engine() as engine:
        assert await collect(engine, "reset", "out") == ["before", "middle"]


# -- the example -------------------------------------------------------------------------------


async def test_the_digest_example_streams_its_entries(make_engine, monkeypatch) -> None:
    # The examples are not installed: they import from the checkout, as `fusee` finds them.
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2]))
    from workflows.digest import digest

    async with make_engine() as engine:
        h = await engine.start(digest, None, id="digest")
        entries = await collect(engine, "digest", "entries")
        summary = await h.result()
        assert summary["entries"] == len(entries) == 5
        assert summary["by_feed"] == {"engineering": 2, "product": 2, "support": 1}
        assert not any(e["title"].startswith("(bot)") for e in entries)
