"""`POST /v1/objects/{object}/{key}/calls/{name}` and `GET /v1/objects/{object}/{key}`
(issue 39, item 1): a virtual object's key called over HTTP, once per call id; its state
and its queue of calls waiting their turn, also on the web UI's pages; the errors of a
call that is not one."""

from __future__ import annotations

import asyncio
import re

import httpx

from fusee_runtime import Ctx, Engine, handler, object, step

GATE = asyncio.Event()
INSIDE = asyncio.Event()


@step(name="ho.hold")
async def hold(n: int) -> int:
    INSIDE.set()
    await GATE.wait()
    return n


@object(name="ho.box")
class Box:
    def __init__(self) -> None:
        self.n = 0

    @handler
    async def add(self, ctx: Ctx, n: int) -> int:
        self.n += await hold(n)
        return self.n

    @handler(shared=True)
    def peek(self, ctx: Ctx) -> int:
        return self.n


async def test_a_key_is_called_described_and_queued_over_http(
    api: httpx.AsyncClient, engine: Engine
) -> None:
    GATE.set()
    call = await api.post("/v1/objects/ho.box/b1/calls/add", json={"arg": 2, "call_id": "c-1"})
    assert (call.status_code, call.json()) == (200, {"result": 2}), call.text
    again = await api.post("/v1/objects/ho.box/b1/calls/add", json={"arg": 2, "call_id": "c-1"})
    assert again.json() == {"result": 2}  # the same call id: applied once
    assert (await api.post("/v1/objects/ho.box/b1/calls/peek")).json() == {"result": 2}

    # Two calls wait behind one held in its step: the queue shows them in their order.
    GATE.clear()
    INSIDE.clear()
    first = asyncio.ensure_future(api.post("/v1/objects/ho.box/b1/calls/add", json={"arg": 10}))
    await INSIDE.wait()
    later = [
        asyncio.ensure_future(
            api.post("/v1/objects/ho.box/b1/calls/add", json={"arg": n, "call_id": f"q-{n}"})
        )
        for n in (20, 30)
    ]
    queued = engine.runs.latest("object:ho.box:b1")
    await engine.wait_until(lambda: {"q-20", "q-30"} <= set(queued.updates_accepted))
    doc = (await api.get("/v1/objects/ho.box/b1")).json()
    assert doc["state"] == {"n": 2} and doc["applied"] == 1
    assert [(c["handler"], c["arg"]) for c in doc["queue"]] == [
        ("add", 10),
        ("add", 20),
        ("add", 30),
    ]
    assert [c["call_id"] for c in doc["queue"][1:]] == ["q-20", "q-30"]
    # The web UI shows the same: the key's run page, its state and queue; the keys.
    page = (await api.get("/runs/object:ho.box:b1")).text
    assert "Object ho.box, key b1" in page and "Queue (3; 1 applied)" in page
    turns = re.findall(r"<tr><td>(\d+)</td><td>add</td>", page)
    assert turns == ["1", "2", "3"] and "q-20" in page and "q-30" in page
    keys = (await api.get("/objects")).text
    assert 'href="/runs/object%3Aho.box%3Ab1"' in keys and ">object:ho.box:b1</a>" in keys
    GATE.set()
    assert [(await f).json()["result"] for f in (first, *later)] == [12, 32, 62]
    doc = (await api.get("/v1/objects/ho.box/b1")).json()
    assert (doc["state"], doc["queue"], doc["applied"]) == ({"n": 62}, [], 4)


async def test_what_is_not_a_call_is_refused(api: httpx.AsyncClient, engine: Engine) -> None:
    cases = [
        ("/v1/objects/ho.box/b2/calls/nope", {}, 404, "no handler 'nope'"),
        ("/v1/objects/ho.none/b2/calls/add", {}, 404, "no object 'ho.none'"),
        ("/v1/objects/ho.box/b2/calls/add", {"arg": 1, "other": 2}, 400, "unknown field"),
        ("/v1/objects/ho.box/b2/calls/add", {"call_id": 3}, 400, "call_id"),
    ]
    for path, body, status, said in cases:
        r = await api.post(path, json=body)
        assert (r.status_code, said in r.json()["error"]["message"]) == (status, True), r.text
    r = await api.get("/v1/objects/ho.box/never")
    assert r.status_code == 404 and "no run with id 'object:ho.box:never'" in r.text
