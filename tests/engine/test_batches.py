"""Batches (issue 38): one act on every run a filter matches, once each, durably.

Each test runs on the local journal and on PostgreSQL. A batch paced by `rate`
waits on the engine's clock between windows, so a `FakeClock` stops it halfway,
deterministically: there the tests close the engine as a crash would, or act on a
run themselves, then let the batch go on.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from fusee_runtime import (
    Ctx,
    Exhausted,
    FakeClock,
    Fatal,
    NotFound,
    Rejected,
    RetryPolicy,
    RunFailed,
    Status,
    step,
    workflow,
)
from fusee_runtime.engine import batches
from fusee_runtime.engine.batches import BATCH
from fusee_runtime.errors import IdConflict

STORES = ("local", "postgresql")

DOWN = {"down": True}


@workflow(name="bx.wait")
async def bx_wait(ctx: Ctx, n: int) -> Any:
    ctx.set_attributes({"tier": "gold" if n % 2 else "free"})
    return [n, await ctx.wait_for("go")]


@step(name="bx.charge", retry=RetryPolicy(attempts=1))
def bx_charge(n: int) -> int:
    if DOWN["down"]:
        raise Fatal("the payment service is down")
    return n


@workflow(name="bx.charge")
async def bx_charge_run(ctx: Ctx, n: int) -> int:
    await ctx.step("bx.ok", lambda: n)
    return await bx_charge(n)


@step(name="bx.flaky", retry=RetryPolicy(attempts=1, on_exhausted=Exhausted.PAUSE))
def bx_flaky() -> str:
    if DOWN["down"]:
        raise ConnectionError("down")
    return "up"


@workflow(name="bx.pauses")
async def bx_pauses(ctx: Ctx, _: Any) -> str:
    return await bx_flaky()


@pytest.fixture(autouse=True)
def _down() -> None:
    DOWN["down"] = True


async def _waiting(engine: Any, n: int) -> None:
    await asyncio.gather(*(engine.start(bx_wait, i, id=f"w-{i}") for i in range(n)))
    await engine.wait_until(lambda: _parked(engine, "bx.wait") == n)


def _parked(engine: Any, workflow: str) -> int:
    return sum(
        1 for r in engine.runs.by_run_id.values() if r.workflow == workflow and r.live.parked
    )


async def _failed(engine: Any, n: int) -> None:
    await asyncio.gather(*(engine.start(bx_charge_run, i, id=f"c-{i}") for i in range(n)))
    for i in range(n):
        with pytest.raises(RunFailed):
            await engine.handle(f"c-{i}").result()


def _kinds(records: list[dict[str, Any]]) -> list[str]:
    return [r["type"] for r in records]


async def test_a_cancel_batch_cancels_each_matching_run_once(make_engine: Any) -> None:
    async with make_engine() as engine:
        await _waiting(engine, 30)
        dry = await engine.batch("cancel", where={"tier": "gold"}, dry_run=True)
        assert (dry["count"], len(dry["runs"])) == (15, 15)
        assert await engine.list(workflow=BATCH) == []  # a dry run starts nothing
        doc = await engine.batch("cancel", where={"tier": "gold"}, id="b-1", reason="recall")
        assert doc["id"] == "b-1" and doc["filter"]["where"] == {"tier": "gold"}
        summary = await engine.handle("b-1").result()
        assert summary == {"total": 15, "acted": 15, "outcomes": {"cancelled": 15}}
        for i in range(30):
            info = await engine.handle(f"w-{i}").describe()
            assert info.status == (Status.CANCELLED if i % 2 else Status.PARKED), i
        doc = engine.describe_batch("b-1")
        assert doc["status"] == "completed"
        assert sorted(run["id"] for run in doc["runs"]) == sorted(f"w-{i}" for i in range(1, 30, 2))
        again = await engine.batch("cancel", where={"tier": "gold"}, id="b-1", reason="recall")
        assert again["run_id"] == doc["run_id"]  # the same id: the same batch
    async with make_engine() as engine:  # as recorded
        assert engine.describe_batch("b-1")["outcomes"] == {"cancelled": 15}
        kinds = _kinds(await engine.history("w-1"))
        assert kinds.count("CancelRequested") == 1


async def test_a_signal_batch_delivers_one_signal_to_each_and_refuses_closed_ones(
    make_engine: Any, clock: FakeClock
) -> None:
    async with make_engine() as engine:
        await _waiting(engine, 6)
        await engine.terminate("w-5")  # closed: not listed (a signal batch acts on open runs)
        doc = await engine.batch("signal", workflow="bx.wait", signal="go", value="yes", rate=1)
        await engine.wait_until(lambda: engine.describe_batch(doc["id"])["acted"] == 1)
        await engine.terminate("w-0")  # listed, then closed before the batch reached it
        while engine.runs.latest(doc["id"]).is_open:
            await clock.wait_for_sleepers()
            clock.advance(1)
            await asyncio.sleep(0)
        summary = await engine.handle(doc["id"]).result()
        assert summary["outcomes"] == {"signalled": 4, "refused": 1}
        for i in range(1, 5):
            assert await engine.handle(f"w-{i}").result() == [i, "yes"]
            assert _kinds(await engine.history(f"w-{i}")).count("SignalReceived") == 1
        (refused,) = [r for r in engine.describe_batch(doc["id"])["runs"] if r["id"] == "w-0"]
        assert refused["outcome"] == "refused" and "terminated" in refused["detail"]
        assert refused["run_id"] == engine.runs.latest("w-0").run_id  # as it was listed


async def test_a_reset_batch_resets_each_failed_run_from_its_first_failed_step(
    make_engine: Any,
) -> None:
    async with make_engine() as engine:
        await _failed(engine, 8)
        DOWN["down"] = False
        doc = await engine.batch("reset", status="failed", to="@first-failed", id="r-1")
        summary = await engine.handle("r-1").result()
        assert summary["outcomes"] == {"reset": 8}
        for i in range(8):
            assert await engine.handle(f"c-{i}").result() == i
            started = [r for r in await engine.history(f"c-{i}") if r["type"] == "RunStarted"]
            assert len(started) == 2
            # The first step is kept (#1), the failed one runs again.
            origin = {"reset": started[0]["run_id"], "before": 2, "batch": "r-1"}
            assert started[1]["origin"] == origin
        by_run = {r["run_id"]: r for r in engine.describe_batch("r-1")["runs"]}
        assert all(r["new_run_id"] for r in by_run.values()) and len(by_run) == 8
        del doc


async def test_reset_takes_first_failed_and_last_completed_and_says_when_there_is_none(
    make_engine: Any,
) -> None:
    async with make_engine() as engine:
        await _failed(engine, 1)
        DOWN["down"] = False
        new = await engine.reset("c-0", "@last-completed")  # bx.ok, #1: both run again
        assert await new.result() == 0
        with pytest.raises(NotFound, match="has no step that failed"):
            await engine.reset("c-0", "@first-failed")


async def test_terminate_and_resume_batches(make_engine: Any) -> None:
    async with make_engine() as engine:
        await asyncio.gather(*(engine.start(bx_pauses, None, id=f"p-{i}") for i in range(4)))
        await engine.wait_until(
            lambda: all(engine.runs.latest(f"p-{i}").status == Status.PAUSED for i in range(4))
        )
        await _waiting(engine, 3)
        DOWN["down"] = False
        doc = await engine.batch("resume", status="open")
        summary = await engine.handle(doc["id"]).result()
        assert summary["outcomes"] == {"resumed": 4, "skipped": 3}
        assert [await engine.handle(f"p-{i}").result() for i in range(4)] == ["up"] * 4
        doc = await engine.batch("terminate", workflow="bx.wait", reason="cleanup")
        summary = await engine.handle(doc["id"]).result()
        assert summary["outcomes"] == {"terminated": 3}
        info = await engine.handle("w-0").describe()
        assert info.status == Status.TERMINATED
        assert info.error == f"terminated: cleanup (batch {doc['id']})"


async def test_a_batch_stopped_halfway_by_a_crash_goes_on_and_acts_on_no_run_twice(
    make_engine: Any, clock: FakeClock
) -> None:
    async with make_engine() as engine:
        await _waiting(engine, 250)
        await _failed(engine, 250)
        await engine.batch("terminate", workflow="bx.wait", rate=100, id="t-1")
        await engine.batch("reset", workflow="bx.charge", to="bx.charge", rate=100, id="r-1")
        # Each acts on a window of 100, then waits a second on the clock.
        await engine.wait_until(
            lambda: all(engine.describe_batch(b)["acted"] == 100 for b in ("t-1", "r-1"))
        )
        await engine.close(crash=True)
    async with make_engine() as engine:
        assert [engine.describe_batch(b)["acted"] for b in ("t-1", "r-1")] == [100, 100]
        while engine.runs.latest("t-1").is_open or engine.runs.latest("r-1").is_open:
            await clock.wait_for_sleepers()
            clock.advance(1)
            await asyncio.sleep(0)
        assert (await engine.handle("t-1").result())["outcomes"] == {"terminated": 250}
        assert (await engine.handle("r-1").result())["outcomes"] == {"reset": 250}
        for i in range(250):
            assert _kinds(await engine.history(f"w-{i}")).count("RunTerminated") == 1
            assert _kinds(await engine.history(f"c-{i}")).count("RunStarted") == 2


async def test_a_step_act_run_again_finds_what_it_did_and_does_not_do_it_again(
    make_engine: Any, clock: FakeClock
) -> None:
    """What a terminate step sees when it runs again after a crash cut its record: the
    run terminated with the batch's reason. Made here by hand, in the batch's pause."""
    async with make_engine() as engine:
        await _waiting(engine, 3)
        await engine.batch("terminate", workflow="bx.wait", rate=1, id="t-2")
        await engine.wait_until(lambda: engine.describe_batch("t-2")["acted"] == 1)
        await engine.terminate("w-0", "terminated (batch t-2)")  # w-2 went first
        await engine.terminate("w-1", "by hand")
        while engine.runs.latest("t-2").is_open:
            await clock.wait_for_sleepers()
            clock.advance(1)
            await asyncio.sleep(0)
        runs = {r["id"]: r for r in engine.describe_batch("t-2")["runs"]}
        assert runs["w-0"]["outcome"] == "terminated"
        assert (runs["w-1"]["outcome"], runs["w-1"]["detail"]) == ("skipped", "already terminated")
        assert _kinds(await engine.history("w-0")).count("RunTerminated") == 1


async def test_a_batch_cancelled_stops_and_a_cancel_batch_leaves_batches_alone(
    make_engine: Any, clock: FakeClock
) -> None:
    async with make_engine() as engine:
        await _waiting(engine, 5)
        await engine.batch("signal", workflow="bx.wait", signal="go", rate=1, id="s-1")
        await engine.wait_until(lambda: engine.describe_batch("s-1")["acted"] == 1)
        assert await engine.handle("w-4").result() == [4, None]  # the newest goes first
        doc = await engine.batch("cancel", status="open", id="c-all")
        assert (await engine.handle("c-all").result())["outcomes"] == {"cancelled": 4}
        assert engine.runs.latest("s-1").is_open  # not a target: a batch
        await engine.cancel("s-1")
        with pytest.raises(Exception, match="cancel"):
            await engine.handle("s-1").result()
        assert engine.describe_batch("s-1")["status"] == "cancelled"
        del doc


async def test_a_cancel_batch_closes_runs_not_begun(make_engine: Any) -> None:
    async with make_engine() as engine:
        for i in range(3):
            await engine.start(bx_wait, i, id=f"d-{i}", start_delay=timedelta(hours=1))
        doc = await engine.batch("cancel", status="scheduled")
        assert (await engine.handle(doc["id"]).result())["outcomes"] == {"cancelled": 3}
        assert {(await engine.handle(f"d-{i}").describe()).status for i in range(3)} == {
            Status.CANCELLED
        }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"action": "delete"}, "a batch does one of cancel, terminate, signal, reset, resume"),
        ({"action": "cancel"}, "a batch takes a filter: where, workflow or status"),
        ({"action": "cancel", "status": "sleepy"}, "sleepy"),
        ({"action": "cancel", "status": "completed"}, "acts on open runs, not completed ones"),
        ({"action": "signal", "status": "open"}, "a batch that signals takes --signal NAME"),
        ({"action": "signal", "status": "open", "signal": "go", "reason": "x"}, "--reason"),
        ({"action": "reset", "status": "failed"}, "a batch that resets takes --to"),
        ({"action": "reset", "status": "failed", "to": "0"}, "operation numbers start at 1"),
        ({"action": "cancel", "status": "open", "to": "x"}, "--to goes with a batch that resets"),
        ({"action": "cancel", "status": "open", "rate": 0}, "a batch's rate is a number"),
        ({"action": "cancel", "status": "open", "rate": float("nan")}, "a batch's rate"),
        ({"action": "cancel", "workflow": BATCH}, "a batch does not act on batches"),
        ({"action": "cancel", "where": [1]}, "where is a mapping"),
        ({"action": "cancel", "status": "open", "id": "a/b"}, "may not contain '/'"),
    ],
)
async def test_a_bad_batch_is_refused_before_anything_is_recorded(
    make_engine: Any, args: dict[str, Any], message: str
) -> None:
    async with make_engine() as engine:
        with pytest.raises(Rejected, match=message):
            await engine.batch(**args)
        assert await engine.list() == []
        with pytest.raises(NotFound):
            engine.describe_batch("nope")


async def test_a_batch_and_a_delayed_run_hold_across_a_checkpoint_and_its_compaction(
    make_engine: Any, clock: FakeClock
) -> None:
    async with make_engine() as engine:
        await _waiting(engine, 150)
        await engine.start(bx_wait, -1, id="late", start_delay=timedelta(seconds=30))
        await engine.batch("cancel", workflow="bx.wait", status="parked", rate=100, id="k-1")
        await engine.wait_until(lambda: engine.describe_batch("k-1")["acted"] == 100)
        await engine.checkpoint()  # the journal before it compacted away
        await engine.close(crash=True)
    async with make_engine() as engine:
        assert engine.describe_batch("k-1")["acted"] == 100
        assert (await engine.handle("late").describe()).status == Status.SCHEDULED
        while engine.runs.latest("k-1").is_open:
            await clock.wait_for_sleepers()
            clock.advance(1)
            await asyncio.sleep(0)
        assert (await engine.handle("k-1").result())["outcomes"] == {"cancelled": 150}
        for i in range(150):
            assert _kinds(await engine.history(f"w-{i}")).count("CancelRequested") == 1
        clock.advance(30)
        await engine.signal("late", "go", "at last")
        assert await engine.handle("late").result() == [-1, "at last"]


async def test_a_resume_cut_by_a_crash_after_it_acted_is_not_done_again(
    make_engine: Any,
) -> None:
    """The crash window of a resume step: the resume durable, the step's result not. The
    run paused again meanwhile; run again after the crash, the step sees one resume more
    than it counted before, and does not resume it a second time."""

    def resumes(engine: Any) -> int:
        return sum(
            1 for r in engine.runs.latest("p-0").records if type(r[1]).__name__ == "StepResumed"
        )

    async with make_engine() as engine:
        await engine.start(bx_pauses, None, id="p-0")
        await engine.wait_until(lambda: engine.runs.latest("p-0").status == Status.PAUSED)
        act = engine.batches._resume

        async def cut(*args: Any) -> Any:
            await act(*args)  # the resume is durable ...
            await asyncio.Future()  # ... and the step's result never is: the crash comes

        engine.batches._resume = cut
        await engine.batch("resume", workflow="bx.pauses", id="r-2")
        await engine.wait_until(
            lambda: resumes(engine) == 1 and engine.runs.latest("p-0").status == Status.PAUSED
        )
        await engine.close(crash=True)
    async with make_engine() as engine:
        assert (await engine.handle("r-2").result())["outcomes"] == {"resumed": 1}
        (run,) = engine.describe_batch("r-2")["runs"]
        assert run["detail"] == "before a crash cut this step's record"
        assert resumes(engine) == 1
        assert engine.runs.latest("p-0").status == Status.PAUSED


async def test_a_batch_follows_a_run_that_continued_as_new_and_one_error_stops_no_batch(
    make_engine: Any, clock: FakeClock
) -> None:
    async with make_engine() as engine:
        await asyncio.gather(*(engine.start(bx_rolls, 0, id=f"e-{i}") for i in range(3)))
        await engine.wait_until(lambda: _parked(engine, "bx.rolls") == 3)
        await engine.batch("signal", workflow="bx.rolls", signal="roll", rate=1, id="s-r")
        await engine.wait_until(lambda: engine.describe_batch("s-r")["acted"] == 1)
        for i in range(2):  # the two not acted on yet roll over to a new run
            await engine.signal(f"e-{i}", "roll")
        await engine.wait_until(lambda: _parked(engine, "bx.rolls") == 3)
        while engine.runs.latest("s-r").is_open:
            await clock.wait_for_sleepers()
            clock.advance(1)
            await asyncio.sleep(0)
        assert (await engine.handle("s-r").result())["outcomes"] == {"signalled": 3}
        assert [engine.runs.latest(f"e-{i}").input for i in range(3)] == [2, 2, 1]


@workflow(name="bx.rolls")
async def bx_rolls(ctx: Ctx, n: int) -> Any:
    await ctx.wait_for("roll")
    return await ctx.continue_as_new(n + 1)


async def test_a_dry_run_counts_no_batch_and_fusee_batch_is_not_started_by_name(
    make_engine: Any,
) -> None:
    async with make_engine() as engine:
        await _waiting(engine, 2)
        await engine.batch("signal", signal="go", status="open", id="b-1", rate=0.001)
        assert (await engine.batch("cancel", status="open", dry_run=True))["count"] == 2
        with pytest.raises(Rejected, match="the engine's own workflow"):
            await engine.start(BATCH, {"action": "cancel"}, id="sneaky")
        with pytest.raises(IdConflict, match="does something else"):
            await engine.batch("cancel", status="open", id="b-1")
        for to in (0, True, "@nope", 1.5):
            with pytest.raises(Rejected):
                await engine.batch("reset", workflow="bx.wait", to=to)
        for rate in (1e-320, 10**400, 0.0009):
            with pytest.raises(Rejected, match="a batch's rate"):
                await engine.batch("cancel", status="open", rate=rate)


async def test_a_prune_under_a_paced_batch_takes_away_no_page(
    make_engine: Any, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The next page begins where the last run of this one began in the journal: a prune
    of that run while the batch waits leaves the batch its place."""
    monkeypatch.setattr(batches, "PAGE", 10)
    async with make_engine() as engine:
        await _waiting(engine, 11)
        await engine.batch("terminate", workflow="bx.wait", rate=10, id="t-p")
        await engine.wait_until(lambda: engine.describe_batch("t-p")["acted"] == 10)
        clock.advance(3600)
        # The first page's runs, terminated an hour ago, the cursor's run among them.
        assert await engine.prune(60) == 10
        while engine.runs.latest("t-p").is_open:
            await clock.wait_for_sleepers()
            clock.advance(1)
            await asyncio.sleep(0)
        await engine.handle("t-p").result()
        doc = engine.describe_batch("t-p")
        assert (doc["status"], doc["total"], doc["acted"]) == ("completed", 11, 11)
        assert doc["outcomes"] == {"terminated": 11}
        assert (await engine.handle("w-0").describe()).status == Status.TERMINATED
