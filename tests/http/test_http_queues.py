"""Flow control over HTTP: a start that waits in a queue, is debounced or throttled
(`POST /v1/runs`), the queues listed and sized (`GET /v1/queues`, `PUT
/v1/queues/{name}`), and their gauges on `/metrics`. Every answer is checked against
the OpenAPI document by the test that runs last (tests/http/conftest.py)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from http_helpers import error_of, until
from prometheus_client.parser import text_string_to_metric_families

from fusee_runtime import Ctx, Engine, Status, workflow


@workflow(name="hq.wait")
async def hq_wait(ctx: Ctx, _: Any) -> Any:
    return await ctx.wait_for("go")


@workflow(name="hq.echo")
async def hq_echo(ctx: Ctx, value: Any) -> Any:
    return value


def _queue(name: str, **sizes: Any) -> dict[str, Any]:
    """A queue's row as `GET /v1/queues` lists it."""
    row = {"name": name, "concurrency": 1, "per_key": None, "running": 0, "queued": 0}
    return {**row, "keys": 0, "set": False, **sizes}


async def _gauges(api: httpx.AsyncClient) -> dict[tuple[str, tuple[Any, ...]], float]:
    answer = await api.get("/metrics")
    assert answer.status_code == 200
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(answer.text)
        for s in family.samples
    }


async def test_a_run_waits_queued_until_its_queue_is_sized_to_let_it_in(
    api: httpx.AsyncClient, engine: Engine
) -> None:
    assert (await api.get("/v1/queues")).json() == []
    paused = await api.put("/v1/queues/hq.q", json={"concurrency": 0, "per_key": None})
    assert (paused.status_code, paused.json()) == (200, _queue("hq.q", concurrency=0, set=True))
    for id, priority in (("q-1", 0), ("q-2", 5)):
        body = {"workflow": "hq.wait", "id": id, "queue": "hq.q", "queue_key": "acme"}
        started = await api.post("/v1/runs", json={**body, "priority": priority})
        assert (started.status_code, started.json()["status"]) == (201, "queued"), started.text
    # The higher priority goes first within its key.
    waits = {id: (await api.get(f"/v1/runs/{id}")).json()["waiting"] for id in ("q-1", "q-2")}
    assert waits == {
        "q-1": [
            {"kind": "queue", "name": "hq.q", "until": None, "detail": "2nd of 2 in key 'acme'"}
        ],
        "q-2": [
            {"kind": "queue", "name": "hq.q", "until": None, "detail": "1st of 2 in key 'acme'"}
        ],
    }
    queued = (await api.get("/v1/runs", params={"status": "queued"})).json()
    assert [run["id"] for run in queued] == ["q-2", "q-1"]
    listed = (await api.get("/v1/queues")).json()
    assert listed == [_queue("hq.q", concurrency=0, queued=2, keys=1, set=True)]
    gauges = await _gauges(api)
    assert gauges[("fusee_queue_queued", (("queue", "hq.q"),))] == 2
    assert gauges[("fusee_queue_running", (("queue", "hq.q"),))] == 0
    assert gauges[("fusee_runs_open", (("status", "queued"),))] == 2

    grown = await api.put("/v1/queues/hq.q", json={"concurrency": 1, "per_key": 1})
    assert grown.status_code == 200, grown.text
    assert (grown.json()["concurrency"], grown.json()["per_key"]) == (1, 1)
    await until(engine, "q-2", Status.PARKED)  # let in, it waits for "go"
    assert (await api.get("/v1/runs/q-1")).json()["status"] == "queued"
    listed = (await api.get("/v1/queues")).json()
    assert listed == [
        _queue("hq.q", concurrency=1, per_key=1, running=1, queued=1, keys=1, set=True)
    ]
    gauges = await _gauges(api)
    assert gauges[("fusee_queue_running", (("queue", "hq.q"),))] == 1
    assert gauges[("fusee_queue_queued", (("queue", "hq.q"),))] == 1

    await api.post("/v1/runs/q-2/signals/go", json="second")
    assert await engine.handle("q-2").result() == "second"
    await until(engine, "q-1", Status.PARKED)  # its place was given back
    await api.post("/v1/runs/q-1/signals/go", json="first")
    assert await engine.handle("q-1").result() == "first"


async def test_a_debounced_start_answers_with_the_burst_s_run(
    api: httpx.AsyncClient, engine: Engine
) -> None:
    body = {"workflow": "hq.echo", "debounce": 3600, "debounce_key": "doc-7"}
    first = await api.post("/v1/runs", json={**body, "id": "d-1", "input": 1})
    assert (first.status_code, first.json()["status"]) == (201, "scheduled"), first.text
    assert [w["kind"] for w in first.json()["waiting"]] == ["begin"]
    joined = await api.post("/v1/runs", json={**body, "id": "d-2", "input": 2})
    assert joined.status_code == 200, joined.text
    doc = joined.json()
    assert (doc["id"], doc["run_id"], doc["existed"]) == ("d-1", first.json()["run_id"], True)
    missing = await api.get("/v1/runs/d-2")
    assert missing.status_code == 404  # the start joined d-1's run: it made none


