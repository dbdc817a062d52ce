"""The HTTP API in process: starting, listing, following and steering runs."""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from http_helpers import until

from fusee_runtime import Ctx, Engine, Exhausted, Fatal, RetryPolicy, Status, step, workflow
from fusee_runtime.control.openapi import OPENAPI
from fusee_runtime.journal.records import as_json

FLAKY = {"up": False}


@step
async def http_triple(x: int) -> int:
    return 3 * x


@step(retry=RetryPolicy(attempts=1, on_exhausted=Exhausted.PAUSE))
async def http_flaky() -> str:
    if not FLAKY["up"]:
        raise ConnectionError("the service is down")
    return "up"


@workflow
async def http_gate(ctx: Ctx, x: int) -> dict[str, Any]:
    got = await ctx.wait_for("go")
    return {"x": await http_triple(x), "got": got}


@workflow
async def http_quick(ctx: Ctx, x: int) -> int:
    return await http_triple(x)


@workflow
async def http_doomed(ctx: Ctx, _: None) -> None:
    raise Fatal("out of stock", details={"sku": "A-1"})


@workflow
async def http_pausing(ctx: Ctx, _: None) -> str:
    return await http_flaky()


async def test_start_answers_201_then_200_for_the_same_id(api: httpx.AsyncClient) -> None:
    first = await api.post("/v1/runs", json={"workflow": "http_quick", "input": 2, "id": "q-1"})
    assert first.status_code == 201
    run = first.json()
    assert (run["id"], run["workflow"], run["existed"]) == ("q-1", "http_quick", False)
    assert set(run) == {*OPENAPI["components"]["schemas"]["Run"]["required"], "existed"}

    again = await api.post("/v1/runs", json={"workflow": "http_quick", "input": 2, "id": "q-1"})
    assert again.status_code == 200
    assert (again.json()["run_id"], again.json()["existed"]) == (run["run_id"], True)

    fresh = await api.post(
        "/v1/runs", json={"workflow": "http_quick", "id": "q-1", "on_conflict": "new_run"}
    )
    assert fresh.status_code == 201
    assert fresh.json()["existed"] is True
    assert fresh.json()["run_id"] != run["run_id"]


async def test_start_without_an_id_takes_a_fresh_one(api: httpx.AsyncClient) -> None:
    answer = await api.post("/v1/runs", json={"workflow": "http_quick", "input": 1})
    assert answer.status_code == 201
    assert answer.json()["id"]


async def test_describe_list_and_history(api: httpx.AsyncClient, engine: Engine) -> None:
    for id in ("l-1", "l-2"):
        await api.post("/v1/runs", json={"workflow": "http_gate", "input": 1, "id": id})
    await api.post("/v1/runs", json={"workflow": "http_quick", "input": 1, "id": "l-3"})
    await engine.handle("l-3").result()

    described = await api.get("/v1/runs/l-1")
    assert described.status_code == 200
    assert (described.json()["id"], described.json()["workflow"]) == ("l-1", "http_gate")

    listed = await api.get("/v1/runs")
    assert [r["id"] for r in listed.json()] == ["l-3", "l-2", "l-1"]  # newest first
    by_workflow = await api.get("/v1/runs", params={"workflow": "http_gate", "limit": 1})
    assert [r["id"] for r in by_workflow.json()] == ["l-2"]
    completed = await api.get("/v1/runs", params={"status": "completed"})
    assert [r["id"] for r in completed.json()] == ["l-3"]

    history = await api.get("/v1/runs/l-3/history")
    assert history.status_code == 200
    # The JSON shape: ISO 8601 instants, integer operation numbers.
    assert history.json() == [as_json(r) for r in await engine.history("l-3")]
    started = history.json()[0]["started_at"]
    assert datetime.fromisoformat(started) == datetime.fromtimestamp(1_700_000_000, UTC)
    steps = [r for r in history.json() if r["type"] == "StepCompleted"]
    assert steps and all(type(r["seq"]) is int and r["op"] == str(r["seq"]) for r in steps)
    assert history.json()[0]["type"] == "RunStarted"


async def test_result_waits_for_the_run_then_answers_its_result(
    api: httpx.AsyncClient, engine: Engine
) -> None:
    await api.post("/v1/runs", json={"workflow": "http_gate", "input": 2, "id": "r-1"})
    await until(engine, "r-1", Status.PARKED)

    now = await api.get("/v1/runs/r-1/result")  # wait=0: answers at once
    assert now.status_code == 202
    assert now.json() == {
        "id": "r-1",
        "run_id": engine.runs.latest("r-1").run_id,
        "status": "parked",
    }

    # A day is past the longest wait: it is cut to RESULT_WAIT_S_MAX, and the run ends sooner.
    polling = asyncio.ensure_future(api.get("/v1/runs/r-1/result", params={"wait": 86400}))
    signalled = await api.post("/v1/runs/r-1/signals/go", json={"ok": True})
    assert signalled.status_code == 200
    assert signalled.json()["id"] == "r-1"
    answer = await polling
    assert answer.status_code == 200
    assert answer.json() == {
        "id": "r-1",
        "run_id": engine.runs.latest("r-1").run_id,
        "status": "completed",
        "result": {"x": 6, "got": {"ok": True}},
    }


async def test_a_signal_with_an_empty_body_is_null(api: httpx.AsyncClient) -> None:
    await api.post("/v1/runs", json={"workflow": "http_gate", "input": 1, "id": "s-1"})
    assert (await api.post("/v1/runs/s-1/signals/go")).status_code == 200
    answer = await api.get("/v1/runs/s-1/result", params={"wait": 30})
    assert answer.json()["result"] == {"x": 3, "got": None}


