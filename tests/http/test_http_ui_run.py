"""The web UI's run page stays small whatever the run's size: a run of thousands of
operations is drawn in at most `bars.ROWS_MAX` rows (a loop is one row that counts
them), its operations table lists the first and last ones, and its history view pages
its records; the page is a few hundred KB, not megabytes."""

from __future__ import annotations

import re

import httpx

from fusee_runtime import Ctx, Engine, step, workflow
from fusee_runtime.control.api import Control
from fusee_runtime.control.http import build_app
from fusee_runtime.control.ui.bars import ROWS_MAX
from fusee_runtime.control.ui.run_view import OPS_SHOWN_MAX, RECORDS_PAGE

LOOPS = 1500


@step(name="hur.tick")
async def tick(n: int) -> int:
    return n + 1


@workflow(name="hur.big")
async def big(ctx: Ctx, _: None) -> int:
    n = 0
    for _ in range(LOOPS):
        n = await tick(n)
    ctx.stream("done").append(n)
    await ctx.wait_for("go")
    return n


async def test_a_run_of_thousands_of_operations_makes_a_small_page(engine: Engine) -> None:
    await engine.start("hur.big", None, id="big-1")
    await engine.wait_until(lambda: engine.runs.latest("big-1").live.parked)
    transport = httpx.ASGITransport(app=build_app(Control(engine)))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
        page = (await c.get("/runs/big-1")).text
        assert len(page) < 200_000, len(page)
        rows = re.findall(
            r'<div class="bar-row kind-([a-z-]+)[^"]*" data-op="([^"]+)" '
            r'data-count="(\d+)"',
            page,
        )
        assert len(rows) <= ROWS_MAX
        # The loop is one row that counts its steps; then the item and the wait.
        assert rows == [
            ("step", f"1–{LOOPS}", str(LOOPS)),
            ("stream", str(LOOPS + 1), "1"),
            ("signal", str(LOOPS + 2), "1"),
        ]
        listed = re.findall(r'<tr class="op op-[a-z-]+" data-op="(\d+)"', page)
        assert len(listed) == OPS_SHOWN_MAX
        assert listed[:2] == ["1", "2"] and listed[-1] == str(LOOPS + 2)
        assert f"… {LOOPS + 2 - OPS_SHOWN_MAX:,} operations not listed here" in page

        history = (await c.get("/runs/big-1?view=history")).text
        assert len(history) < 200_000, len(history)
        lsns = [int(n) for n in re.findall(r'data-lsn="(\d+)"', history)]
        assert lsns == sorted(lsns) and len(lsns) == RECORDS_PAGE
        later = re.findall(r'href="([^"]+)" rel="next"', history)
        assert later == ["/runs/big-1?view=history&amp;page=2"]
        second = (await c.get("/runs/big-1?view=history&page=2")).text
        assert int(re.findall(r'data-lsn="(\d+)"', second)[0]) == lsns[-1] + 1

        export = await c.get("/history/big-1")
        assert export.headers["content-disposition"].startswith('attachment; filename="big-1-')
        assert len(export.json()["records"]) > LOOPS
