"""Clients that hold the HTTP server: requests that never end, bodies that never come,
more connections than it keeps, and a process out of descriptors.

The bounds are shortened here (`limits` is read when they apply), so the
server's deadlines pass while the tests wait on answers, never on a clock.
Every client is on loopback and every loop of the tests is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from http_helpers import RawRequest, Served
from processes import fusee_script
from starlette.types import Receive, Scope, Send

from fusee_runtime import Ctx, Engine, workflow
from fusee_runtime.control import limits
from fusee_runtime.control.api import Control
from fusee_runtime.control.http import AsgiServer, HttpServer

REPO = Path(__file__).resolve().parents[2]
SERVED_APP = "fusee_http_servedapp"
"""The workflow module that the `served_app` fixture writes (tests/http/conftest.py)."""
TOKEN = "t0ken-for-the-slow-clients"
PARTIAL = b"POST /v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n"
"""The start of a request whose headers never end."""


@workflow
async def http_slow_gate(ctx: Ctx, _: None) -> object:
    return await ctx.wait_for("go")


@pytest.fixture
def short(monkeypatch: pytest.MonkeyPatch) -> None:
    """Deadlines of a fifth of a second."""
    monkeypatch.setattr(limits, "REQUEST_HEAD_S", 0.2)
    monkeypatch.setattr(limits, "REQUEST_BODY_S", 0.2)


@pytest.fixture
async def server(engine: Engine, short: None) -> AsyncIterator[HttpServer]:
    """The API of `engine` on a free port of 127.0.0.1, with short deadlines."""
    served = HttpServer(Control(engine))
    await served.start("127.0.0.1", 0)
    try:
        yield served
    finally:
        await served.close()


def _address(url: str) -> tuple[str, int]:
    host, _, port = url.removeprefix("http://").rpartition(":")
    return host, int(port)


Dial = Callable[..., Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


@pytest.fixture
async def dial() -> AsyncIterator[Dial]:
    """Opens a connection to a URL and writes `data` on it; closes them all at the end."""
    writers: list[asyncio.StreamWriter] = []

    async def open_(
        url: str, data: bytes = b""
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection(*_address(url))
        writers.append(writer)
        writer.write(data)
        await writer.drain()
        return reader, writer

    yield open_
    for writer in writers:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


def _status_and_error(data: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"connection: close" in head.lower(), head
    return int(head.split()[1]), orjson.loads(body)["error"]


# -- deadlines, on the API served in process ----------------------------------------


async def test_headers_that_never_end_get_408_and_the_connection_closes(
    server: HttpServer, dial: Dial
) -> None:
    reader, _ = await dial(server.url, PARTIAL)
    status, error = _status_and_error(await reader.read())  # read() ends: the server closed
    assert (status, error["type"]) == (408, "RequestTimeout")
    assert "did not arrive whole within 0.2 s" in error["message"]


async def test_a_connection_that_never_speaks_is_closed_without_a_word(
    server: HttpServer, dial: Dial
) -> None:
    reader, _ = await dial(server.url)
    assert await reader.read() == b""


async def test_a_body_that_never_ends_gets_408(server: HttpServer, dial: Dial) -> None:
    head = b"POST /v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n"
    reader, _ = await dial(server.url, head + b'{"workflow": ')
    status, error = _status_and_error(await reader.read())
    assert (status, error["type"]) == (408, "RequestTimeout")
    assert "13 bytes in" in error["message"]


async def test_a_kept_alive_connection_is_closed_once_idle(server: HttpServer, dial: Dial) -> None:
    reader, _ = await dial(server.url, b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    answer = await reader.read()  # the answer, then the end once the connection idled
    assert answer.startswith(b"HTTP/1.1 200 OK"), answer
    assert answer.count(b"HTTP/1.1") == 1


async def test_a_long_poll_outlives_the_deadlines(
    engine: Engine, server: HttpServer, dial: Dial
) -> None:
    await engine.start("http_slow_gate", None, id="g-1")
    polling = await RawRequest.send(server.url, "/v1/runs/g-1/result?wait=300")
    # Answered after the poll reached the server: the poll is being served.
    health = await RawRequest.send(server.url, "/v1/health")
    assert (await health.answer())[0] == 200
    # A connection opened after the poll began times out: the poll's deadline,
    # had it one, has passed too.
    late, _ = await dial(server.url, PARTIAL)
    assert _status_and_error(await late.read())[0] == 408
    await engine.signal("g-1", "go", 5)
    status, body = await polling.answer()
    assert (status, body["result"]) == (200, 5)


# -- the bound on connections, on an app that says when a request reaches it ---------


class Held:
    """An ASGI app whose `/hold` requests wait until released; `/` answers at once."""

    def __init__(self) -> None:
        self.entered = asyncio.Semaphore(0)
        self.release = asyncio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        if scope["path"] == "/hold":
            self.entered.release()
            await self.release.wait()
        body = scope["path"].encode()
        length = [(b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": length})
        await send({"type": "http.response.body", "body": body})


@pytest.fixture
async def held(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[Held, str]]:
    """A `Held` app served with a bound of 2 connections; it and its URL."""
    monkeypatch.setattr(limits, "CONNECTIONS_MAX", 2)
    app = Held()
    served = AsgiServer(app)
    await served.start("127.0.0.1", 0)
    try:
        yield app, served.url
    finally:
        app.release.set()
        await served.close()


def _get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode()


async def test_past_the_bound_the_connection_waiting_longest_makes_room(
    held: tuple[Held, str], dial: Dial
) -> None:
    _, url = held
    oldest, _ = await dial(url, PARTIAL)
    newer, newer_writer = await dial(url, PARTIAL)
    third, _ = await dial(url, _get("/"))
    assert (await third.read()).endswith(b"\r\n\r\n/")
    status, error = _status_and_error(await oldest.read())
    assert (status, error["type"]) == (503, "ServiceUnavailable")
    assert "waited longest" in error["message"]
    # The newer one is still open: its request ends, and is answered.
    newer_writer.write(b"Connection: close\r\n\r\n")
    assert (await newer.read()).startswith(b"HTTP/1.1 200 OK")


async def test_when_every_connection_serves_a_request_a_new_one_gets_503(
    held: tuple[Held, str], dial: Dial
) -> None:
    app, url = held
    first, _ = await dial(url, _get("/hold"))
    second, _ = await dial(url, _get("/hold"))
    for _ in range(2):
        await app.entered.acquire()
    refused, _ = await dial(url, _get("/"))
    status, error = _status_and_error(await refused.read())
    assert (status, error["type"]) == (503, "ServiceUnavailable")
    assert "serving 2 connections, its most" in error["message"]
    app.release.set()
    for answer in (first, second):
        assert (await answer.read()).endswith(b"\r\n\r\n/hold")


# -- a real `fusee serve`, held by partial requests -----------------------------------


def _env(served_app: Path) -> dict[str, str]:
    """A child's environment: no FUSEE_ variable, this checkout and the served app importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEE_")}
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(served_app), str(REPO), env.get("PYTHONPATH")])
    )
    return env


