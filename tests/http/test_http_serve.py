"""`fusee serve --http`: the API on a real socket, served by a child process.

Every answer here must be JSON and none a 5xx: the clients' response hook
fails the call that gets one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import httpx
import orjson
import pytest
from http_helpers import RawRequest, Seen, Served, error_of, noting

TOKEN = "t0ken-for-the-child"


@pytest.fixture(scope="module")
def served(serve: Callable[..., Served]) -> Served:
    """One `fusee serve` for the module's tests, without a token (loopback)."""
    return serve()


@pytest.fixture
async def client_at(seen: list[Seen]) -> AsyncIterator[Callable[..., httpx.AsyncClient]]:
    """Makes httpx clients of a URL; `headers` go with every request."""
    clients: list[httpx.AsyncClient] = []

    async def never_a_5xx(response: httpx.Response) -> None:
        assert response.status_code < 500, response.text
        assert response.headers["content-type"] == "application/json", response.text

    def make(url: str, **headers: str) -> httpx.AsyncClient:
        hooks = {"response": [noting(seen), never_a_5xx]}
        clients.append(httpx.AsyncClient(base_url=url, headers=headers, event_hooks=hooks))
        return clients[-1]

    yield make
    for client in clients:
        await client.aclose()


@pytest.fixture
def api(served: Served, client_at: Callable[..., httpx.AsyncClient]) -> httpx.AsyncClient:
    return client_at(served.url)


def test_it_says_where_it_serves(served: Served) -> None:
    event = served.serving
    assert event["pid"] == served.child.pid
    assert event["home"] == str(served.home)
    host, _, port = served.url.removeprefix("http://").rpartition(":")
    assert (host, port.isdigit(), port != "0") == ("127.0.0.1", True, True)


async def test_a_start_then_a_result_that_waits_for_it(api: httpx.AsyncClient) -> None:
    body = {"workflow": "http_served_quick", "input": 4, "id": "q-1"}
    started = await api.post("/v1/runs", json=body)
    assert (started.status_code, started.json()["existed"]) == (201, False)
    answer = await api.get("/v1/runs/q-1/result", params={"wait": 30})
    assert answer.status_code == 200
    assert (answer.json()["status"], answer.json()["result"]) == ("completed", 8)
    again = await api.post("/v1/runs", json=body)
    assert (again.status_code, again.json()["existed"]) == (200, True)


async def test_a_signal_releases_a_wait_for(api: httpx.AsyncClient) -> None:
    await api.post("/v1/runs", json={"workflow": "http_served_gate", "input": 1, "id": "g-1"})
    polling = asyncio.ensure_future(api.get("/v1/runs/g-1/result", params={"wait": 30}))
    signalled = await api.post("/v1/runs/g-1/signals/go", json={"approved": True})
    assert signalled.status_code == 200
    answer = await polling
    assert answer.status_code == 200
    assert answer.json()["result"] == {"x": 2, "got": {"approved": True}}


async def test_describe_list_and_history(api: httpx.AsyncClient) -> None:
    await api.post("/v1/runs", json={"workflow": "http_served_quick", "input": 1, "id": "d-1"})
    await api.get("/v1/runs/d-1/result", params={"wait": 30})
    described = await api.get("/v1/runs/d-1")
    assert (described.status_code, described.json()["status"]) == (200, "completed")
    listed = await api.get("/v1/runs", params={"workflow": "http_served_quick"})
    assert "d-1" in [run["id"] for run in listed.json()]
    history = await api.get("/v1/runs/d-1/history")
    types = [record["type"] for record in history.json()]
    assert (types[0], types[-1]) == ("RunStarted", "RunCompleted")


async def test_bad_requests_are_json_4xx(api: httpx.AsyncClient) -> None:
    malformed = await api.post("/v1/runs", content=b'{"workflow": "http_served_quick",')
    error_of(malformed, 400, "BadRequest", "the body is not JSON", "line 1")
    error_of(await api.get("/v1/runs/nobody"), 404, "NotFound", "'nobody'")
    error_of(await api.get("/v1/runs/nobody/result"), 404, "NotFound", "'nobody'")
    unknown = await api.post("/v1/runs", json={"workflow": "http_served_nope"})
    error_of(unknown, 404, "NotFound", "http_served_gate", "http_served_quick")
    error_of(await api.put("/v1/runs"), 405, "MethodNotAllowed")
    error_of(await api.get("/v1/elsewhere"), 404, "NotFound", "no route")
    shape = await api.post("/v1/runs", json={"workflow": "http_served_quick", "id": 3})
    error_of(shape, 400, "BadRequest", "'id' is a string")


async def test_with_a_token_every_request_needs_it(
    serve: Callable[..., Served], client_at: Callable[..., httpx.AsyncClient]
) -> None:
    served = serve("--token", TOKEN)
    stranger = client_at(served.url)
    for path in ("/v1/health", "/v1/runs", "/v1/openapi.json"):
        answer = await stranger.get(path)
        error_of(answer, 401, "Unauthorized")
        assert answer.headers["www-authenticate"] == "Bearer"
    wrong = client_at(served.url, Authorization="Bearer not-it")
    error_of(await wrong.get("/v1/health"), 401, "Unauthorized")
    trusted = client_at(served.url, Authorization=f"Bearer {TOKEN}")
    health = await trusted.get("/v1/health")
    assert (health.status_code, health.json()["pid"]) == (200, served.child.pid)


