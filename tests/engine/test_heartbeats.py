"""Heartbeats and progress (issue 20, item 1): `current_ctx().heartbeat(details)` from a
step function, async or in a thread, coalesced into few records and never waiting for
the disk; `progress()` for the next attempt; `heartbeat_timeout=` failing a silent
attempt (`TimedOut`) that its policy retries; a one-line error outside a step; the
last heartbeat in `describe` and `history`. A step killed mid-way resuming from its
last durable progress is in tests/crash/test_heartbeat_crash.py."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from fusee_runtime import Ctx, Rejected, RetryPolicy, StepFailed, current_ctx, step, workflow
from fusee_runtime.engine import beats as beats_module
from fusee_runtime.journal.records import R

GO = {"event": asyncio.Event(), "thread": threading.Event()}
SEEN: list[Any] = []


@pytest.fixture(autouse=True)
def fresh() -> None:
    GO["event"] = asyncio.Event()
    GO["thread"] = threading.Event()
    SEEN.clear()


def beats(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["type"] == R.StepHeartbeat.name]


@step(name="beats.copy")
async def copy_rows(rows: int) -> int:
    for row in range(rows):
        current_ctx().heartbeat({"row": row})
    await GO["event"].wait()
    return rows


@workflow(name="beats.copies")
async def copies(ctx: Ctx, rows: int) -> int:
    return await copy_rows(rows)


async def test_a_thousand_heartbeats_become_one_record_with_the_latest(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("beats.copies", 1000, id="c-1")
        await engine.wait_until(lambda: engine.runs.latest("c-1").ops.get("1") is not None)
        op = engine.runs.latest("c-1").ops["1"]
        await engine.wait_until(lambda: op.progress == {"row": 999})
        (recorded,) = beats(await h.history())
        assert (recorded["seq"], recorded["name"], recorded["attempt"]) == ("1", "beats.copy", 1)
        info = await h.describe()
        assert [(w.kind, w.name) for w in info.waiting] == [("step", "beats.copy")]
        assert info.waiting[0].detail is not None
        assert info.waiting[0].detail.endswith('UTC: {"row":999}')
        GO["event"].set()
        assert await h.result(timeout=10) == 1000


@step(name="beats.flaky", retry=RetryPolicy(attempts=3, initial=1, jitter=False))
async def flaky_copy(rows: int) -> int:
    start = (current_ctx().progress() or {"row": -1})["row"] + 1
    SEEN.append(start)
    for row in range(start, rows):
        current_ctx().heartbeat({"row": row})
        if row == 4 and start == 0:
            raise ConnectionError("the source went away at row 4")
    return rows


@workflow(name="beats.flakes")
async def flakes(ctx: Ctx, rows: int) -> int:
    return await flaky_copy(rows)


async def test_the_next_attempt_gets_the_latest_progress(make_engine: Any, clock: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("beats.flakes", 10, id="f-1")
        await engine.wait_until(lambda: len(SEEN) == 1)
        await clock.wait_for_sleepers()
        clock.advance(1)  # the retry's backoff
        assert await h.result(timeout=10) == 10
        assert SEEN == [0, 5], "attempt 2 went on after the last row attempt 1 reported"


@step(name="beats.threaded")
def threaded_copy(rows: int) -> int:
    for row in range(rows):
        current_ctx().heartbeat({"row": row})
    GO["thread"].wait()
    return rows


@workflow(name="beats.threads")
async def threads(ctx: Ctx, rows: int) -> int:
    return await threaded_copy(rows)


async def test_a_step_in_a_thread_beats_too(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("beats.threads", 50, id="t-1")
        await engine.wait_until(lambda: engine.runs.latest("t-1").ops.get("1") is not None)
        op = engine.runs.latest("t-1").ops["1"]
        await engine.wait_until(lambda: op.progress == {"row": 49})
        GO["thread"].set()
        assert await h.result(timeout=10) == 50


@step(name="beats.stalls", heartbeat_timeout=30, retry=RetryPolicy(attempts=2, initial=1))
async def stalls(rows: int) -> int:
    attempt_started = (current_ctx().progress() or {"row": -1})["row"] + 1
    SEEN.append(attempt_started)
    for row in range(attempt_started, rows):
        current_ctx().heartbeat({"row": row})
        if row == 2 and attempt_started == 0:
            await asyncio.Event().wait()  # hangs: no heartbeat any more
    return rows


@workflow(name="beats.stalled")
async def stalled(ctx: Ctx, rows: int) -> Any:
    try:
        return await stalls(rows)
    except StepFailed as e:
        return str(e)


async def test_a_silent_attempt_times_out_and_is_retried(make_engine: Any, clock: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("beats.stalled", 5, id="s-1")
        await engine.wait_until(lambda: len(SEEN) == 1)
        await clock.wait_for_sleepers()  # the heartbeat watch, due 30 s after the last beat
        assert clock.next_deadline() == clock.now() + 30
        clock.advance(30)
        await engine.wait_until(lambda: engine.runs.latest("s-1").ops["1"].attempts_failed == 1)
        failure = engine.runs.latest("s-1").ops["1"].failure
        assert failure is not None
        assert failure["kind"] == "TimedOut"
        assert "sent no heartbeat for 30 s" in failure["message"]
        await clock.wait_for_sleepers()
        clock.advance(1)  # the backoff
        assert await h.result(timeout=10) == 5
        assert SEEN == [0, 3]


@workflow(name="beats.misplaced")
async def misplaced(ctx: Ctx, _: None) -> str:
    try:
        ctx.heartbeat({"row": 1})
    except Rejected as e:
        return str(e)
    return "accepted"


async def test_a_heartbeat_outside_a_step_is_refused(make_engine: Any) -> None:
    async with make_engine() as engine:
        said = await (await engine.start("beats.misplaced", None)).result(timeout=10)
    assert said == "ctx.heartbeat() is for step functions: workflow code has no step to report on"


def test_a_heartbeat_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="@step beats_bad: heartbeat_timeout= must be positive"):

        @step(heartbeat_timeout=0)
        async def beats_bad() -> None: ...


# -- what a review of item 1 found -------------------------------------------------------

HOLD = threading.Event()
HOGGING = threading.Event()


@step(name="beats.hogs")
def hogs_the_thread() -> str:
    HOGGING.set()
    HOLD.wait()
    return "hogged"


@step(name="beats.queued", heartbeat_timeout=30)
def queued() -> str:
    SEEN.append("queued ran")
    return "queued"


@workflow(name="beats.queue")
async def queue(ctx: Ctx, _: None) -> list[str]:
    return await ctx.all([hogs_the_thread(), queued()])


async def test_an_attempt_queued_for_a_thread_is_not_silent(make_engine: Any, clock: Any) -> None:
    HOLD.clear()
    HOGGING.clear()
    async with make_engine(step_threads=1) as engine:
        h = await engine.start("beats.queue", None, id="q-1")
        try:
            await asyncio.to_thread(HOGGING.wait)  # the only step thread is taken
            for _ in range(3):  # 90 s queued behind it: no heartbeat is due
                await clock.wait_for_sleepers()
                clock.advance(30)
            await clock.wait_for_sleepers()
            assert not engine.runs.latest("q-1").ops  # nothing failed, nothing ended yet
        finally:
            HOLD.set()
        assert await h.result(timeout=10) == ["hogged", "queued"]
        ops = engine.runs.latest("q-1").ops
        assert (ops["1.0.1"].attempts_failed, ops["1.1.1"].attempts_failed) == (0, 0)
        assert SEEN == ["queued ran"]


STEPS: asyncio.Queue[int] = asyncio.Queue()  # the test lets the step go on
BEATEN: asyncio.Queue[int] = asyncio.Queue()  # the step tells the test it beat


@step(name="beats.rows")
async def rows_one_by_one(rows: int) -> int:
    for row in range(rows):
        current_ctx().heartbeat({"row": row})
        BEATEN.put_nowait(row)
        await STEPS.get()
    return rows


@workflow(name="beats.long")
async def long_copy(ctx: Ctx, rows: int) -> int:
    return await rows_one_by_one(rows)


async def test_a_run_keeps_only_the_latest_heartbeat_record_of_a_step(make_engine: Any) -> None:
    global STEPS, BEATEN
    STEPS, BEATEN = asyncio.Queue(), asyncio.Queue()
    async with make_engine() as engine:
        h = await engine.start("beats.long", 4, id="l-1")
        run = engine.runs.latest("l-1")
        for row in range(4):
            assert await BEATEN.get() == row
            engine.driver.beats.flush_now()
            await engine.wait_until(lambda r=row: run.ops["1"].progress == {"row": r})  # type: ignore[misc]
            STEPS.put_nowait(row)
        assert await h.result(timeout=10) == 4
        kept = [rec for _, rec in run.records if rec.code == R.StepHeartbeat]
        assert [rec.details.value for rec in kept] == [{"row": 3}]
        in_journal = beats(await h.history())
        assert [r["details"] for r in in_journal] == [{"row": 3}]
        # the timing of a step that beat is forgotten once its attempt ends
        assert engine.driver.beats.last(run, "1") is None


@step(name="beats.keeps")
async def keeps_a_copy() -> list[Any]:
    current_ctx().heartbeat({"done": [1]})
    mine = current_ctx().progress()
    mine["done"].append(2)
    return [mine, current_ctx().progress()]


@workflow(name="beats.copied")
async def copied(ctx: Ctx, _: None) -> list[Any]:
    return await keeps_a_copy()


async def test_progress_is_a_copy_the_step_may_change(make_engine: Any) -> None:
    async with make_engine() as engine:
        said = await (await engine.start("beats.copied", None)).result(timeout=10)
    assert said == [{"done": [1, 2]}, {"done": [1]}]


@step(name="beats.held")
async def held_back() -> Any:
    if (seen := current_ctx().progress()) is not None:
        return seen
    current_ctx().heartbeat({"row": 0})
    await STEPS.get()
    for row in range(1, 6):
        current_ctx().heartbeat({"row": row})
    BEATEN.put_nowait(5)
    await STEPS.get()  # never given: the engine closes meanwhile


@workflow(name="beats.held")
async def held(ctx: Ctx, _: None) -> Any:
    return await held_back()


async def test_a_clean_close_appends_the_latest_heartbeat(
    make_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    global STEPS, BEATEN
    STEPS, BEATEN = asyncio.Queue(), asyncio.Queue()
    monkeypatch.setattr(beats_module, "EVERY_S", 3600.0)  # rows 1-5 are held back an hour
    async with make_engine() as engine:
        await engine.start("beats.held", None, id="c-2")
        await engine.wait_until(lambda: engine.runs.latest("c-2").ops.get("1") is not None)
        STEPS.put_nowait(0)
        assert await BEATEN.get() == 5
        assert engine.driver.beats.pending == 1
    async with make_engine() as engine:
        assert engine.runs.latest("c-2").ops["1"].progress == {"row": 5}
        assert await engine.handle("c-2").result(timeout=10) == {"row": 5}
