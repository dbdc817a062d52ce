"""The web UI's run page stays within `LIVE_BYTES_MAX` whatever a run's values: a run
of 2,000 operations with 20 KB step values and stream items in more streams than it
lists gives a live part (fetched every second) of a few hundred KB, each value cut to
`LIVE_VALUE_CHARS_MAX`, each stream to its newest items with how to get the rest."""

from __future__ import annotations

import re

import httpx

from fusee_runtime import Ctx, Engine, step, workflow
from fusee_runtime.control.api import Control
from fusee_runtime.control.http import build_app
from fusee_runtime.control.ui.run_view import (
    LIVE_BYTES_MAX,
    STREAMS_SHOWN_MAX,
)
from fusee_runtime.control.ui.timeline import STREAM_ITEMS_MAX

LOOPS = 400
STREAMS = STREAMS_SHOWN_MAX + 2
BIG = "x" * 20_000


@step(name="hurs.big")
async def big(n: int) -> str:
    return f"{n}:{BIG}"


@workflow(name="hurs.large")
async def large(ctx: Ctx, _: None) -> None:
    streams = [ctx.stream(f"s{k}") for k in range(STREAMS)]
    for n in range(LOOPS):
        value = await big(n)
        streams[n % STREAMS].append(value)
        ctx.stream(f"s{n % 2}").append(value)
    await ctx.wait_for("go")


async def test_a_run_of_large_values_makes_a_bounded_live_part(engine: Engine) -> None:
    await engine.start("hurs.large", None, id="lg-1")
    await engine.wait_until(lambda: engine.runs.latest("lg-1").live.parked)
    transport = httpx.ASGITransport(app=build_app(Control(engine)))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
        live = (await c.get("/runs/lg-1?part=live")).text
    assert len(live.encode()) < LIVE_BYTES_MAX, len(live)
    assert re.search(r"\(\d{2},\d{3} more characters\)", live)  # values cut, saying so
    assert len(re.findall(r'<h3 data-stream="', live)) == STREAMS_SHOWN_MAX
    assert f"{STREAMS - STREAMS_SHOWN_MAX} more streams not listed" in live
    items = re.findall(r'<ol class="stream">(.*?)</ol>', live, re.S)
    assert all(part.count("<li") <= STREAM_ITEMS_MAX for part in items)
    assert "fusee tail-stream lg-1 s0 --no-follow" in live