async def test_sigterm_answers_an_open_long_poll_and_exits_0(
    serve: Callable[..., Served], client_at: Callable[..., httpx.AsyncClient]
) -> None:
    served = serve()
    api = client_at(served.url)
    await api.post("/v1/runs", json={"workflow": "http_served_gate", "input": 1, "id": "s-1"})
    polling = await RawRequest.send(served.url, "/v1/runs/s-1/result?wait=300")
    # Answered after the poll reached the server: the poll is being served.
    assert (await api.get("/v1/health")).status_code == 200
    code, events, stderr = await asyncio.to_thread(served.stop)
    assert code == 0, stderr
    status, body = await polling.answer()
    assert (status, body["id"]) == (202, "s-1")
    assert body["status"] in ("running", "parked")
    names = [e["event"] for e in events]
    assert "stopping" in names and names[-1] == "stopped", names


def completion_url(served: Served) -> str:
    """The next completion URL the child logs (its `log` events, on its stdout)."""
    assert served.child.stdout is not None
    for line in served.child.stdout:
        event = orjson.loads(line)
        if event["event"] == "log" and "completion url " in event["message"]:
            return event["message"].split()[-1]
    raise AssertionError("the server ended before logging a completion URL")


async def test_the_completion_url_finishes_an_await_completion_step(
    serve: Callable[..., Served], client_at: Callable[..., httpx.AsyncClient]
) -> None:
    served = serve()
    api = client_at(served.url)
    body = {"workflow": "http_served_review", "input": "q3.pdf", "id": "c-1"}
    assert (await api.post("/v1/runs", json=body)).status_code == 201
    url = await asyncio.to_thread(completion_url, served)
    assert url.startswith(f"{served.url}/v1/complete/")
    done = await api.post(url, json={"ok": True})
    assert (done.status_code, done.json()) == (200, {"ok": True})
    result = await api.get("/v1/runs/c-1/result", params={"wait": 30})
    assert result.json()["result"] == {"doc": "q3.pdf", "verdict": {"ok": True}}
    again = await api.post(url, json=1)
    error_of(again, 400, "Rejected", "the run is completed")

    body = {"workflow": "http_served_review", "input": "q4.pdf", "id": "c-2"}
    assert (await api.post("/v1/runs", json=body)).status_code == 201
    fail_url = (await asyncio.to_thread(completion_url, served)).replace("/complete/", "/fail/")
    failed = await api.post(fail_url, json={"message": "not good enough"})
    assert failed.status_code == 200, failed.text
    result = await api.get("/v1/runs/c-2/result", params={"wait": 30})
    assert result.json()["status"] == "failed"
    assert "not good enough" in result.json()["error"]
    forged = await api.post(url[:-4] + "0000", json=1)
    error_of(forged, 404, "NotFound", "not a completion token of this home")


async def test_every_other_endpoint_over_the_real_socket(
    serve: Callable[..., Served], client_at: Callable[..., httpx.AsyncClient]
) -> None:
    """Each route of `ROUTES` not exercised above, once, against the child."""
    api = client_at(serve().url)
    for wid in ("e-1", "e-2", "e-3"):
        body = {"workflow": "http_served_gate", "input": 5, "id": wid}
        assert (await api.post("/v1/runs", json=body)).status_code == 201
    queried = await api.post("/v1/runs/e-1/queries/x", json=None)
    assert (queried.status_code, queried.json()) == (200, {"result": 5})
    update = await api.post("/v1/runs/e-1/updates/limit", json={"arg": 9})
    assert (update.status_code, update.json()) == (200, {"result": 5})
    error_of(await api.post("/v1/runs/e-1/resume"), 400, "Rejected", "only a paused or stuck")
    reset = await api.post("/v1/runs/e-1/reset", json={"to": 1})
    assert (reset.status_code, reset.json()["id"]) == (200, "e-1")
    cancelled = await api.post("/v1/runs/e-2/cancel", json={"reason": "enough"})
    assert cancelled.status_code == 200, cancelled.text
    terminated = await api.post("/v1/runs/e-3/terminate", json={})
    assert (terminated.status_code, terminated.json()["status"]) == (200, "terminated")
    result = await api.get("/v1/runs/e-2/result", params={"wait": 30})
    assert result.json()["status"] == "cancelled"

    schedules = await api.get("/v1/schedules")
    assert [s["workflow"] for s in schedules.json()] == ["http_served_nightly"]
    paused = await api.post("/v1/schedules/http_served_nightly/pause")
    assert (paused.status_code, paused.json()["paused"]) == (200, True)
    unpaused = await api.post("/v1/schedules/http_served_nightly/unpause")
    assert (unpaused.status_code, unpaused.json()["paused"]) == (200, False)
    triggered = await api.post("/v1/schedules/http_served_nightly/trigger")
    assert triggered.status_code == 201
    assert triggered.json()["id"].startswith("http_served_nightly@")
    no_cron = await api.post("/v1/schedules/http_served_gate/trigger")
    error_of(no_cron, 400, "Rejected", "has no cron schedule")
    document = await api.get("/v1/openapi.json")
    assert document.json()["openapi"].startswith("3.1")
