"""`POST /v1/batches` and `GET /v1/batches/{id}` (issue 38): a batch over HTTP, its dry run,
and the 400s of a body that is not one."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from fusee_runtime import Ctx, Engine, workflow


@workflow(name="hb.wait")
async def hb_wait(ctx: Ctx, n: int) -> Any:
    return [n, await ctx.wait_for("go")]


async def _parked(engine: Engine, n: int) -> None:
    await asyncio.gather(*(engine.start(hb_wait, i, id=f"hb-{i}") for i in range(n)))
    await engine.wait_until(
        lambda: all(engine.runs.latest(f"hb-{i}").live.parked for i in range(n))
    )


async def test_a_batch_over_http_signals_each_run_and_describes_itself(
    api: httpx.AsyncClient, engine: Engine
) -> None:
    await _parked(engine, 4)
    dry = await api.post(
        "/v1/batches", json={"action": "cancel", "status": "open", "dry_run": True}
    )
    assert (dry.status_code, dry.json()["count"]) == (200, 4)
    body = {"action": "signal", "workflow": "hb.wait", "signal": "go", "value": 5, "id": "hb"}
    made = await api.post("/v1/batches", json=body)
    assert made.status_code == 201, made.text
    assert made.json()["id"] == "hb"
    assert [await engine.handle(f"hb-{i}").result() for i in range(4)] == [[i, 5] for i in range(4)]
    await engine.handle("hb").result()
    doc = (await api.get("/v1/batches/hb")).json()
    assert (doc["status"], doc["outcomes"]) == ("completed", {"signalled": 4})
    assert sorted(run["id"] for run in doc["runs"]) == [f"hb-{i}" for i in range(4)]
    assert (await api.get("/v1/batches/nope")).status_code == 404
    assert (await api.get("/v1/batches/hb-0")).status_code == 404  # a run, not a batch


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "the body has no 'action' field"),
        ({"action": "cancel", "rate": "fast"}, "the field 'rate' is a number"),
        ({"action": "cancel", "where": [1]}, "the field 'where' is an object or a list"),
        ({"action": "cancel", "dry_run": 1}, "the field 'dry_run' is a boolean"),
        ({"action": "reset", "to": True}, "the field 'to' is an operation number"),
        ({"action": "cancel", "nope": 1}, "unknown field 'nope'"),
        ({"action": "explode"}, "a batch does one of"),
        ({"action": "signal", "status": "open"}, "a batch that signals takes --signal NAME"),
        ({"action": "cancel"}, "a batch takes a filter"),
    ],
)
async def test_a_body_that_is_no_batch_is_400(
    api: httpx.AsyncClient, engine: Engine, body: dict[str, Any], message: str
) -> None:
    answer = await api.post("/v1/batches", json=body)
    assert answer.status_code == 400, answer.text
    assert message in answer.json()["error"]["message"]
    assert await engine.list() == []
