"""`Engine.list(status="open")`: every run not closed, from memory alone."""

from __future__ import annotations

import asyncio

import pytest

from fusee_runtime import Ctx, Rejected, step, workflow

STORES = ("local", "postgresql")

BLOCK = asyncio.Event()


@step
async def list_blocks() -> None:
    await BLOCK.wait()


@step
def list_echo(value: int) -> int:
    return value


@workflow
async def list_done(ctx: Ctx, value: int) -> int:
    return await list_echo(value)


@workflow
async def list_runs_on(ctx: Ctx, _: None) -> None:
    await list_blocks()


@workflow
async def list_parks(ctx: Ctx, _: None) -> object:
    return await ctx.wait_for("go")


async def test_open_lists_every_run_not_closed_without_the_history_store(
    make_engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with make_engine() as engine:
        assert await (await engine.start("list_done", 1, id="d-1")).result() == 1
        await engine.start("list_runs_on", None, id="r-1")
        await engine.start("list_parks", None, id="w-1")
        await engine.checkpoints.flush_history()
        assert {r.workflow_id for r in engine.runs.by_run_id.values()} == {"r-1", "w-1"}

        def no_store(*args: object) -> None:
            raise AssertionError("open runs are all in memory: the store was asked")

        monkeypatch.setattr(engine.runs.store, "list", no_store)
        assert [i.id for i in await engine.list(status="open")] == ["w-1", "r-1"]
        assert [i.id for i in await engine.list(status="open", limit=1)] == ["w-1"]
        assert await engine.list(status="open", workflow="list_done") == []
        with pytest.raises(AssertionError, match="the store was asked"):
            await engine.list(status="completed")  # closed runs: the store is asked


async def test_an_unknown_status_names_open(make_engine) -> None:
    async with make_engine() as engine:
        with pytest.raises(
            Rejected, match=r"unknown status 'opened'; statuses: open, scheduled, queued, running"
        ):
            await engine.list(status="opened")
