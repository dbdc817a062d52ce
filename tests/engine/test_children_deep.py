"""`parent_close` through deeply nested children: 2,000 levels, one real engine.

A workflow starts itself as a child, down to depth 0, each level waiting
for the result of the one below; the top is terminated. Its close applies
the `parent_close` of its child, whose close applies its own child's, and so
on down: `Family.closed` works through them as a list, so the depth of the
tree is never the depth of Python's stack (it was: each level took a few
frames, and 2,000 levels passed the recursion limit).
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

from fusee_runtime import Ctx, Status, workflow

LEVELS = 2_000
"""Deeper than Python's recursion limit, several frames a level over."""


@workflow(name="deep.nest")
async def nest(ctx: Ctx, plan: dict[str, Any]) -> Any:
    """Starts itself as a child one level down and waits for it; level 0 waits for a
    signal that never comes."""
    depth = plan["depth"]
    if depth == 0:
        return await ctx.wait_for("never")
    below = {**plan, "depth": depth - 1}
    child_id = f"{plan['root']}-{depth - 1}"
    return await ctx.child(nest, child_id, below, parent_close=plan["close"])


@pytest.mark.parametrize(
    ("close", "status"), [("terminate", Status.TERMINATED), ("cancel", Status.CANCELLED)]
)
async def test_parent_close_runs_down_two_thousand_nested_children(
    make_engine: Any, close: str, status: Status
) -> None:
    assert sys.getrecursionlimit() < LEVELS
    root = f"deep-{close}"
    async with make_engine() as engine:
        plan = {"root": root, "depth": LEVELS, "close": close}
        top = await engine.start("deep.nest", plan, id=root)
        bottom = f"{root}-0"

        def parked(id: str) -> bool:
            run = engine.runs.newest.get(id)
            return run is not None and run.live.parked

        await engine.wait_until(lambda: parked(bottom))
        await engine.terminate(root, "from the test")

        def closed(id: str) -> bool:
            run = engine.runs.find_latest(id)
            return run is not None and not run.status.is_open

        # The bottom level is the last the cascade reaches.
        await engine.wait_until(lambda: closed(bottom))
        assert (await top.describe()).status == Status.TERMINATED
        infos = await engine.list(workflow="deep.nest")
        assert len(infos) == LEVELS + 1
        below = [i for i in infos if i.id != root]
        assert {i.status for i in below} == {status}
        for info in below:  # each closed by its own parent's close
            level = int(info.id.rsplit("-", 1)[1])
            above = root if level == LEVELS - 1 else f"{root}-{level + 1}"
            how = Status.TERMINATED if above == root else status
            assert f"its parent {above!r} closed ({how})" in (info.error or ""), info
    async with make_engine() as engine:  # and the home opens again as it was left
        again = await engine.list(workflow="deep.nest")
        assert sorted((i.id, i.status) for i in again) == sorted((i.id, i.status) for i in infos)
