"""`ctx.version()` (issue 39, the audit's row on versions): the version of the code a run
began with, recorded at its start, whatever code replays it later; a reset run keeps
the version of the run it resets, a run continued as new its predecessor's."""

from __future__ import annotations

from typing import Any

import pytest

from fusee_runtime import Ctx, workflow

STORES = ("local", "postgresql")


def versioned(version: int) -> Any:
    @workflow(name="ver.order", version=version)
    async def order(ctx: Ctx, n: int) -> dict[str, int]:
        began = ctx.version()
        await ctx.wait_for("go")
        if n > 0:
            return await ctx.continue_as_new(n - 1)
        return {"version": began, "now": ctx.version()}

    return order


async def test_a_run_keeps_the_version_it_began_with_across_a_deploy(make_engine: Any) -> None:
    versioned(2)
    async with make_engine() as engine:
        await engine.start("ver.order", 1, id="v-1")
        await engine.start("ver.order", 0, id="v-2")
        await engine.wait_until(lambda: engine.runs.latest("v-2").live.parked)
    versioned(3)  # the deploy: new runs begin with version 3
    async with make_engine() as engine:
        await engine.start("ver.order", 0, id="v-3")
        await engine.signal("v-2", "go")
        await engine.signal("v-3", "go")
        assert await engine.handle("v-2").result(timeout=30) == {"version": 2, "now": 2}
        assert await engine.handle("v-3").result(timeout=30) == {"version": 3, "now": 3}
        await engine.signal("v-1", "go")  # continued as new: its successor keeps 2
        await engine.wait_until(lambda: engine.runs.latest("v-1").live.parked)
        await engine.signal("v-1", "go")
        assert await engine.handle("v-1").result(timeout=30) == {"version": 2, "now": 2}
        reset = await engine.reset("v-2", 1)  # a new journal of v-2 (its signal carried)
        assert await reset.result(timeout=30) == {"version": 2, "now": 2}
    async with make_engine(drive=False) as engine:  # as recorded, read back
        assert engine.runs.latest("v-3").origin == {"version": 3}
        assert engine.runs.latest("v-2").origin["version"] == 2


def test_a_version_is_a_positive_int() -> None:
    for bad in (0, -1, "2", True, 1.5):
        with pytest.raises(ValueError, match="version is a positive int"):
            versioned(bad)  # type: ignore[arg-type]
    versioned(1)


async def test_version_1_records_nothing(make_engine: Any) -> None:
    versioned(1)
    async with make_engine() as engine:
        h = await engine.start("ver.order", 0, id="v-9")
        await engine.signal("v-9", "go")
        assert await h.result(timeout=30) == {"version": 1, "now": 1}
        assert engine.runs.latest("v-9").origin is None