async def test_a_throttled_start_beyond_its_window_is_scheduled_not_dropped(
    api: httpx.AsyncClient, engine: Engine
) -> None:
    throttle = {"n": 1, "per": 3600, "key": "acme", "name": None}
    first = await api.post(
        "/v1/runs", json={"workflow": "hq.echo", "id": "t-1", "throttle": throttle}
    )
    assert first.status_code == 201, first.text
    assert first.json()["status"] != "scheduled"
    assert await engine.handle("t-1").result() is None
    body = {"workflow": "hq.echo", "id": "t-2", "input": 2, "throttle": throttle}
    second = await api.post("/v1/runs", json=body)
    assert (second.status_code, second.json()["status"]) == (201, "scheduled"), second.text
    (wait,) = second.json()["waiting"]
    assert wait["kind"] == "begin" and wait["until"] is not None
    other = {**throttle, "key": "globex"}  # a key of its own: a window of its own
    third = await api.post("/v1/runs", json={"workflow": "hq.echo", "id": "t-3", "throttle": other})
    assert third.json()["status"] != "scheduled", third.text


@pytest.mark.parametrize(
    ("body", "type", "message"),
    [
        ({"priority": "high", "queue": "hq.q"}, "BadRequest", "the field 'priority' is a whole"),
        ({"priority": 1.5, "queue": "hq.q"}, "BadRequest", "'priority' is a whole number, not 1.5"),
        ({"queue": 7}, "BadRequest", "the field 'queue' is a string"),
        ({"queue_key": "acme"}, "Rejected", "queue_key and priority go with a queue"),
        ({"queue": "hq.q", "priority": 2**40}, "Rejected", "priority is a whole number from"),
        ({"debounce": "soon"}, "BadRequest", "the field 'debounce' is a number of seconds"),
        ({"debounce": 0}, "Rejected", "debounce is a positive duration"),
        ({"debounce_max": 60}, "Rejected", "debounce_key and debounce_max go with debounce"),
        ({"debounce": 5, "start_delay": 5}, "Rejected", "debounce goes with no"),
        ({"throttle": "10/60"}, "BadRequest", "the field 'throttle' is an object (n, per"),
        ({"throttle": {"n": 1}}, "BadRequest", "the field 'throttle' has no 'per' field"),
        ({"throttle": {"n": 1, "per": 1, "burst": 2}}, "BadRequest", "unknown field 'burst'"),
        ({"throttle": {"n": "1", "per": 1}}, "BadRequest", "'throttle.n' is a whole number"),
        ({"throttle": {"n": 1, "per": None}}, "BadRequest", "'throttle.per' are numbers"),
        ({"throttle": {"n": 1, "per": 1, "key": 3}}, "BadRequest", "'throttle.key' is a string"),
        ({"throttle": {"n": 0, "per": 60}}, "Rejected", "throttle: n is a whole number from 1"),
        ({"throttle": {"n": 1, "per": -1}}, "Rejected", "throttle: per is a positive duration"),
    ],
)
async def test_a_bad_flow_control_field_of_a_start_is_a_400_naming_it(
    api: httpx.AsyncClient, engine: Engine, body: dict[str, Any], type: str, message: str
) -> None:
    answer = await api.post("/v1/runs", json={"workflow": "hq.echo", "id": "bad", **body})
    error_of(answer, 400, type, message)
    assert (await api.get("/v1/runs/bad")).status_code == 404  # nothing was started


@pytest.mark.parametrize(
    ("body", "type", "message"),
    [
        ({"concurrency": 2}, "BadRequest", "the body has no 'per_key' field"),
        ({"concurrency": 2.5, "per_key": None}, "BadRequest", "'concurrency' is a whole number"),
        ({"concurrency": True, "per_key": None}, "BadRequest", "'concurrency' is a whole number"),
        ({"concurrency": 1, "per_key": 1, "fair": 1}, "BadRequest", "unknown field 'fair'"),
        ({"concurrency": -1, "per_key": None}, "Rejected", "concurrency is None or a whole"),
        ({"concurrency": 1, "per_key": 10**7}, "Rejected", "per_key is None or a whole number"),
    ],
)
async def test_a_bad_queue_size_is_a_400_and_sets_nothing(
    api: httpx.AsyncClient, body: dict[str, Any], type: str, message: str
) -> None:
    error_of(await api.put("/v1/queues/hq.sized", json=body), 400, type, message)
    assert (await api.get("/v1/queues")).json() == []


async def test_the_queues_take_no_query_parameter(api: httpx.AsyncClient) -> None:
    error_of(await api.get("/v1/queues", params={"name": "x"}), 400, "BadRequest", "unknown")
