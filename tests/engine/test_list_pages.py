"""`engine.list(before=run_id)`: the next page of a list, from the last run of the page
before, over open runs in memory and closed ones in the history store alike, each page
read with its limit (a cursor, not an offset)."""

from __future__ import annotations

from typing import Any

import pytest

from fusee_runtime import Ctx, Rejected, workflow

STORES = ("local", "postgresql")


@workflow(name="lp.quick")
async def quick(ctx: Ctx, _: None) -> None:
    return None


@workflow(name="lp.waits")
async def waits(ctx: Ctx, _: None) -> None:
    await ctx.wait_for("never")


async def test_pages_from_a_cursor_cover_every_run_once(make_engine: Any) -> None:
    async with make_engine() as engine:
        for i in range(7):  # closed ones, moved to the history store
            await (await engine.start("lp.quick", None, id=f"q-{i}")).result()
        await engine.checkpoints.flush_history()
        for i in range(4):  # open ones, in memory
            await engine.start("lp.waits", None, id=f"w-{i}")
        await (await engine.start("lp.quick", None, id="q-last")).result()  # not stored yet
        whole = [info.id for info in await engine.list()]
        assert len(whole) == 12
        pages: list[list[str]] = []
        before = None
        while True:
            page = await engine.list(limit=5, before=before)
            if not page:
                break
            pages.append([info.id for info in page])
            before = page[-1].run_id
        assert [len(p) for p in pages] == [5, 5, 2]
        assert [id for page in pages for id in page] == whole  # newest first, each once
        fifth = (await engine.list(limit=5))[-1].run_id
        older = await engine.list(workflow="lp.quick", before=fifth)  # filters apply too
        assert [i.id for i in older] == [w for w in whole[5:] if w.startswith("q-")]
        with pytest.raises(Rejected, match="no run 'nope' to list the runs before"):
            await engine.list(before="nope")
