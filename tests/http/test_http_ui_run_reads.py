"""What the web UI's run page reads each second (its live part): the shown run's records
alone (and those a reset kept), and past the first refresh only the records that came
since (`Control.history(id, run_id, after)`), folded on from what it folded before; the
whole history of the id only once its newest run changes (for the chain's links). An id
of many runs links the newest few of them and the runs list for the rest. And an older
run's log lines are its own, not the id's last lines filtered down to none."""

from __future__ import annotations

import re
from typing import Any

import httpx

from fusee_runtime import Ctx, Engine, step, workflow
from fusee_runtime.control.api import Control
from fusee_runtime.control.http import build_app
from fusee_runtime.control.ui.run_view import OTHER_RUNS_SHOWN_MAX

STEPS = 200
LOOPS = OTHER_RUNS_SHOWN_MAX + 5
LINES = 250


@step(name="hurr.tick")
async def tick(n: int) -> int:
    return n + 1


@workflow(name="hurr.steps")
async def steps(ctx: Ctx, _: None) -> int:
    n = 0
    for _ in range(STEPS):
        n = await tick(n)
    await ctx.wait_for("go")
    return await tick(n)


@workflow(name="hurr.looping")
async def looping(ctx: Ctx, n: int) -> int:
    if n < LOOPS:
        await ctx.continue_as_new(n + 1)
    await ctx.wait_for("go")
    return n


@workflow(name="hurr.logging")
async def logging_(ctx: Ctx, _: None) -> None:
    await tick(0)
    for n in range(LINES):
        ctx.log.info(f"line {n} of {ctx.run_id}")
    await ctx.wait_for("go")


class Counted(Control):
    """A `Control` that notes each history read: its run id, `after`, records read."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.reads: list[tuple[str | None, int | None, int]] = []

    async def history(
        self, id: str, run_id: str | None = None, after: int | None = None
    ) -> list[dict[str, Any]]:
        got = await super().history(id, run_id, after)
        self.reads.append((run_id, after, len(got)))
        return got


def client(control: Control) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=build_app(control))
    return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1")


async def parked(engine: Engine, id: str) -> str:
    await engine.wait_until(lambda: engine.runs.latest(id).live.parked)
    return engine.runs.latest(id).run_id


async def test_a_refresh_reads_only_what_the_shown_run_recorded_since(engine: Engine) -> None:
    control = Counted(engine)
    h = await engine.start("hurr.steps", None, id="r-1")
    run_id = await parked(engine, "r-1")
    async with client(control) as c:
        first = (await c.get("/runs/r-1?part=live")).text
        assert f"({STEPS + 1:,})" in first  # the operations: the steps and the wait
        everything = len(await Control(engine).history("r-1"))
        # The run's records, and the id's whole history once, for the chain.
        assert control.reads == [(run_id, None, everything), (None, None, everything)]
        control.reads.clear()
        assert (await c.get("/runs/r-1?part=live")).text == first
        [(read_run, after, count)] = control.reads
        assert (read_run, count) == (run_id, 0) and after is not None

        await h.signal("go")
        await h.result()
        control.reads.clear()
        done = (await c.get("/runs/r-1?part=live")).text
        [(read_run, _, count)] = control.reads
        assert read_run == run_id and 0 < count < 10  # the signal, the step, the close
        assert f"({STEPS + 2:,})" in done and "completed" in done


async def test_an_id_of_many_runs_links_the_newest_few(engine: Engine) -> None:
    await engine.start("hurr.looping", 0, id="r-2")
    newest = await parked(engine, "r-2")
    async with client(Control(engine)) as c:
        page = (await c.get("/runs/r-2")).text
    others = re.search(r"<dt>Other runs</dt><dd>(.*?)</dd>", page, re.S)
    assert others is not None
    said = others.group(1)
    assert said.startswith(f"{LOOPS} other runs of this id")
    assert len(re.findall(r'href="/runs/r-2\?run=', said)) == OTHER_RUNS_SHOWN_MAX
    assert f"and {LOOPS - OTHER_RUNS_SHOWN_MAX} earlier" in said
    assert 'href="/?id=r-2"' in said
    assert newest not in said  # (the run shown is not among the others)


async def test_an_older_run_shows_its_own_log_lines(engine: Engine) -> None:
    await engine.start("hurr.logging", None, id="r-3")
    old = await parked(engine, "r-3")
    new = (await engine.reset("r-3", 1)).run_id
    await engine.wait_until(lambda: engine.runs.latest("r-3").live.parked)
    async with client(Control(engine)) as c:
        page = (await c.get(f"/runs/r-3?run={old}")).text
        shown = re.findall(r"line (\d+) of (\w+)", page)
        assert shown and {run for _, run in shown} == {old}
        # Its last lines (the page shows 200 lines, the engine's own among them).
        numbers = [int(n) for n, _ in shown]
        assert numbers == list(range(numbers[0], LINES)) and numbers[0] <= LINES - 190
        newest = (await c.get("/runs/r-3")).text
        assert {run for _, run in re.findall(r"line (\d+) of (\w+)", newest)} == {new}