@contextlib.contextmanager
def _serving(served_app: Path, home: Path, nofile: int) -> Iterator[Served]:
    """`fusee serve --http 127.0.0.1:0 --token TOKEN` with a descriptor limit of `nofile`."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    limited = (
        "import os, resource, sys; "
        f"resource.setrlimit(resource.RLIMIT_NOFILE, ({nofile}, {hard})); "
        "os.execv(sys.argv[1], sys.argv[1:])"
    )
    command = [fusee_script(), "serve", "--home", str(home), "--app", SERVED_APP]
    child = subprocess.Popen(
        [sys.executable, "-c", limited, *command, "--http", "127.0.0.1:0", "--token", TOKEN],
        cwd=REPO,
        env=_env(served_app),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        serving = orjson.loads(child.stdout.readline() or "{}")
        assert serving.get("event") == "serving", child.communicate()[1]
        yield Served(serving["http"], home, child, serving)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()


def _hold(url: str, count: int) -> list[socket.socket]:
    """`count` connections from loopback, each with a request whose headers never end."""
    held = []
    for _ in range(count):
        sock = socket.create_connection(_address(url))
        held.append(sock)
        with contextlib.suppress(ConnectionError):  # already taken to make room: so be it
            sock.sendall(PARTIAL)
    return held


def test_partial_requests_past_the_bound_leave_the_owner_answering(
    served_app: Path, tmp_path: Path
) -> None:
    # The descriptor limit is 256, so the bound is 64 connections, and 300 partial
    # requests would have taken every descriptor the process has.
    with _serving(served_app, tmp_path / "home", nofile=256) as served:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=served.url, headers=auth) as api:
            started = api.post("/v1/runs", json={"workflow": "http_served_gate", "input": 21})
            wid = started.json()["id"]
            polling = socket.create_connection(_address(served.url))
            polling.sendall(
                f"GET /v1/runs/{wid}/result?wait=300 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Authorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n".encode()
            )
            # Answered on a connection opened after the poll's: the poll is being served.
            with httpx.Client(base_url=served.url, headers=auth) as fresh:
                assert fresh.get("/v1/health").status_code == 200
            held = _hold(served.url, 300)
            try:
                # Through the control socket, as any `fusee` command reaches the owner.
                on = ["--home", str(served.home), "--app", SERVED_APP]
                sent = subprocess.run(
                    [fusee_script(), "signal", wid, "go", '"through the socket"', *on],
                    cwd=REPO,
                    env=_env(served_app),
                    capture_output=True,
                    text=True,
                )
                assert sent.returncode == 0, sent.stderr
                # Already accepted, the long poll answers; a new authorised request too.
                answer = b"".join(iter(lambda: polling.recv(65536), b""))
                assert answer.startswith(b"HTTP/1.1 200 OK"), answer
                assert orjson.loads(answer.partition(b"\r\n\r\n")[2])["result"] == {
                    "x": 42,
                    "got": "through the socket",
                }
                with httpx.Client(base_url=served.url, headers=auth) as fresh:
                    assert fresh.get(f"/v1/runs/{wid}").json()["status"] == "completed"
            finally:
                for sock in held:
                    sock.close()
                polling.close()
        code, _, err = served.stop()
    assert code == 0, err
    lines = err.splitlines()
    assert not [line for line in lines if "Too many open files" in line], lines[:20]
    assert len(lines) <= 5, lines[:20]


def _lowest_free_fd(pid: int) -> int:
    used = {int(fd) for fd in os.listdir(f"/proc/{pid}/fd")}
    return next(fd for fd in range(len(used) + 1) if fd not in used)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc (Linux)")
def test_running_out_of_descriptors_is_logged_once_a_second(
    served_app: Path, tmp_path: Path
) -> None:
    import time

    with _serving(served_app, tmp_path / "home", nofile=1024) as served:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=served.url, headers=auth) as api:
            # The journal has its segment open: an idle owner opens no file.
            started = api.post("/v1/runs", json={"workflow": "http_served_gate", "input": 1})
            assert started.status_code == 201
        pid = served.child.pid
        before = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        # The next descriptor the owner would take is past its limit: every accept fails.
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (_lowest_free_fd(pid), before[1]))
        queued = _hold(served.url, 5)  # the kernel queues them; the owner cannot take them
        unix = socket.socket(socket.AF_UNIX)
        unix.connect(str(served.home / "control.sock"))
        began = time.monotonic()
        said = 0
        assert served.child.stderr is not None
        for line in served.child.stderr:  # ends if the owner dies
            said += "out of system resource" in line
            if said == 3:
                break
        took = time.monotonic() - began
        resource.prlimit(pid, resource.RLIMIT_NOFILE, before)
        with httpx.Client(base_url=served.url, headers=auth) as api:  # it accepts again
            assert api.get("/v1/health").status_code == 200
        for sock in [*queued, unix]:
            sock.close()
        served.child.send_signal(signal.SIGTERM)
        _, rest = served.child.communicate()
    said += rest.count("out of system resource")
    assert said >= 3
    # Two listeners (HTTP, the control socket), each at most once a second.
    assert said <= 2 * (took + 2), f"{said} lines in {took:.1f} s"
    assert served.child.returncode == 0, rest
