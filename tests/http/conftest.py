"""Fixtures for the HTTP API tests.

In process: an engine on a real temp home and fake clock, and httpx clients
of its app (no socket). Out of process: `fusee serve --http 127.0.0.1:0` on
a real socket, with a workflow module written for it. Every response any
test gets is noted in `seen`, and the OpenAPI test, which runs last, checks
that the document declares each status and describes each body.
"""

from __future__ import annotations

import subprocess
import textwrap
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import httpx
import pytest
from http_helpers import Seen, Served, noting
from processes import serve_http, stop_child
from starlette.applications import Starlette

from fusee_runtime import Engine
from fusee_runtime.control.api import Control
from fusee_runtime.control.http import build_app

REPO = Path(__file__).resolve().parents[2]
LAST = "test_every_status_the_tests_saw_is_declared"
"""The OpenAPI test that reads what every other test saw: it runs after them."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    last = [item for item in items if item.name == LAST]
    items[:] = [item for item in items if item.name != LAST] + last


@pytest.fixture(scope="session")
def seen() -> list[Seen]:
    """Every response the tests of this session got from the API, in order."""
    return []


@pytest.fixture
async def engine(make_engine) -> AsyncIterator[Engine]:
    """An open engine on the test's home and fake clock, without its control socket."""
    async with make_engine(control=False) as engine:
        yield engine


@pytest.fixture
async def client_of(seen: list[Seen]) -> AsyncIterator[Callable[..., httpx.AsyncClient]]:
    """Makes httpx clients that call an app in process; `headers` go with every request."""
    clients: list[httpx.AsyncClient] = []

    def make(app: Starlette, **headers: str) -> httpx.AsyncClient:
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://127.0.0.1:7777",
            headers=headers,
            event_hooks={"response": [noting(seen)]},
        )
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.aclose()


@pytest.fixture
def api(engine: Engine, client_of: Callable[..., httpx.AsyncClient]) -> httpx.AsyncClient:
    """A client of the API of `engine`, without a token."""
    return client_of(build_app(Control(engine)))


# -- `fusee serve` in a child process --------------------------------------------------

SERVED_APP = "fusee_http_servedapp"
SERVED_APP_SOURCE = '''
"""Workflows for the `fusee serve` tests of tests/http."""

import logging

from fusee_runtime import Ctx, step, workflow


@step
async def http_served_double(x: int) -> int:
    return 2 * x


@workflow
async def http_served_quick(ctx: Ctx, x: int) -> int:
    return await http_served_double(x)


@workflow
async def http_served_gate(ctx: Ctx, x: int) -> dict:
    state = {"x": x}
    ctx.on_query("x", lambda arg: state["x"])

    def set_x(value):
        old, state["x"] = state["x"], value
        return old

    ctx.on_update("limit", set_x)
    got = await ctx.wait_for("go")
    return {"x": await http_served_double(x), "got": got}


def http_served_send(completion):
    # The server prints it as a `log` event on its stdout, where the test reads it.
    logging.getLogger("fusee.app").info("completion url %s", completion.url)


@workflow
async def http_served_review(ctx: Ctx, doc: str) -> dict:
    return {"doc": doc, "verdict": await ctx.await_completion("review", http_served_send)}


@workflow(cron="0 4 * * *")
async def http_served_nightly(ctx: Ctx, at: str) -> str:
    return at
'''


@pytest.fixture(scope="session")
def served_app(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the workflow module the children serve."""
    directory = tmp_path_factory.mktemp("served-app")
    (directory / f"{SERVED_APP}.py").write_text(textwrap.dedent(SERVED_APP_SOURCE))
    return directory


@pytest.fixture(scope="module")
def serve(
    tmp_path_factory: pytest.TempPathFactory, served_app: Path
) -> Iterator[Callable[..., Served]]:
    """Starts `fusee serve --http 127.0.0.1:0 [ARGS...]` on a fresh home; returns once it
    serves. Children still running when the module's tests end are stopped."""
    children: list[subprocess.Popen[str]] = []

    def start(*args: str) -> Served:
        home = tmp_path_factory.mktemp("served-home")
        try:
            child, serving = serve_http(home, served_app, SERVED_APP, *args)
        except RuntimeError as e:
            pytest.fail(str(e))
        children.append(child)
        return Served(serving["http"], home, child, serving)

    yield start
    for child in children:
        stop_child(child)