async def test_a_failed_run_answers_200_with_its_failure(api: httpx.AsyncClient) -> None:
    await api.post("/v1/runs", json={"workflow": "http_doomed", "id": "f-1"})
    answer = await api.get("/v1/runs/f-1/result", params={"wait": 30})
    assert answer.status_code == 200
    doc = answer.json()
    assert (doc["status"], doc["error"]) == ("failed", "Fatal: out of stock")
    failure = doc["failure"]
    assert (failure["kind"], failure["message"], failure["retryable"]) == (
        "Fatal",
        "out of stock",
        False,
    )
    assert failure["details"] == {"sku": "A-1"}
    assert "result" not in doc


@pytest.mark.parametrize(
    ("action", "status"), [("cancel", "cancelled"), ("terminate", "terminated")]
)
async def test_cancel_and_terminate_with_and_without_a_reason(
    api: httpx.AsyncClient, action: str, status: str
) -> None:
    # Without a reason the reason is the status: "cancelled", "terminated".
    cases = [("c-1", {"reason": "no longer needed"}, "no longer needed"), ("c-2", None, status)]
    for id, body, reason in cases:
        await api.post("/v1/runs", json={"workflow": "http_gate", "input": 1, "id": id})
        answer = await api.post(f"/v1/runs/{id}/{action}", json=body)
        assert answer.status_code == 200
        assert answer.json()["id"] == id
        result = await api.get(f"/v1/runs/{id}/result", params={"wait": 30})
        assert result.status_code == 200
        assert result.json() == {
            "id": id,
            "run_id": answer.json()["run_id"],
            "status": status,
            "error": f"run {id!r} was {status}: {reason}",
        }


async def test_a_paused_run_is_202_until_resumed(
    api: httpx.AsyncClient, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(FLAKY, "up", False)
    await api.post("/v1/runs", json={"workflow": "http_pausing", "id": "p-1"})
    await until(engine, "p-1", Status.PAUSED)
    waiting = await api.get("/v1/runs/p-1/result")
    assert waiting.status_code == 202
    assert waiting.json()["status"] == "paused"
    assert "the service is down" in waiting.json()["error"]

    FLAKY["up"] = True
    resumed = await api.post("/v1/runs/p-1/resume")
    assert resumed.status_code == 200
    answer = await api.get("/v1/runs/p-1/result", params={"wait": 30})
    assert (answer.status_code, answer.json()["result"]) == (200, "up")


@pytest.mark.parametrize("to", ["http_triple", 2])
async def test_reset_starts_a_new_run(api: httpx.AsyncClient, engine: Engine, to: Any) -> None:
    await api.post("/v1/runs", json={"workflow": "http_quick", "input": 5, "id": "z-1"})
    old = await engine.handle("z-1").result()
    before = (await api.get("/v1/runs/z-1")).json()["run_id"]
    answer = await api.post("/v1/runs/z-1/reset", json={"to": to})
    assert answer.status_code == 200
    assert answer.json()["id"] == "z-1"
    assert answer.json()["run_id"] != before
    result = await api.get("/v1/runs/z-1/result", params={"wait": 30})
    assert result.json()["result"] == old


async def test_health_and_the_openapi_document(api: httpx.AsyncClient) -> None:
    health = await api.get("/v1/health")
    assert health.status_code == 200
    assert health.json()["ok"] is True
    assert health.json()["pid"] == os.getpid()
    document = await api.get("/v1/openapi.json")
    assert document.status_code == 200
    assert document.json() == OPENAPI


@workflow
async def http_parent(ctx: Ctx, n: int) -> list[int]:
    kids = await ctx.all(
        [ctx.start_child(http_quick, f"{ctx.workflow_id}-{i}", i) for i in range(n)]
    )
    return list(await ctx.all([k.result() for k in kids]))


async def test_a_parents_children_are_listed_with_their_parent(api: httpx.AsyncClient) -> None:
    started = await api.post("/v1/runs", json={"workflow": "http_parent", "input": 2, "id": "pa"})
    assert started.status_code == 201
    done = await api.get("/v1/runs/pa/result", params={"wait": "10"})
    assert done.json()["result"] == [0, 3]
    parent = (await api.get("/v1/runs/pa")).json()
    assert parent["parent"] is None
    kids = (await api.get("/v1/runs", params={"parent": "pa"})).json()
    assert sorted(k["id"] for k in kids) == ["pa-0", "pa-1"]
    assert {(k["parent"]["id"], k["parent"]["run_id"]) for k in kids} == {("pa", parent["run_id"])}
    assert (await api.get("/v1/runs", params={"parent": "nobody"})).json() == []
    history = (await api.get("/v1/runs/pa/history")).json()
    assert [r["type"] for r in history].count("ChildClosed") == 2


@workflow
async def http_tagged(ctx: Ctx, attributes: dict[str, Any]) -> None:
    ctx.set_attributes(attributes)


async def test_runs_are_listed_by_their_search_attributes(api: httpx.AsyncClient) -> None:
    for n, amount in enumerate([50, 150, 250]):
        doc = {"workflow": "http_tagged", "input": {"team": "core", "amount": amount}}
        assert (await api.post("/v1/runs", json={**doc, "id": f"t-{n}"})).status_code == 201
    got = await api.get("/v1/runs", params=[("where", "team=core"), ("where", "amount>=150")])
    assert got.status_code == 200, got.text
    assert [r["id"] for r in got.json()] == ["t-2", "t-1"]
    assert got.json()[0]["attributes"] == {"team": "core", "amount": 250}
    bad = await api.get("/v1/runs", params={"where": "amount"})
    assert bad.status_code == 400
    assert bad.json()["error"]["message"].startswith("a where condition is KEY=VALUE"), bad.json()
