"""Step streams (issue 20, item 3): a step function appends to its run's streams with
`current_ctx().stream(name)`, from the loop or a thread; an attempt that runs again
(a retry, after a crash) goes on after what earlier attempts recorded; with
`scope="step"` the stream is the step's own, which its end closes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from fusee_runtime import (
    CodecError,
    Ctx,
    Rejected,
    RetryPolicy,
    StepFailed,
    current_ctx,
    step,
    workflow,
)
from fusee_runtime.journal.records import R

SEEN: list[Any] = []
GO = {"event": asyncio.Event()}


@pytest.fixture(autouse=True)
def fresh() -> None:
    SEEN.clear()
    GO["event"] = asyncio.Event()


async def collect(engine: Any, id: str, name: str) -> list[Any]:
    return [item async for item in engine.handle(id).stream(name)]


# -- a step's own stream ------------------------------------------------------------------


@step(name="ss.tokens")
async def tokens(words: list[str]) -> int:
    out = current_ctx().stream("tokens", scope="step")
    for word in words:
        out.append(word)
    return len(words)


@workflow(name="ss.answer")
async def answer(ctx: Ctx, words: list[str]) -> int:
    return await tokens(words)


async def test_a_steps_own_stream_ends_when_the_step_ends(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("ss.answer", ["durable", "by", "default"], id="a-1")
        assert await collect(engine, "a-1", "tokens") == ["durable", "by", "default"]
        assert await h.result(timeout=10) == 3
        run = engine.runs.latest("a-1")
        assert run.streams["tokens"].closed_lsn is not None
        recs = [rec for _, rec in run.records if rec.code == R.StepStreamAppended]
        assert [(r.seq, r.step, r.name, r.attempt, r.own) for r in recs] == [
            ("1", "ss.tokens", "tokens", 1, True)
        ] * 3
    async with make_engine() as engine:  # replayed from the journal: once, still closed
        assert await collect(engine, "a-1", "tokens") == ["durable", "by", "default"]


# -- from a thread, into the run's stream ----------------------------------------------------


@step(name="ss.rows")
def rows(n: int) -> int:
    out = current_ctx().stream("log")
    for i in range(n):
        out.append({"row": i})
    return n


@workflow(name="ss.copy")
async def copy(ctx: Ctx, n: int) -> str:
    log = ctx.stream("log")
    log.append("start")
    await rows(n)
    log.append("end")
    log.close()
    return "copied"


async def test_a_step_in_a_thread_appends_to_its_runs_stream_in_order(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("ss.copy", 50, id="c-1")
        assert await h.result(timeout=10) == "copied"
        got = await collect(engine, "c-1", "log")
    assert got == ["start", *({"row": i} for i in range(50)), "end"]


# -- a retried attempt goes on -------------------------------------------------------------


@step(name="ss.flaky", retry=RetryPolicy(attempts=3, initial=1, jitter=False))
async def flaky(n: int) -> int:
    out = current_ctx().stream("out", scope="step")
    SEEN.append(list(out.recorded))
    for i in range(len(out.recorded), n):
        out.append(i)
        if i == 2 and len(SEEN) == 1:
            raise ConnectionError("dropped mid-stream")
    return n


@workflow(name="ss.flaky")
async def flaky_run(ctx: Ctx, n: int) -> int:
    return await flaky(n)


async def test_a_retried_attempt_goes_on_after_what_the_failed_one_appended(
    make_engine: Any, run_clock: Any
) -> None:
    async with make_engine() as engine:
        h = await engine.start("ss.flaky", 5, id="f-1")
        assert await run_clock(h.result(timeout=10)) == 5
        assert await collect(engine, "f-1", "out") == [0, 1, 2, 3, 4]
        recs = engine.runs.latest("f-1").records
        attempts = [rec.attempt for _, rec in recs if rec.code == R.StepStreamAppended]
    assert SEEN == [[], [0, 1, 2]]
    assert attempts == [1, 1, 1, 2, 2]


@step(name="ss.long")
async def long_answer(n: int) -> int:
    out = current_ctx().stream("out", scope="step")
    SEEN.append(list(out.recorded))
    for i in range(len(out.recorded), n):
        out.append(i)
        if i == 3 and len(SEEN) == 1:
            await GO["event"].wait()  # the engine crashes here
    return n


@workflow(name="ss.long")
async def long_run(ctx: Ctx, n: int) -> int:
    return await long_answer(n)


async def test_the_attempt_after_a_crash_goes_on_after_the_durable_items(make_engine: Any) -> None:
    engine = make_engine()
    await engine.open()
    await engine.start("ss.long", 6, id="l-1")
    run = engine.runs.latest("l-1")
    await engine.wait_until(
        lambda: (
            "out" in run.streams
            and len(run.streams["out"].items) == 4
            and engine.durability.durable_lsn >= run.streams["out"].items[-1][0]
        )
    )
    await engine.close(crash=True)
    async with make_engine() as engine:
        assert await engine.handle("l-1").result(timeout=10) == 6
        assert await collect(engine, "l-1", "out") == [0, 1, 2, 3, 4, 5]
    assert SEEN == [[], [0, 1, 2, 3]]


# -- what is refused -------------------------------------------------------------------------


@step(name="ss.refusals")
async def refusals() -> dict[str, str]:
    seen: dict[str, str] = {}
    for key, call in [
        ("scope", lambda: current_ctx().stream("x", scope="branch")),
        ("codec", lambda: current_ctx().stream("x").append({1, 2})),
        ("closed", lambda: current_ctx().stream("done").append("late")),
    ]:
        try:
            call()
        except (Rejected, CodecError) as e:
            seen[key] = str(e)
    return seen


@workflow(name="ss.refused")
async def refused(ctx: Ctx, _: None) -> dict[str, str]:
    done = ctx.stream("done")
    done.append("only")
    done.close()
    seen = await refusals()
    try:
        ctx.stream("y", scope="step")
    except Rejected as e:
        seen["workflow"] = str(e)
    return seen


async def test_refused_appends_say_why_and_record_nothing(make_engine: Any) -> None:
    async with make_engine() as engine:
        seen = await (await engine.start("ss.refused", None, id="r-1")).result(timeout=10)
        run = engine.runs.latest("r-1")
        assert not [rec for _, rec in run.records if rec.code == R.StepStreamAppended]
    assert seen == {
        "scope": "stream 'x': scope is 'run' or 'step', not 'branch'",
        "codec": seen["codec"],
        "closed": "stream 'done' is closed: it takes no more items",
        "workflow": "stream 'y': scope='step' is for step functions",
    }
    assert seen["codec"].startswith("an item of stream 'x' cannot be encoded as JSON")


@step(name="ss.fails", retry=RetryPolicy(attempts=1))
async def fails() -> None:
    current_ctx().stream("partial", scope="step").append("half")
    raise ValueError("gave up")


@workflow(name="ss.fails")
async def fails_run(ctx: Ctx, _: None) -> str:
    try:
        await fails()
    except StepFailed:
        await ctx.wait_for("go")  # the run stays open: only the step's end closes the stream
        return "failed"
    return "ok"


async def test_a_step_that_fails_for_good_closes_its_own_stream(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("ss.fails", None, id="x-1")
        assert await collect(engine, "x-1", "partial") == ["half"]
        await h.signal("go")
        assert await h.result(timeout=10) == "failed"
