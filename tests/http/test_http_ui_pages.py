"""The web UI's runs page goes on from the last run it showed (`?before=<run id>`), so a
deep page reads no more rows than the first; and the JSON API takes the same cursor."""

from __future__ import annotations

import re

import httpx

from fusee_runtime import Ctx, Engine, workflow
from fusee_runtime.control.api import Control
from fusee_runtime.control.http import build_app
from fusee_runtime.control.ui.pages import PAGE_RUNS


@workflow(name="hup.quick")
async def quick(ctx: Ctx, _: None) -> None:
    return None


async def test_the_older_link_goes_on_from_the_last_run_shown(engine: Engine) -> None:
    for i in range(PAGE_RUNS + 5):
        await (await engine.start("hup.quick", None, id=f"r-{i:03}")).result()
    transport = httpx.ASGITransport(app=build_app(Control(engine)))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
        first = (await c.get("/")).text
        shown = re.findall(r'href="/runs/(r-\d+)\?run=', first)
        assert shown == [f"r-{i:03}" for i in range(PAGE_RUNS + 4, 4, -1)]
        (older,) = re.findall(r'href="([^"]+)" rel="next"', first)
        last = (await engine.handle(shown[-1]).describe()).run_id
        assert f"before={last}" in older and "page=2" in older
        second = (await c.get(older.replace("&amp;", "&"))).text
        assert re.findall(r'href="/runs/(r-\d+)\?run=', second) == [
            f"r-{i:03}" for i in range(4, -1, -1)
        ]
        assert 'rel="next"' not in second and 'rel="first"' in second
        api = await c.get("/v1/runs", params={"before": last, "limit": 2})
        assert [r["id"] for r in api.json()] == ["r-004", "r-003"]
        unknown = await c.get("/v1/runs", params={"before": "nope"})
        assert unknown.status_code == 400
