"""`HttpServer`: uvicorn on the engine's own loop, on a real socket."""

from __future__ import annotations

import signal
import socket
from collections.abc import AsyncIterator, Callable

import httpx
import pytest
from http_helpers import RawRequest, noting

from fusee_runtime import Ctx, Engine, Rejected, workflow
from fusee_runtime.control.api import Control
from fusee_runtime.control.http import HttpServer


@workflow
async def http_srv_gate(ctx: Ctx, _: None) -> object:
    return await ctx.wait_for("go")


@pytest.fixture
async def server(engine: Engine) -> AsyncIterator[HttpServer]:
    """The API of `engine`, served on a free port of 127.0.0.1."""
    served = HttpServer(Control(engine))
    await served.start("127.0.0.1", 0)
    try:
        yield served
    finally:
        await served.close()


@pytest.fixture
async def client(seen) -> AsyncIterator[Callable[[str], httpx.AsyncClient]]:
    """Makes real httpx clients of a URL."""
    clients: list[httpx.AsyncClient] = []

    def make(url: str) -> httpx.AsyncClient:
        clients.append(httpx.AsyncClient(base_url=url, event_hooks={"response": [noting(seen)]}))
        return clients[-1]

    yield make
    for c in clients:
        await c.aclose()


async def test_it_serves_on_the_port_it_bound(server: HttpServer, client) -> None:
    host, _, port = server.url.removeprefix("http://").rpartition(":")
    assert (host, port.isdigit(), port != "0") == ("127.0.0.1", True, True)
    api = client(server.url)
    answer = await api.post("/v1/runs", json={"workflow": "http_srv_gate", "id": "g-1"})
    assert answer.status_code == 201
    assert (await api.post("/v1/runs/g-1/signals/go", json=7)).status_code == 200
    result = await api.get("/v1/runs/g-1/result", params={"wait": 30})
    assert (result.status_code, result.json()["result"]) == (200, 7)


async def test_close_answers_an_open_long_poll_and_stops_serving(engine: Engine, client) -> None:
    served = HttpServer(Control(engine))
    await served.start("127.0.0.1", 0)
    url = served.url
    api = client(url)
    await api.post("/v1/runs", json={"workflow": "http_srv_gate", "id": "g-2"})
    polling = await RawRequest.send(url, "/v1/runs/g-2/result?wait=300")
    # Answered after the poll reached the server: the poll is being served.
    assert (await api.get("/v1/health")).status_code == 200
    await served.close()
    status, body = await polling.answer()
    assert (status, body["id"]) == (202, "g-2")
    assert body["status"] in ("running", "parked")
    with pytest.raises(httpx.ConnectError):
        await client(url).get("/v1/health")
    with pytest.raises(Rejected, match="not serving"):
        served.url  # noqa: B018
    await served.close()  # twice is harmless


async def test_it_serves_again_after_close(engine: Engine, client) -> None:
    served = HttpServer(Control(engine))
    await served.start("127.0.0.1", 0)
    await served.close()
    await served.start("127.0.0.1", 0)
    try:
        api = client(served.url)
        await api.post("/v1/runs", json={"workflow": "http_srv_gate", "id": "g-3"})
        polling = await RawRequest.send(served.url, "/v1/runs/g-3/result?wait=30")
        assert (await api.get("/v1/health")).status_code == 200  # the poll is being served
        # The close before does not cut this poll short: it waits for the signal.
        await api.post("/v1/runs/g-3/signals/go", json="again")
        status, body = await polling.answer()
        assert (status, body["result"]) == (200, "again")
    finally:
        await served.close()


async def test_it_leaves_the_process_signal_handlers_alone(engine: Engine) -> None:
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    served = HttpServer(Control(engine))
    await served.start("127.0.0.1", 0)
    try:
        assert {sig: signal.getsignal(sig) for sig in before} == before
    finally:
        await served.close()
    assert {sig: signal.getsignal(sig) for sig in before} == before


async def test_a_port_in_use_is_refused_in_one_line(engine: Engine, server: HttpServer) -> None:
    port = int(server.url.rpartition(":")[2])
    other = HttpServer(Control(engine))
    with pytest.raises(Rejected) as refused:
        await other.start("127.0.0.1", port)
    assert str(refused.value) == f"cannot serve HTTP on 127.0.0.1:{port}: Address already in use"
    with pytest.raises(Rejected, match="already serving"):
        await server.start("127.0.0.1", 0)


async def test_ipv6_loopback_is_served_in_brackets(engine: Engine, client) -> None:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    served = HttpServer(Control(engine))
    await served.start("::1", 0)
    try:
        assert served.url.startswith("http://[::1]:")
        assert (await client(served.url).get("/v1/health")).status_code == 200
    finally:
        await served.close()
