"""Completion URLs, query and update handlers, and cron schedules over HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from http_helpers import error_of

from fusee_runtime import Ctx, Engine, StepFailed, workflow
from fusee_runtime.completions import Completion
from fusee_runtime.dsl import registry

sent: list[Completion] = []


@workflow
async def http_approval(ctx: Ctx, what: str) -> dict[str, Any]:
    try:
        verdict = await ctx.await_completion("review", sent.append)
    except StepFailed as e:
        return {"what": what, "rejected": e.failure.message}
    return {"what": what, "verdict": verdict}


@workflow
async def http_counter(ctx: Ctx, start: int) -> int:
    ctx.on_query("total", lambda times: start * (1 if times is None else times))
    ctx.on_query("broken", lambda _: 1 / 0)
    ctx.on_update("add", lambda n: start + n)
    await ctx.wait_for("stop")
    return start


@pytest.fixture(autouse=True)
def nothing_sent() -> None:
    sent.clear()


async def issued(api: httpx.AsyncClient, engine: Engine, id: str) -> Completion:
    """Starts an approval and returns the completion its step handed out."""
    n = len(sent) + 1
    await api.post("/v1/runs", json={"workflow": "http_approval", "input": "invoice", "id": id})
    await engine.wait_until(lambda: len(sent) >= n)
    return sent[n - 1]


async def result_of(api: httpx.AsyncClient, id: str) -> Any:
    answer = await api.get(f"/v1/runs/{id}/result", params={"wait": 30})
    assert answer.status_code == 200, answer.text
    return answer.json()["result"]


# -- completions ------------------------------------------------------------------------


async def test_complete_finishes_the_step_with_the_body(
    api: httpx.AsyncClient, engine: Engine
) -> None:
    completion = await issued(api, engine, "a-1")
    answer = await api.post(f"/v1/complete/{completion.token}", json={"approved": True})
    assert (answer.status_code, answer.json()) == (200, {"ok": True})
    assert await result_of(api, "a-1") == {"what": "invoice", "verdict": {"approved": True}}

    again = await api.post(f"/v1/complete/{completion.token}", json=1)
    error_of(again, 400, "Rejected", "cannot finish: the run is completed")


async def test_an_empty_completion_body_is_null(api: httpx.AsyncClient, engine: Engine) -> None:
    completion = await issued(api, engine, "a-2")
    assert (await api.post(f"/v1/complete/{completion.token}")).status_code == 200
    assert await result_of(api, "a-2") == {"what": "invoice", "verdict": None}


@pytest.mark.parametrize("body", [{"message": "too expensive"}, "too expensive"])
async def test_fail_takes_an_object_or_a_string(
    api: httpx.AsyncClient, engine: Engine, body: Any
) -> None:
    completion = await issued(api, engine, "a-3")
    answer = await api.post(f"/v1/fail/{completion.token}", json=body)
    assert (answer.status_code, answer.json()) == (200, {"ok": True})
    assert await result_of(api, "a-3") == {"what": "invoice", "rejected": "too expensive"}


async def test_the_completion_url_is_the_complete_route(
    api: httpx.AsyncClient, engine: Engine
) -> None:
    engine.http_url = str(api.base_url).rstrip("/")
    completion = await issued(api, engine, "a-4")
    assert completion.url == f"{engine.http_url}/v1/complete/{completion.token}"
    assert (await api.post(completion.url, json="yes")).status_code == 200
    assert await result_of(api, "a-4") == {"what": "invoice", "verdict": "yes"}


# -- queries and updates ----------------------------------------------------------------


async def test_a_query_answers_with_its_handler(api: httpx.AsyncClient) -> None:
    await api.post("/v1/runs", json={"workflow": "http_counter", "input": 5, "id": "h-1"})
    answer = await api.post("/v1/runs/h-1/queries/total")
    assert (answer.status_code, answer.json()) == (200, {"result": 5})
    answer = await api.post("/v1/runs/h-1/queries/total", json=3)
    assert answer.json() == {"result": 15}


async def test_a_query_without_a_handler_or_whose_handler_fails_is_400(
    api: httpx.AsyncClient,
) -> None:
    await api.post("/v1/runs", json={"workflow": "http_counter", "input": 5, "id": "h-2"})
    missing = await api.post("/v1/runs/h-2/queries/nope")
    error_of(missing, 400, "Rejected", "'nope'", "total")
    broken = await api.post("/v1/runs/h-2/queries/broken")
    error_of(broken, 400, "Rejected", "ZeroDivisionError")
    error_of(await api.post("/v1/runs/zz/queries/total"), 404, "NotFound", "'zz'")


async def test_an_update_answers_and_is_idempotent_on_its_id(api: httpx.AsyncClient) -> None:
    await api.post("/v1/runs", json={"workflow": "http_counter", "input": 5, "id": "h-3"})
    body = {"arg": 2, "update_id": "u-1"}
    first = await api.post("/v1/runs/h-3/updates/add", json=body)
    assert (first.status_code, first.json()) == (200, {"result": 7})
    again = await api.post("/v1/runs/h-3/updates/add", json=body)
    assert again.json() == first.json()


async def test_an_update_body_of_the_wrong_shape_is_400_and_an_unknown_run_404(
    api: httpx.AsyncClient,
) -> None:
    await api.post("/v1/runs", json={"workflow": "http_counter", "input": 5, "id": "h-4"})
    shape = await api.post("/v1/runs/h-4/updates/add", json={"value": 2})
    error_of(shape, 400, "BadRequest", "unknown field 'value'; fields: arg, update_id")
    wrong_id = await api.post("/v1/runs/h-4/updates/add", json={"arg": 2, "update_id": 9})
    error_of(wrong_id, 400, "BadRequest", "'update_id' is a string")
    error_of(await api.post("/v1/runs/zz/updates/add"), 404, "NotFound", "'zz'")


# -- schedules --------------------------------------------------------------------------


@pytest.fixture
def nightly() -> Iterator[str]:
    """A cron workflow, registered for this test only: engines elsewhere must not fire it."""

    async def http_nightly(ctx: Ctx, at: str) -> str:
        return at

    wf = workflow(name="http_nightly", cron="0 3 * * *")(http_nightly)
    try:
        yield wf.name
    finally:
        registry().pop(wf.name, None)


async def test_schedules_list_pause_unpause_and_trigger(
    api: httpx.AsyncClient, nightly: str
) -> None:
    listed = await api.get("/v1/schedules")
    assert listed.status_code == 200
    (mine,) = [s for s in listed.json() if s["workflow"] == nightly]
    assert (mine["cron"], mine["paused"]) == ("0 3 * * *", False)

    paused = await api.post(f"/v1/schedules/{nightly}/pause")
    assert (paused.status_code, paused.json()["paused"]) == (200, True)
    # Other test modules register cron workflows too: only ours is looked at.
    listed = await api.get("/v1/schedules")
    assert [s["paused"] for s in listed.json() if s["workflow"] == nightly] == [True]
    unpaused = await api.post(f"/v1/schedules/{nightly}/unpause", json={})
    assert (unpaused.status_code, unpaused.json()["paused"]) == (200, False)

    triggered = await api.post(f"/v1/schedules/{nightly}/trigger")
    assert triggered.status_code == 201
    run = triggered.json()
    assert run["workflow"] == nightly
    assert isinstance(await result_of(api, run["id"]), str)


async def test_a_schedule_that_does_not_exist_is_404_or_400(
    api: httpx.AsyncClient, nightly: str
) -> None:
    error_of(await api.post("/v1/schedules/nope/pause"), 404, "NotFound", "'nope'")
    no_cron = await api.post("/v1/schedules/http_counter/trigger")
    error_of(no_cron, 400, "Rejected", "no cron schedule")
    body = await api.post(f"/v1/schedules/{nightly}/pause", json={"now": True})
    error_of(body, 400, "BadRequest", "unknown field 'now'")
