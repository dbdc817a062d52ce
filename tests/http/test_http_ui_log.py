"""The web UI's run page shows the run's `ctx.log` lines, in its live part (which the
page re-fetches while it is open), escaped."""

from __future__ import annotations

import httpx

from fusee_runtime import Ctx, Engine, workflow
from fusee_runtime.control.api import Control
from fusee_runtime.control.http import build_app


@workflow(name="hul.logs")
async def logs(ctx: Ctx, _: None) -> None:
    ctx.log.info("charging <card> 4242")
    await ctx.wait_for("go")
    ctx.log.warn("went on")


async def test_a_run_page_shows_its_log_lines_live(engine: Engine) -> None:
    transport = httpx.ASGITransport(app=build_app(Control(engine)))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
        h = await engine.start("hul.logs", None, id="l-1")
        await engine.wait_until(lambda: engine.runs.latest("l-1").live.parked)
        page = (await c.get("/runs/l-1")).text
        assert "<h2>Log</h2>" in page and "charging &lt;card&gt; 4242" in page
        assert "went on" not in page
        await h.signal("go")
        await h.result()
        live = (await c.get("/runs/l-1?part=live")).text
        assert "charging &lt;card&gt; 4242" in live and "went on" in live
        other = await engine.start("hul.logs", None, id="l-2")
        await engine.wait_until(lambda: engine.runs.latest(other.id).live.parked)
        assert "went on" not in (await c.get("/runs/l-2")).text  # its own lines only
