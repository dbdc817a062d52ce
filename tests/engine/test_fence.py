"""`current_ctx().fence` (issue 36, item 3): the journal's turn of the process that runs
a step, never lower than an earlier driver's, on both stores. A step that runs again
after a crash sees its new driver's fence; the fence a step saw is what it recorded.
(A deposed PostgreSQL driver, whose writes the fence refuses: tests/postgres/
test_pg_deposed.py.)"""

from __future__ import annotations

from typing import Any

import pytest

from fusee_runtime import Ctx, Rejected, current_ctx, step, workflow
from fusee_runtime.engine.handle import RunHandle

STORES = ("local", "postgresql")
SEEN: list[int] = []


@step(name="fence.read")
async def read_fence() -> int:
    SEEN.append(current_ctx().fence)
    return SEEN[-1]


@workflow(name="fence.twice")
async def twice(ctx: Ctx, _: None) -> list[int]:
    first = await read_fence()
    await ctx.wait_for("go")
    return [first, await read_fence()]


@workflow(name="fence.in_code")
async def in_code(ctx: Ctx, _: None) -> str:
    try:
        return str(ctx.fence)
    except Rejected as e:
        return str(e)


@pytest.fixture(autouse=True)
def fresh() -> None:
    SEEN.clear()


async def test_a_later_driver_s_fence_is_never_lower(make_engine: Any, store: str | None) -> None:
    async with make_engine() as engine:
        handle: RunHandle = await engine.start("fence.twice", None, id="f-1")
        await engine.wait_until(lambda: len(SEEN) == 1)
        before = engine.driver.fence
    async with make_engine() as engine:  # a new driver: the run parked, replays
        await engine.handle("f-1").signal("go", True)
        recorded = await engine.handle("f-1").result(timeout=30)
        after = engine.driver.fence
    assert recorded == SEEN == [before, after]  # each step saw its driver's fence
    assert 0 < before <= after
    if store is not None:
        assert after == before + 1  # PostgreSQL counts opens (fusee_owner.epoch)
    assert handle.id == "f-1"


async def test_workflow_code_cannot_read_a_fence(make_engine: Any) -> None:
    # Its code replays under whichever driver runs it: a fence read there would change.
    async with make_engine() as engine:
        said = await (await engine.start("fence.in_code", None)).result(timeout=30)
    assert said.startswith("ctx.fence is for step functions")


def test_outside_a_run_there_is_no_fence() -> None:
    with pytest.raises(Rejected, match="current_ctx"):
        current_ctx().fence  # noqa: B018
