"""What the web UI's run page says of children, of a reset run's kept operations and of
values it cannot trust: a child links to the run its parent started (not to its id's
newest run, after a reset of the child); a child whose start was refused is no child
(no link, no "Its children"); a kept operation says when it ran, never a negative
offset; and a value with a right-to-left override is isolated (`<bdi>`), so it turns
no text around it."""

from __future__ import annotations

import contextlib
import re

import httpx

from fusee_runtime import Ctx, Engine, FuseeError, step, workflow
from fusee_runtime.control.api import Control
from fusee_runtime.control.http import build_app

RLO = "\u202e"


@step(name="hurl.one")
async def one(x: int) -> int:
    return x + 1


@workflow(name="hurl.kid")
async def kid(ctx: Ctx, x: int) -> int:
    a = await one(x)
    await ctx.wait_for("go")
    return a


@workflow(name="hurl.parent")
async def parent(ctx: Ctx, x: int) -> str:
    child = await ctx.start_child(kid, f"{ctx.workflow_id}-kid", x)
    with contextlib.suppress(FuseeError):  # an id another run has: refused
        await ctx.child(kid, "taken-1", x)
    await ctx.wait_for("go")
    return child.id


@workflow(name="hurl.gated")
async def gated(ctx: Ctx, x: int) -> int:
    a = await one(x)
    b = await one(a)
    got = await ctx.wait_for("go")
    return b + len(str(got))


def client(engine: Engine) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=build_app(Control(engine)))
    return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1")


async def parked(engine: Engine, id: str) -> str:
    await engine.wait_until(lambda: engine.runs.latest(id).live.parked)
    return engine.runs.latest(id).run_id


async def test_a_child_links_to_the_run_its_parent_started(engine: Engine) -> None:
    await engine.start("hurl.gated", 0, id="taken-1")
    await engine.start("hurl.parent", 1, id="pa-1")
    await parked(engine, "pa-1")
    started = await parked(engine, "pa-1-kid")
    newer = (await engine.reset("pa-1-kid", 1)).run_id
    assert newer != started
    async with client(engine) as c:
        page = (await c.get("/runs/pa-1")).text
    kid_links = set(re.findall(r'href="(/runs/pa-1-kid[^"]*)"', page))
    assert kid_links == {f"/runs/pa-1-kid?run={started}"}  # the table's and the bar's
    # The refused child: its failure, and no link to a run that does not exist.
    assert "/runs/taken-1" not in page
    assert "failed to start" in page
    assert page.count("Its children") == 1  # (one child: the started one)


async def test_kept_operations_show_when_they_ran_and_values_are_isolated(
    engine: Engine,
) -> None:
    await engine.start("hurl.gated", 1, id="ga-1")
    await parked(engine, "ga-1")
    await engine.reset("ga-1", 2)  # keeps operation 1
    await parked(engine, "ga-1")
    await engine.handle("ga-1").signal("go", f"abc{RLO}def")
    await engine.handle("ga-1").result()
    async with client(engine) as c:
        page = (await c.get("/runs/ga-1")).text
    assert "+-" not in page
    kept = re.search(r'<tr class="op op-step kept" data-op="1">(.*?)</tr>', page, re.S)
    assert kept is not None
    cells = re.findall(r"<td>(.*?)</td>", kept.group(1), re.S)
    assert re.fullmatch(r"<time[^>]*>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d</time>|[\d :-]+", cells[4])
    # Every right-to-left override is inside an isolate.
    outside = re.sub(r"<bdi>.*?</bdi>", "", page, flags=re.S)
    assert RLO in page and RLO not in outside
