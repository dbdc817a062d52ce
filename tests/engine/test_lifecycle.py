"""Engine lifecycle edges: closing with waiters, terminate, bad filters, the home lock."""

from __future__ import annotations

import asyncio

import pytest

from fusee_runtime import Ctx, HomeLocked, Rejected, RunFailed, Terminated, step, workflow

BLOCK = asyncio.Event()


@step
async def lifecycle_blocks() -> None:
    await BLOCK.wait()


@workflow
async def lifecycle_waits(ctx: Ctx, _: None) -> None:
    await lifecycle_blocks()


async def test_a_result_waiter_is_told_when_the_engine_closes(make_engine) -> None:
    engine = make_engine()
    await engine.open()
    h = await engine.start("lifecycle_waits", None, id="w")
    waiting = asyncio.ensure_future(h.result())
    await asyncio.sleep(0)  # one loop turn: the waiter starts waiting
    await engine.close()
    with pytest.raises(Rejected, match="closed before run 'w' finished"):
        await waiting


async def test_terminate_closes_an_open_run_and_refuses_a_closed_one(make_engine) -> None:
    async with make_engine() as engine:
        h = await engine.start("lifecycle_waits", None, id="t")
        await h.terminate("operator said so")
        assert (await h.describe()).status == "terminated"
        with pytest.raises(Terminated, match="operator said so"):
            await h.result()
        with pytest.raises(Rejected, match="already closed"):
            await h.terminate()


async def test_unknown_status_filter_is_rejected_with_the_known_ones(make_engine) -> None:
    async with make_engine() as engine:
        with pytest.raises(Rejected, match=r"unknown status 'bogus'.*completed"):
            await engine.list(status="bogus")


async def test_a_second_engine_on_the_same_home_is_refused_with_the_pid(make_engine) -> None:
    import os

    async with make_engine():
        with pytest.raises(HomeLocked, match=f"process {os.getpid()}"):
            async with make_engine():
                pass


async def test_an_overlong_step_name_fails_the_run_with_a_clear_error(make_engine) -> None:
    @workflow(name="lifecycle.long_name")
    async def wf(ctx: Ctx, _: None) -> None:
        await ctx.step("s" * 5000, lambda: 1)

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="long")
        with pytest.raises(RunFailed) as e:
            await h.result()
        assert e.value.failure.kind == "Rejected"
        assert "a step name is a string of 1 to 200 characters" in e.value.failure.message


async def test_a_failed_fdatasync_fails_result_waiters_instead_of_hanging(make_engine) -> None:
    from fusee_runtime import JournalFailed
    from fusee_runtime.journal.storage import Storage

    class FailingSync(Storage):
        armed = False

        def sync(self, fd: int) -> None:
            if FailingSync.armed:
                raise OSError(5, "Input/output error")
            super().sync(fd)

    @step
    async def lifecycle_arm() -> None:
        FailingSync.armed = True

    @workflow(name="lifecycle.eio")
    async def wf(ctx: Ctx, _: None) -> None:
        await lifecycle_arm()
        await lifecycle_arm()

    async with make_engine(storage=FailingSync()) as engine:
        h = await engine.start(wf, None, id="eio")
        with pytest.raises(JournalFailed, match="Input/output error"):
            await h.result()
        assert (await h.describe()).status == "running"  # nothing after the failure counts


async def test_a_passive_engine_records_but_runs_no_code(make_engine) -> None:
    ran: list[str] = []

    @step
    async def lifecycle_passive_step(x: int) -> int:
        ran.append("step")
        return x

    @workflow(name="lifecycle.passive")
    async def wf(ctx: Ctx, x: int) -> int:
        got = await ctx.wait_for("go")
        return await lifecycle_passive_step(x + got)

    async with make_engine(drive=False) as engine:
        h = await engine.start(wf, 1, id="passive")
        await h.signal("go", 2)
        assert (await h.describe()).status == "running"
    async with make_engine(drive=False) as engine:
        assert (await engine.handle("passive").describe()).status == "running"
    assert ran == []
    async with make_engine() as engine:
        assert await engine.handle("passive").result() == 3
    assert ran == ["step"]


async def test_a_huge_workflow_failure_is_recorded_cut_not_left_hanging(make_engine) -> None:
    @workflow(name="lifecycle.huge_failure")
    async def wf(ctx: Ctx, _: None) -> None:
        raise RuntimeError("x" * 200_000)

    async with make_engine(payload_bytes_max=64 << 10) as engine:
        h = await engine.start(wf, None, id="huge")
        with pytest.raises(RunFailed) as e:
            await h.result()
        assert e.value.failure.kind == "RuntimeError"
        assert e.value.failure.message.endswith("more characters)")


async def test_a_bad_signal_name_with_start_writes_nothing(make_engine) -> None:
    async with make_engine() as engine:
        with pytest.raises(Rejected, match="signal name"):
            await engine.start("lifecycle_waits", None, id="bad-signal", signal=("", 1))
        assert await engine.list() == []


async def test_result_after_close_is_rejected_not_left_hanging(make_engine) -> None:
    engine = make_engine()
    await engine.open()
    h = await engine.start("lifecycle_waits", None, id="after-close")
    await engine.close()
    with pytest.raises(Rejected, match="engine closed"):
        await h.result()


async def test_cancelling_a_paused_step_inside_ctx_all_closes_the_run(make_engine) -> None:
    from fusee_runtime import Cancelled, Exhausted, RetryPolicy

    @step(retry=RetryPolicy(attempts=1, on_exhausted=Exhausted.PAUSE))
    async def lifecycle_down() -> None:
        raise ConnectionError("down")

    @workflow(name="lifecycle.paused_in_group")
    async def wf(ctx: Ctx, _: None) -> None:
        await ctx.all([lifecycle_down()])

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="pg")
        run = engine.runs.latest("pg")
        await engine.wait_until(lambda: bool(run.paused_ops()))
        await h.cancel("stop")
        with pytest.raises(Cancelled, match="stop"):
            await h.result()


async def test_a_reset_keeps_signals_carried_over_by_continue_as_new(make_engine) -> None:
    @workflow(name="lifecycle.carry")
    async def wf(ctx: Ctx, n: int) -> object:
        if n == 0:
            await ctx.continue_as_new(1)
        await lifecycle_blocks_once()
        return await ctx.wait_for("x")

    async with make_engine() as engine:
        h = await engine.start(wf, 0, id="carry", signal=("x", "hello"))
        await engine.wait_until(lambda: engine.runs.latest("carry").input == 1)
        successor = engine.runs.latest("carry")
        assert [s[2] for s in successor.signals] == ["hello"]
        h = await h.reset(to=1)
        reset_run = engine.runs.latest("carry")
        assert [s[2] for s in reset_run.signals] == ["hello"]
        h = await h.reset(to=1)
        assert [s[2] for s in engine.runs.latest("carry").signals] == ["hello"]
        BLOCK_ONCE.set()
        assert await h.result() == "hello"


BLOCK_ONCE = asyncio.Event()


@step
async def lifecycle_blocks_once() -> None:
    await BLOCK_ONCE.wait()


async def test_signal_with_start_on_a_closed_run_is_rejected_not_dropped(make_engine) -> None:
    @workflow(name="lifecycle.quick")
    async def wf(ctx: Ctx, _: None) -> str:
        return "done"

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="closed-sws")
        assert await h.result() == "done"
        with pytest.raises(Rejected, match="completed: it takes no more signals"):
            await engine.start(wf, None, id="closed-sws", signal=("go", 1))
