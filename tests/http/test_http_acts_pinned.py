"""An act that names its run (`?run_id=`, as the web UI's buttons send it) goes to that
run alone: once another client reset the run, or it continued as new, the act is
refused with a `Rejected` that names the run and the id's newest, and the newest run is
left as it was. Without `run_id`, the act goes to the newest run, as before."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from fusee_runtime import Ctx, Engine, step, workflow


@step(name="hap.first")
async def first(x: int) -> int:
    return x + 1


@workflow(name="hap.gated")
async def gated(ctx: Ctx, x: int) -> int:
    a = await first(x)
    await ctx.wait_for("go")
    return a


@workflow(name="hap.looping")
async def looping(ctx: Ctx, n: int) -> int:
    if n < 1:
        await ctx.continue_as_new(n + 1)
    await ctx.wait_for("go")
    return n


async def parked(engine: Engine, id: str) -> str:
    await engine.wait_until(lambda: engine.runs.latest(id).live.parked)
    return engine.runs.latest(id).run_id


ACTS: list[tuple[str, Any]] = [
    ("cancel", {}),
    ("terminate", {}),
    ("resume", None),
    ("signals/go", 1),
    ("reset", {"to": 1}),
]


@pytest.mark.parametrize(("act", "body"), ACTS, ids=[a for a, _ in ACTS])
async def test_an_act_for_a_run_that_was_reset_is_refused(
    engine: Engine, api: httpx.AsyncClient, act: str, body: Any
) -> None:
    await engine.start("hap.gated", 1, id="p-1")
    old = await parked(engine, "p-1")
    reset = await api.post("/v1/runs/p-1/reset", json={"to": 1})  # another client's
    assert reset.status_code == 200, reset.text
    new = reset.json()["run_id"]
    await parked(engine, "p-1")

    answer = await api.post(f"/v1/runs/p-1/{act}?run_id={old}", json=body)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["type"] == "Rejected"
    assert old in error["message"]
    # The new run is as it was: open, waiting for its signal, nothing sent to it.
    info = (await api.get("/v1/runs/p-1")).json()
    assert (info["run_id"], info["status"]) == (new, "parked")
    history = (await api.get(f"/v1/runs/p-1/history?run_id={new}")).json()
    new_types = [r["type"] for r in history if r["run_id"] == new]
    assert "CancelRequested" not in new_types and "SignalReceived" not in new_types


async def test_an_act_for_the_newest_run_by_its_id_goes_to_it(
    engine: Engine, api: httpx.AsyncClient
) -> None:
    await engine.start("hap.gated", 2, id="p-2")
    run_id = await parked(engine, "p-2")
    answer = await api.post(f"/v1/runs/p-2/signals/go?run_id={run_id}", json=5)
    assert answer.status_code == 200, answer.text
    assert answer.json()["run_id"] == run_id
    await engine.handle("p-2").result()
    unknown = await api.post("/v1/runs/p-2/cancel?run_id=nope", json={})
    assert unknown.status_code == 404, unknown.text


async def test_an_act_for_a_run_that_continued_as_new_is_not_sent_on(
    engine: Engine, api: httpx.AsyncClient
) -> None:
    await engine.start("hap.looping", 0, id="p-3")
    newest = await parked(engine, "p-3")
    history = (await api.get("/v1/runs/p-3/history")).json()
    first_run = history[0]["run_id"]
    assert first_run != newest
    answer = await api.post(f"/v1/runs/p-3/cancel?run_id={first_run}", json={})
    assert answer.status_code == 400, answer.text
    assert f"the newest run of 'p-3' is {newest!r}" in answer.json()["error"]["message"]
    info = (await api.get("/v1/runs/p-3")).json()
    assert (info["run_id"], info["status"]) == (newest, "parked")
